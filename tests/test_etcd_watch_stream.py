"""Pure parts of the etcd Watch stream (`actors/etcd/watch_stream.py`) without Ray:
etcd's fragmenting of a large response and the events' protobuf form."""

from __future__ import annotations

from typing import Any

from sediment.actors.etcd.pb import kv_pb2 as _kv_pb2
from sediment.actors.etcd.pb import rpc_pb2 as _rpc_pb2
from sediment.actors.etcd.watch_stream import event_pb, fragments
from sediment.actors.kv import wire
from sediment.actors.kv.types import Event, KeyValue

pb: Any = _rpc_pb2
kv_pb2: Any = _kv_pb2


def _response(sizes: list[int]) -> Any:
    header = pb.ResponseHeader(cluster_id=1, member_id=2, revision=9, raft_term=3)
    events = [event_pb(Event("put", KeyValue(f"k{i}".encode(), b"v" * n, 9, 9, 1)))
              for i, n in enumerate(sizes)]
    return pb.WatchResponse(header=header, watch_id=4, events=events)


def test_a_response_within_the_limit_or_with_one_event_is_sent_whole() -> None:
    small = _response([10, 10])
    assert fragments(small, 10_000) == [small]
    one_big = _response([50_000])
    assert fragments(one_big, 1_000) == [one_big]
    assert not one_big.fragment


def test_a_large_response_is_split_every_part_but_the_last_marked_fragment() -> None:
    response = _response([300] * 10 + [2_000] + [100] * 5)
    limit = 1_000
    parts = fragments(response, limit)
    assert len(parts) > 2
    assert [p.fragment for p in parts] == [True] * (len(parts) - 1) + [False]
    assert [e for p in parts for e in p.events] == list(response.events)  # order kept
    for p in parts:
        assert p.header == response.header and p.watch_id == 4 and p.events
        assert len(p.events) == 1 or p.ByteSize() <= limit + 16  # one event may exceed it


def test_an_event_keeps_its_kind_key_value_and_prev_kv_on_the_wire() -> None:
    prev = KeyValue(b"k", b"old", 2, 2, 1)
    e = Event("delete", KeyValue(b"k", b"", 2, 5, 0), prev_kv=prev)
    out = event_pb(e)
    assert out.type == kv_pb2.Event.DELETE and out.kv.key == b"k" and out.kv.mod_revision == 5
    assert wire.kv_from_pb(out.prev_kv) == prev
    assert not event_pb(Event("put", KeyValue(b"k", b"v", 5, 5, 1))).HasField("prev_kv")
