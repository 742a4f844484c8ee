"""Pure parts of the etcd Watch stream (`actors/etcd/shell/watch_stream.py`) without Ray:
etcd's fragmenting of a large response and the events' protobuf form."""

from __future__ import annotations

from typing import Any

from sediment.actors.etcd.pb import kv_pb2 as _kv_pb2
from sediment.actors.etcd.pb import rpc_pb2 as _rpc_pb2
from sediment.actors.etcd.shell.watch_stream import event_pb, fragments
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


def test_the_split_is_etcds_at_the_limit_split_every_part_below_it_and_full() -> None:
    """etcd 3.4's sendFragments to the byte: a response AT the limit is split (etcd
    sends whole only below it), a part of several events stays below the limit measured
    as sent (fragment flag included), and one more event would have reached it."""
    response = _response([300] * 6)
    limit = response.ByteSize()
    parts = fragments(response, limit)
    assert len(parts) > 1
    for p in parts:
        assert len(p.events) == 1 or p.ByteSize() < limit
    for p, after in zip(parts, parts[1:], strict=False):
        fuller = pb.WatchResponse()
        fuller.CopyFrom(p)
        fuller.events.append(after.events[0])
        assert fuller.ByteSize() >= limit


def test_an_event_keeps_its_kind_key_value_and_prev_kv_on_the_wire() -> None:
    prev = KeyValue(b"k", b"old", 2, 2, 1)
    e = Event("delete", KeyValue(b"k", b"", 2, 5, 0), prev_kv=prev)
    out = event_pb(e)
    assert out.type == kv_pb2.Event.DELETE and out.kv.key == b"k" and out.kv.mod_revision == 5
    assert wire.kv_from_pb(out.prev_kv) == prev
    assert not event_pb(Event("put", KeyValue(b"k", b"v", 5, 5, 1))).HasField("prev_kv")


def test_the_watch_script_pins_etcds_answers() -> None:
    """The transcript `tests/test_etcd_wire.py` compares Sediment's with, as a real etcd
    3.4 gives it: events of one revision in the txn's op order (d before c), prev_kv on
    the delete only, the NODELETE filter, a progress response (watch id -1, etcd's
    InvalidWatchID) carrying the head once both watches are synced, a cancel answered
    with the watch's id, and nothing for the canceled watch after it; a quiet
    progress_notify watch gets a notify with its own id and the head; a fragment watch
    gets a revision of three large events with prev_kv, over the request limit plus
    512 KiB (etcd's gRPC overhead: two of them under it would come whole), as one
    event per response, all but the last marked fragment."""
    from etcd_helpers import RealEtcd, require_etcd
    from etcd_watch_script import BIG, ETCD_ARGS, PREV, watch_transcript

    require_etcd()
    with RealEtcd(extra_args=ETCD_ARGS) as etcd:
        t = watch_transcript(etcd.endpoint, b"/script/")
    put, delete = "put", "delete"
    a1 = (b"/script/a", b"1", 0, 0, 1)
    assert t["events"]["w1"] == [
        (put, a1, None), (put, (b"/script/b", b"2", 1, 1, 1), None),
        (delete, (b"/script/a", b"", None, 2, 0), a1),
        (put, (b"/script/d", b"4", 3, 3, 1), None), (put, (b"/script/c", b"3", 3, 3, 1), None)]
    assert [(kind, kv[0]) for kind, kv, _ in t["events"]["w2"]] == [
        (put, b"/script/a"), (put, b"/script/b"), (put, b"/script/d"), (put, b"/script/c"),
        (put, b"/script/e")]
    assert [(s["watch"], s["created"], s["canceled"], s["revision"]) for s in t["stream"]] == [
        ("w1", True, False, None), ("w2", True, False, None), (-1, False, False, 3),
        ("w1", False, True, None), (-1, False, False, 4), ("w3", True, False, None),
        ("w4", True, False, None)]
    assert t["split_revisions"] == [] and t["header_behind_events"] == []
    assert t["progress_notify"] == ("w3", 4)  # nothing was written since the live put
    assert t["events"]["w3"] == [] and t["events"]["w4"] == []  # w4's are told in parts
    assert t["fragments"] == [(more, [(0, b"/script-big/" + k, BIG, 8, PREV)])
                              for more, k in ((True, b"x"), (True, b"y"), (False, b"z"))]
