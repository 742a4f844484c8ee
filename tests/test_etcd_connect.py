"""`sediment.connect` against a real etcd 3.4 (no Ray): the client is etcd's, so what it
does against etcd it does against Sediment's endpoints (`tests/test_etcd_wire.py` drives
it against a cluster on Ray). str and bytes keys, the prefix helpers, a watch that
iterates (a `for` loop) and ends when canceled from another thread, a compacted start,
leases, status and members."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from etcd_helpers import RealEtcd, require_etcd

from sediment import ErrCompacted, connect
from sediment.actors.etcd.client import Client, Lease
from sediment.actors.kv.types import Compare, Put, Range


@pytest.fixture
def etcd() -> Iterator[Client]:
    require_etcd()
    with RealEtcd() as real, connect(f"http://{real.endpoint}") as client:
        yield client


def test_str_and_bytes_keys_are_the_same_key_and_prefix_helpers_bound_the_range(
        etcd: Client) -> None:
    first = etcd.put("/app/a", "1").revision
    assert first == 2  # etcd's numbering: the first write is revision 2
    etcd.put(b"/app/b", b"2")
    etcd.put("/app0", "outside")  # the first key after the prefix's range
    assert etcd.value(b"/app/a") == etcd.value("/app/a") == b"1"
    assert [kv.key for kv in etcd.get_prefix("/app/").kvs] == [b"/app/a", b"/app/b"]
    assert etcd.get_prefix(b"/app/", count_only=True).count == 2
    assert etcd.value("/app/a", revision=first) == b"1"
    assert etcd.value("/missing") is None
    deleted = etcd.delete_prefix("/app/", prev_kv=True)
    assert deleted.deleted == 2 and [kv.key for kv in deleted.prev_kvs] == [b"/app/a",
                                                                             b"/app/b"]
    assert etcd.value("/app0") == b"outside"


def test_txn_with_compares_and_per_op_revisions(etcd: Client) -> None:
    etcd.put("k", "v1")  # 2
    done = etcd.txn([Compare(b"k", "value", "=", b"v1")], [Range(b"k"), Put(b"k", b"v2")])
    assert done.succeeded and done.revision == 3
    assert [r.revision for r in done.responses] == [2, 3]  # etcd stamps each op
    failed = etcd.txn([Compare(b"k", "value", "=", b"v1")], [Put(b"k", b"no")], [Range(b"k")])
    assert not failed.succeeded and failed.responses[0].kvs[0].value == b"v2"


def test_a_watch_iterates_and_a_cancel_from_another_thread_ends_the_loop(
        etcd: Client) -> None:
    first = etcd.put("/w/a", "1").revision
    etcd.put("/w/b", "2")
    seen: list[tuple[str, bytes, bytes]] = []
    with etcd.watch("/w/", prefix=True, start_revision=first, prev_kv=True) as watch:
        for event in watch:  # replay, then live; blocks until canceled
            seen.append((event.kind, event.kv.key, event.kv.value))
            if len(seen) == 2:
                etcd.delete("/w/a")
            if len(seen) == 3:
                assert event.prev_kv is not None and event.prev_kv.value == b"1"
                threading.Thread(target=watch.cancel).start()
    assert seen == [("put", b"/w/a", b"1"), ("put", b"/w/b", b"2"), ("delete", b"/w/a", b"")]


def test_filters_and_a_compacted_start(etcd: Client) -> None:
    first = etcd.put("/f/k", "1").revision
    etcd.delete("/f/k")
    etcd.put("/f/k", "2")
    with etcd.watch("/f/", prefix=True, start_revision=first, no_put=True) as deletes:
        assert [(e.kind, e.kv.key) for e in deletes.events(1)] == [("delete", b"/f/k")]
    head = etcd.get("/f/k").revision
    etcd.compact(head)
    with pytest.raises(ErrCompacted), etcd.watch("/f/", prefix=True,
                                                 start_revision=first) as old:
        list(old)


def test_leases_status_and_members(etcd: Client) -> None:
    lease = etcd.lease_grant(30)
    assert isinstance(lease, Lease) and lease.ttl == 30
    etcd.put("/l/a", "1", lease=lease)
    etcd.put("/l/b", "2", lease=lease.id)
    assert lease.id in etcd.leases()
    assert etcd.lease_keep_alive_once(lease) == 30
    status = etcd.lease_time_to_live(lease, keys=True)
    assert status.granted_ttl == 30 and status.keys == (b"/l/a", b"/l/b")
    head = etcd.get("/l/a").revision
    assert etcd.lease_revoke(lease) == head + 1  # both keys deleted in one revision
    assert etcd.get_prefix("/l/").kvs == []
    assert etcd.lease_keep_alive_once(lease) == 0  # etcd's answer for a lease gone
    assert etcd.status().version.startswith("3.4.")
    (name, urls), = etcd.members()
    assert name and urls
