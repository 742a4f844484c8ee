"""Bad input at the KV's client boundary (sediment.actors.kv.validation): a clear typed
error, and nothing written — no raft log entry, no revision. The pure checks as a table,
the Store and the client agreeing on them (hypothesis), and the same table against a
3-node sim cluster whose raft log and head must not move."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sediment.actors.kv import validation as v
from sediment.actors.kv.errors import (
    ErrDuplicateKey,
    ErrEmptyKey,
    ErrKeyTooLarge,
    ErrRequestTooLarge,
    ErrTooManyOps,
    ErrValueTooLarge,
    InvalidRequest,
)
from sediment.actors.kv.machine import netsy
from sediment.actors.kv.types import Compact, Compare, DeleteRange, Put, Range, Txn
from sediment.actors.log.raft.types import Entry
from sediment.actors.log.shell.cluster import propose
from sediment.runtime import api
from sediment.wiring.client import Client
from sediment.wiring.cluster import Cluster

SMALL = v.Limits(max_key_bytes=8, max_value_bytes=16, max_request_bytes=20, max_txn_ops=3)
MIB = 1024 * 1024
ETCD_REQUEST = 1536 * 1024  # etcd's --max-request-bytes default
A = Put(b"a", b"1")
Bad = Any  # deliberately ill-typed requests: what a careless caller really sends
# untyped constructors for them
P: Any = Put
D: Any = DeleteRange
R: Any = Range
C: Any = Compact
T: Any = Txn
Cmp: Any = Compare

# ---------------------------------------------------------------- the pure checks --

# (request, limits, the exact error)
PURE_CASES: list[tuple[Bad, v.Limits, type[Exception]]] = [
    (P(b"", b"v"), SMALL, ErrEmptyKey),
    (P(b"k" * 9, b"v"), SMALL, ErrKeyTooLarge),
    (P(b"k", b"v" * 17), SMALL, ErrValueTooLarge),
    (P(b"k" * 8, b"v" * 13), SMALL, ErrRequestTooLarge),
    (P("k", b"v"), SMALL, InvalidRequest),
    (P(b"k", "v"), SMALL, InvalidRequest),
    (P(bytearray(b"k"), b"v"), SMALL, InvalidRequest),
    (P(b"k", None), SMALL, InvalidRequest),
    (P(b"k", b"v", prev_kv=1), SMALL, InvalidRequest),
    (D(b""), SMALL, ErrEmptyKey),
    (D(b"a", b"z" * 9), SMALL, ErrKeyTooLarge),
    (D(b"a", "z"), SMALL, InvalidRequest),
    (R(b"a", sort_order="up"), SMALL, InvalidRequest),
    (R(b"a", sort_target=3), SMALL, InvalidRequest),
    (R(b"a", min_mod_revision="1"), SMALL, InvalidRequest),
    (R(b"a", revision=2.5), SMALL, InvalidRequest),
    (R(b"a", revision=True), SMALL, InvalidRequest),
    (R(b"a", count_only="yes"), SMALL, InvalidRequest),
    (C(1, physical="yes"), SMALL, InvalidRequest),
    (C("3"), SMALL, InvalidRequest),
    (T((), (A,) * 4), SMALL, ErrTooManyOps),
    (T((), (), (A,) * 4), SMALL, ErrTooManyOps),
    (T((Cmp(b"a", "version", "=", 0),) * 4), SMALL, ErrTooManyOps),
    (T((), (A, Put(b"a", b"2"))), SMALL, ErrDuplicateKey),
    (T((), (D(b"a", b"c"), Put(b"b", b"2"))), SMALL, ErrDuplicateKey),
    (T((), (A,), (P(b"", b"2"),)), SMALL, ErrEmptyKey),  # the branch not taken too
    (T((), (P(b"k" * 8, b"v" * 10), Put(b"j" * 8, b"v" * 10))), SMALL, ErrRequestTooLarge),
    (T((), (R(b"", revision=-1),)), SMALL, ErrEmptyKey),
    (T((Cmp(b"a", "version", "~", 1),)), SMALL, InvalidRequest),
    (T((Cmp(b"a", "bogus", "=", 1),)), SMALL, InvalidRequest),
    (T((Cmp(b"a", "version", "=", b"x"),)), SMALL, InvalidRequest),
    (T((Cmp(b"a", "version", "=", True),)), SMALL, InvalidRequest),
    (T((Cmp(b"a", "value", "=", 3),)), SMALL, InvalidRequest),
    (T(("not a compare",)), SMALL, InvalidRequest),
    (T((), (T((), ("op",)),)), SMALL, InvalidRequest),
    # a nested txn: its ops are checked, within what its parent leaves of max_txn_ops
    (T((), (A, T((), (A,) * 3))), SMALL, ErrTooManyOps),
    (T((), (A, T((), (P(b"", b""),)))), SMALL, ErrEmptyKey),
    (T((), (A, T((), (A,)))), SMALL, ErrDuplicateKey),
    (T((), (T((), (A,)), T((), (), (A,)))), SMALL, ErrDuplicateKey),
    (T(None), SMALL, InvalidRequest),
    (T((), "ab"), SMALL, InvalidRequest),
    (("put", b"k", b"v"), SMALL, InvalidRequest),
    (None, SMALL, InvalidRequest),
    # etcd's defaults: 1.5 MiB per request, 128 ops per txn part
    (P(b"k", b"v" * ETCD_REQUEST), v.DEFAULT_LIMITS, ErrRequestTooLarge),
    (P(b"k", b"v" * (ETCD_REQUEST + 1)), v.DEFAULT_LIMITS, ErrValueTooLarge),
    (P(b"k" * (ETCD_REQUEST + 1), b""), v.DEFAULT_LIMITS, ErrKeyTooLarge),
    (T((), tuple(P(b"k%d" % i, b"") for i in range(129))), v.DEFAULT_LIMITS, ErrTooManyOps),
]

GOOD_CASES: list[tuple[Any, v.Limits]] = [
    (Put(b"k" * 8, b"v" * 12), SMALL),  # exactly max_request_bytes
    (Put(b"k", b"v" * 16), SMALL),
    (Put(b"k", b""), SMALL),
    (DeleteRange(b"a", b"\0"), SMALL),
    (DeleteRange(b"a", b"a"), SMALL),  # an empty range is not an error
    (DeleteRange(b"b", b"a"), SMALL),  # nor is one that ends before it starts (etcd)
    (Range(b"b", b"a"), SMALL),
    (Range(b"a", revision=-1, limit=-1), SMALL),  # etcd: head, and no limit
    (Range(b"a", sort_order="descend", sort_target="value", min_create_revision=3), SMALL),
    (Compact(-1), SMALL),  # the store answers ErrCompacted, as etcd does
    # etcd's checkIntervals takes a delete's range_end literally: "\0" and an end before
    # the key cover no put (a txn deleting [a, "\0") and putting z is accepted)
    (Txn((), (DeleteRange(b"a", b"\0"), Put(b"z", b"2"))), SMALL),
    (Txn((), (DeleteRange(b"c", b"a"), Put(b"b", b"2"))), SMALL),
    # a nested txn's two branches may put one key (only one runs)
    (Txn((), (Txn((), (A,), (A,)),)), SMALL),
    (Txn((Compare(b"a", "lease", "=", 0),), (Txn((), (A,)),)), SMALL),
    (Range(b"a", b"b", revision=7, limit=2, count_only=True), SMALL),
    (Compact(0), SMALL),  # the store, not the request, decides it is compacted
    (Txn((Compare(b"a", "value", "=", b"1"),), (A, Put(b"b", b""), Put(b"c", b"")),
         (DeleteRange(b"b"),) * 3), SMALL),  # overlapping deletes are fine
    (Txn((), (A, DeleteRange(b"b", b"c"))), SMALL),
    (Put(b"k", b"v" * (ETCD_REQUEST - 1)), v.DEFAULT_LIMITS),
    (Txn((), tuple(Put(b"k%d" % i, b"") for i in range(128))), v.DEFAULT_LIMITS),
]


@pytest.mark.parametrize(("request_", "limits", "error"), PURE_CASES)
def test_bad_request_gets_its_exact_error(
    request_: Bad, limits: v.Limits, error: type[Exception]
) -> None:
    with pytest.raises(InvalidRequest) as info:
        v.check_request(request_, limits)
    assert type(info.value) is error, info.value


@pytest.mark.parametrize(("request_", "limits"), GOOD_CASES)
def test_good_request_passes(request_: Any, limits: v.Limits) -> None:
    v.check_request(request_, limits)


@pytest.mark.parametrize(
    "fields",
    [{"max_key_bytes": 0}, {"max_txn_ops": -1}, {"max_request_bytes": 1.5},
     {"max_value_bytes": True}],
)
def test_limits_must_be_positive_ints(fields: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        v.Limits(**fields)


def test_default_limits_are_etcds() -> None:
    assert v.DEFAULT_LIMITS.max_request_bytes == 1.5 * MIB
    assert v.DEFAULT_LIMITS.max_txn_ops == 128
    with pytest.raises(AttributeError):  # frozen: one object the client and machines share
        v.DEFAULT_LIMITS.max_txn_ops = 1  # type: ignore[misc]


# ------------------------------------------- the Store agrees with the client's checks --

junk_key = st.sampled_from([b"", b"a", b"b", b"k" * 9, "a", bytearray(b"a"), None, 3])
junk_value = st.sampled_from([b"", b"v", b"v" * 17, b"v" * 12, "v", None])
junk_end = st.sampled_from([None, b"\0", b"", b"a", b"c", b"z" * 9, 5])
junk_int = st.sampled_from([0, 1, 2, 99, -1, 2.5, True, None])
junk_flag = st.sampled_from([False, True, 0, "x"])
put_st = st.builds(Put, junk_key, junk_value, junk_flag)
delete_st = st.builds(DeleteRange, junk_key, junk_end, junk_flag)
range_st = st.builds(Range, junk_key, junk_end, junk_int, junk_int, junk_flag, junk_flag)
compare_st = st.builds(
    Compare,
    junk_key,
    st.sampled_from(["value", "version", "create_revision", "mod_revision", "lease"]),
    st.sampled_from(["=", "!=", "<", ">", "~"]),
    st.one_of(junk_value, junk_int),
    junk_end,
)
op_st = st.one_of(put_st, delete_st, range_st)
part = st.one_of(st.lists(op_st, max_size=4).map(tuple), st.sampled_from([None, "x"]))
txn_st = st.builds(Txn, st.lists(compare_st, max_size=4).map(tuple), part, part)
request_st = st.one_of(put_st, delete_st, range_st, txn_st, st.builds(Compact, junk_int))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(request_st, min_size=1, max_size=6))
def test_the_store_refuses_exactly_what_the_client_refuses(requests: list[Any]) -> None:
    """One module decides both sides: a request the client lets through is never refused
    as invalid when applied, and one it refuses gets the same error from the machine
    (which, through the log, would have consumed an entry and nothing else)."""
    with tempfile.TemporaryDirectory() as d:
        m = netsy(d, limits=SMALL)
        m.apply(Entry(1, 1, 0.0, Put(b"a", b"1")))
        for index, request in enumerate(requests, start=2):
            try:
                v.check_request(request, SMALL)
                expected: type[Exception] | None = None
            except InvalidRequest as err:
                expected = type(err)
            head, rows = m.store.head, m.store.rows()
            result = m.apply(Entry(index, 1, 0.0, request))
            if expected is None:
                assert not isinstance(result, InvalidRequest), (request, result)
            else:
                assert type(result) is expected, (request, result)
                assert (m.store.head, m.store.rows()) == (head, rows)
        m.close()


# ------------------------------------------------------------- on a sim cluster --


def _start(path: Path, limits: v.Limits, seed: int) -> Cluster:
    rt = api.start("sim", seed=seed, nodes=("n1", "n2", "n3"))
    # no compaction cycle during the test: nothing but the client may write
    return Cluster.start(data_dir=str(path), runtime=rt, compaction_interval=3600.0,
                         limits=limits)


@pytest.fixture(scope="module")
def small_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster = _start(tmp_path_factory.mktemp("small"), SMALL, seed=11)
    yield cluster
    cluster.rt.shutdown()


@pytest.fixture(scope="module")
def etcd_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster = _start(tmp_path_factory.mktemp("etcd"), v.DEFAULT_LIMITS, seed=12)
    yield cluster
    cluster.rt.shutdown()


def value(kv: Client, key: bytes) -> bytes | None:
    kv_ = kv.get(key)
    return None if kv_ is None else kv_.value


def written(cluster: Cluster) -> tuple[int, int, int]:
    """(raft last index, commit index, KV head), once every member agrees on all three:
    what any write moves. Waits (virtual time) for the followers to catch up first."""
    for _ in range(50):
        views = set()
        for node in cluster.nodes:
            status = cluster.node(node).raft_status()
            assert status is not None
            views.add((status["last_index"], status["commit"], status["head"]))
        if len(views) == 1:
            return views.pop()
        cluster.rt.sleep(0.2)
    raise AssertionError(f"the members never agreed: {views}")


Call = Callable[[Any], object]  # a Client, called with whatever a careless caller passes

CLUSTER_CASES: list[tuple[str, Call, type[Exception]]] = [
    ("empty key", lambda c: c.put(b"", b"v"), ErrEmptyKey),
    ("key too large", lambda c: c.put(b"k" * 9, b"v"), ErrKeyTooLarge),
    ("value too large", lambda c: c.put(b"k", b"v" * 17), ErrValueTooLarge),
    ("request too large", lambda c: c.put(b"k" * 8, b"v" * 13), ErrRequestTooLarge),
    ("str key", lambda c: c.put("k", b"v"), InvalidRequest),
    ("str value", lambda c: c.put(b"k", "v"), InvalidRequest),
    ("bytearray key", lambda c: c.put(bytearray(b"k"), b"v"), InvalidRequest),
    ("delete empty key", lambda c: c.delete(b""), ErrEmptyKey),
    ("float revision", lambda c: c.range(b"a", revision=1.5), InvalidRequest),
    ("serializable empty key",
     lambda c: c.range(b"", b"a", serializable=True, node="n2"), ErrEmptyKey),
    ("str compact", lambda c: c.compact("3"), InvalidRequest),
    ("txn too many success ops", lambda c: c.txn([], [A] * 4), ErrTooManyOps),
    ("txn too many failure ops", lambda c: c.txn([], [], [A] * 4), ErrTooManyOps),
    ("txn too many compares",
     lambda c: c.txn([Compare(b"a", "version", "=", 0)] * 4), ErrTooManyOps),
    ("txn duplicate put", lambda c: c.txn([], [A, Put(b"a", b"2")]), ErrDuplicateKey),
    ("txn put inside a delete",
     lambda c: c.txn([], [DeleteRange(b"a", b"c"), Put(b"b", b"2")]), ErrDuplicateKey),
    ("txn bad op in the other branch", lambda c: c.txn([], [A], [Put(b"", b"2")]), ErrEmptyKey),
    ("txn too large in sum",
     lambda c: c.txn([], [Put(b"k" * 8, b"v" * 10), Put(b"j" * 8, b"v" * 10)]),
     ErrRequestTooLarge),
    ("txn unknown compare op",
     lambda c: c.txn([Cmp(b"a", "version", "~", 1)]), InvalidRequest),
    ("txn unknown compare target",
     lambda c: c.txn([Cmp(b"a", "owner", "=", 1)]), InvalidRequest),
    ("txn compare of the wrong type",
     lambda c: c.txn([Compare(b"a", "version", "=", b"1")]), InvalidRequest),
    ("txn compare is not a Compare", lambda c: c.txn(["a = 1"]), InvalidRequest),
    ("txn nested bad op", lambda c: c.txn([], [Txn((), ("x",))]), InvalidRequest),
    ("txn compare not a list", lambda c: c.txn("abc"), InvalidRequest),
    ("txn nested duplicate put", lambda c: c.txn([], [A, Txn((), (A,))]), ErrDuplicateKey),
]


@pytest.mark.parametrize(("name", "call", "error"), CLUSTER_CASES,
                         ids=[case[0] for case in CLUSTER_CASES])
def test_bad_request_on_a_cluster_is_refused_before_the_log(
    small_cluster: Cluster, name: str, call: Call, error: type[Exception]
) -> None:
    kv = small_cluster.client()
    before = written(small_cluster)
    with pytest.raises(InvalidRequest) as info:
        call(kv)
    assert type(info.value) is error, info.value
    assert written(small_cluster) == before, name


ETCD_CASES: list[tuple[str, Call, type[Exception]]] = [
    ("1.5 MiB value", lambda c: c.put(b"k", b"v" * ETCD_REQUEST), ErrRequestTooLarge),
    ("value over 1.5 MiB", lambda c: c.put(b"k", b"v" * (ETCD_REQUEST + 1)), ErrValueTooLarge),
    ("129 ops", lambda c: c.txn([], [Put(b"k%d" % i, b"") for i in range(129)]), ErrTooManyOps),
]


@pytest.mark.parametrize(("name", "call", "error"), ETCD_CASES, ids=[c[0] for c in ETCD_CASES])
def test_etcds_default_limits_on_a_cluster(
    etcd_cluster: Cluster, name: str, call: Call, error: type[Exception]
) -> None:
    kv = etcd_cluster.client()
    before = written(etcd_cluster)
    with pytest.raises(InvalidRequest) as info:
        call(kv)
    assert type(info.value) is error, info.value
    assert written(etcd_cluster) == before, name


def test_requests_at_the_limits_are_written(etcd_cluster: Cluster) -> None:
    kv = etcd_cluster.client()
    big = kv.put(b"big", b"v" * (ETCD_REQUEST - 3))
    assert value(kv, b"big") == b"v" * (ETCD_REQUEST - 3)
    many = kv.txn([], [Put(b"k%d" % i, b"") for i in range(128)])
    assert many.succeeded and many.revision > big.revision
    assert kv.range(b"k", b"l", count_only=True).count == 128


def test_the_machines_enforce_the_clusters_limits_too(small_cluster: Cluster) -> None:
    """A proposer that skips the client's checks (another client, old code) still gets
    the typed error: the limits reached every member's machine. The entry is in the log,
    but no member wrote a revision."""
    last, _, head = written(small_cluster)
    bad, result = propose(small_cluster.rt, small_cluster.spec, Put(b"k", b"v" * 17))
    assert type(result) is ErrValueTooLarge and bad == last + 1
    good, result = propose(small_cluster.rt, small_cluster.spec, Put(b"ok", b"v"))
    assert not isinstance(result, Exception) and good == bad + 1
    # the bad entry took a log index but no revision: the good one is the next revision
    assert written(small_cluster) == (good, good, head + 1)
    assert small_cluster.client().get(b"k") is None


def test_a_good_request_after_the_bad_ones_is_written(small_cluster: Cluster) -> None:
    kv = small_cluster.client()
    before = written(small_cluster)
    res = kv.put(b"k" * 8, b"v" * 12)  # exactly max_request_bytes
    after = written(small_cluster)
    assert res.revision == after[2] > before[2]
    assert value(kv, b"k" * 8) == b"v" * 12


def test_cluster_start_refuses_bad_limits(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        bad: Any = {"max_txn_ops": 3}
        Cluster.start(data_dir=str(tmp_path), backend="sim", limits=bad)
