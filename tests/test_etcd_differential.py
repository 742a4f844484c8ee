"""The store against a real etcd 3.4: the same seeded random request sequence to both,
every answer compared field by field (header ids aside: the results carry only the
revision), errors by type and exact etcd description.

The requests go to etcd through `EtcdClient` (gRPC, etcd's compiled stubs) and to an
in-process `Store` directly, or (`--target cluster`) through the client of a 3-node KV
cluster on the simulator, so every request is a raft entry and the revisions are the
machine's; `tests/test_etcd_wire.py` sends them through the same client to Sediment's
gRPC server on Ray. CI runs a few seeds; more by hand:

    .venv/bin/python tests/test_etcd_differential.py --seeds 50 [--first 100] [--steps 300]
        [--target store|cluster|wire]

`--target wire` starts a local Ray runtime and one 3-node Sediment cluster serving
etcd's gRPC API (`sediment_wire`, which the Ray test uses too) and one etcd, and sends
every seed's requests to both through the same client, one seed after the other: a
fresh cluster per seed would cost a Ray start each, and a fresh key prefix would not
give fresh revisions (they are the whole store's). Two servers that answered the same
sequence the same way are in the same state, so each seed starts from equal states
(not from revision 1); the first seed that differs ends the run, as the states after
it may differ. Run it under the CPU lock, then `ray stop --force`.

Leases are in the sequence as Sediment serves them: a grant becomes the command the
server proposes (`actors/etcd/shell/leases.py` `grant_command`: TTL checked, id chosen when
0) and is applied by the KV machine (the in-process target applies it as a member
does, `NetsyMachine.apply`; the cluster proposes it through raft); TimeToLive and
Leases are the machine's queries. Both sides choose their own id for a grant with id
0, so Sediment's ids are translated to etcd's (`LeaseIds`). What is time, not state,
is left out: the TTL left (etcd's clock against Sediment's lessor's, a bound and not an
equality) and expiry (long TTLs).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from etcd_helpers import RealEtcd, require_etcd
from etcd_requests import RequestGen, _keeps_what_was_deleted

from sediment.actors.etcd.shell.leases import grant_command
from sediment.actors.kv.errors import KvError
from sediment.actors.kv.etcd_client import EtcdClient, EtcdError
from sediment.actors.kv.machine import NetsyMachine
from sediment.actors.kv.queries import AllLeases, LeaseLookup
from sediment.actors.kv.types import (
    Compact,
    Compare,
    DeleteRange,
    LeaseGrant,
    LeaseGrantResult,
    LeaseInfo,
    LeaseRevoke,
    Put,
    Range,
    RangeResult,
    Txn,
)
from sediment.actors.log.raft.types import Entry

CI_SEEDS = (0, 1, 2)
STEPS = 200


def _answer(fn: Any) -> Any:
    try:
        return fn()
    except KvError as err:
        return err


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, Exception) or isinstance(b, Exception):
        # etcd's error (a), the store's (b): the same etcd error, or a finer one of it;
        # an etcd error without a KV type of its own (a lease's) by its exact description
        if isinstance(a, EtcdError) and a.name is not None:
            return isinstance(b, KvError) and str(a) == str(b)
        return isinstance(a, Exception) and isinstance(b, type(a)) and str(a) == str(b)
    return bool(_comparable(a) == _comparable(b))


def _comparable(answer: Any) -> Any:
    """An answer less what is time, not state: a lease's TTL left (etcd's clock and
    Sediment's lessor's differ by the time between the two requests; the store target
    has no lessor at all and answers the checkpointed TTL). A lease's keys and the
    LeaseLeases ids sorted: etcd 3.4 reads both out of Go maps, in no order."""
    if isinstance(answer, LeaseInfo):
        return dataclasses.replace(answer, remaining=0, keys=tuple(sorted(answer.keys)))
    if isinstance(answer, list) and all(isinstance(i, LeaseInfo) for i in answer):
        return sorted(i.id for i in answer)  # LeaseLeases answers ids only
    return answer


LEASE_FIELDS = {Put: "lease", LeaseGrant: "id", LeaseRevoke: "id", LeaseLookup: "lease",
                LeaseGrantResult: "id", LeaseInfo: "id"}


@dataclass
class LeaseIds:
    """etcd's lease ids -> Sediment's. A grant with id 0 lets each choose its own: the
    requests go to Sediment in its ids, its answers come back in etcd's."""

    ours: dict[int, int] = field(default_factory=dict)

    def to_ours(self, value: Any) -> Any:
        return _map_leases(value, self.ours)

    def to_theirs(self, value: Any) -> Any:
        return _map_leases(value, {v: k for k, v in self.ours.items()})

    def granted(self, request: Any, want: Any, got: Any) -> Any:
        """After a grant with id 0 both answered: pair the ids (Sediment's must be a
        positive id too) and return Sediment's answer in etcd's id."""
        if (isinstance(request, LeaseGrant) and request.id == 0
                and isinstance(want, LeaseGrantResult) and isinstance(got, LeaseGrantResult)
                and got.id > 0 and got.id not in self.ours.values()):
            self.ours[want.id] = got.id
        return self.to_theirs(got)


def _map_leases(value: Any, ids: dict[int, int]) -> Any:
    """`value` with every lease id in it (a put's, a key's, a lease compare's, a lease
    request's or answer's) mapped through `ids`."""
    if not ids or isinstance(value, Exception | bytes | str | int | None):
        return value
    if isinstance(value, list | tuple):
        return type(value)(_map_leases(v, ids) for v in value)
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        return value
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(value):
        item = getattr(value, f.name)
        lease_compare = isinstance(value, Compare) and value.target == "lease"
        named = f.name == LEASE_FIELDS.get(type(value)) or f.name == "lease"
        if (named and isinstance(item, int)) or (lease_compare and f.name == "value"):
            changes[f.name] = ids.get(item, item)
        elif isinstance(item, list | tuple) or dataclasses.is_dataclass(item):
            changes[f.name] = _map_leases(item, ids)
    return dataclasses.replace(value, **changes) if changes else value


def _command(request: LeaseGrant | LeaseRevoke) -> LeaseGrant | LeaseRevoke:
    """A lease request as Sediment's etcd server proposes it."""
    return grant_command(request.id, request.ttl) if isinstance(request, LeaseGrant) else request


def _raised(result: Any) -> Any:
    if isinstance(result, Exception):
        raise result
    return result


@contextlib.contextmanager
def _target(kind: str, tmp: str, seed: int) -> Iterator[Callable[[Any], Any]]:
    """A function answering one request: the in-process Store's, or a sim cluster's."""
    if kind == "store":
        machine = NetsyMachine(tmp, synchronous="OFF")
        index = itertools.count(1)  # the raft index each request would have had

        def apply(request: Any) -> Any:
            i = next(index)
            if isinstance(request, LeaseGrant | LeaseRevoke):  # as a member applies it
                return _raised(machine.apply(Entry(i, 1, 0.0, _command(request))))
            if isinstance(request, LeaseLookup | AllLeases):
                return _raised(machine.query(request))
            return machine.store.request(request, applied=i)

        try:
            yield apply
        finally:
            machine.close()
        return
    from sediment.runtime import api
    from sediment.wiring.cluster import Cluster

    rt = api.start("sim", seed=seed, nodes=("n1", "n2", "n3"))
    try:  # no compaction cycle of its own: only the requests compact
        cluster = Cluster.start(data_dir=tmp, runtime=rt, compaction_interval=3600.0)
        cluster.wait_ready()
        client = cluster.client()

        def propose(request: Any) -> Any:
            """Every request through the log, the machine's answer (a lease command as
            the etcd server proposes it; its queries at the leader's machine)."""
            if isinstance(request, LeaseGrant | LeaseRevoke):
                command = _command(request)
                return _raised(cluster.group.propose(command, timeout=client.timeout)[1])
            if isinstance(request, LeaseLookup | AllLeases):
                return client._query_member(request, None)
            return client._propose(request)

        yield propose
    finally:
        rt.shutdown()


@contextlib.contextmanager
def sediment_wire() -> Iterator[str]:
    """A fresh 3-node Sediment cluster with etcd's gRPC API on Ray (the session's, or a
    local one started here); the leader's "host:port". Shut down after the block."""
    from sediment.actors.etcd.shell.server import EtcdWire
    from sediment.runtime import api
    from sediment.wiring.cluster import Cluster

    rt = api.start("ray", nodes=("n1", "n2", "n3"), reap_delay=1.0, warm_pool=0)
    data = tempfile.mkdtemp(prefix="sediment-wire-diff-")
    try:
        cluster = Cluster.start(runtime=rt, data_dir=data, etcd=EtcdWire(),
                                compaction_interval=3600.0)
        yield cluster.endpoints()[cluster.wait_ready()].removeprefix("http://")
    finally:
        rt.shutdown()
        shutil.rmtree(data, ignore_errors=True)


def wire_seeds(seeds: range, steps: int, print_: Callable[[str], None] = print) -> int:
    """`--target wire`: every seed to one etcd and one Sediment cluster (see above);
    the number of seeds that agreed before the first that differed (all of them when
    none did: the run stops at the first difference, as later seeds share its state)."""
    with sediment_wire() as url, RealEtcd() as etcd, EtcdClient(etcd.endpoint) as real, \
            EtcdClient(url, timeout=30) as ours:
        ids = LeaseIds()
        for seed in seeds:
            diffs = compare_seed(real.request, ours.request, seed, steps, big=False, ids=ids)
            print_(f"seed {seed}: {'ok' if not diffs else 'DIFFERS'}")
            for d in diffs:
                print_(d)
            if diffs:
                return seeds.index(seed)
    return len(seeds)


def run_seed(endpoint: str, seed: int, steps: int = STEPS, *, big: bool = True,
             target: str = "store") -> list[str]:
    """Send one seed's requests to the etcd at `endpoint` (fresh: revision 1, nothing
    compacted) and to a fresh store (`target`); the differences found (empty: none)."""
    with tempfile.TemporaryDirectory() as tmp, EtcdClient(endpoint) as etcd, \
            _target(target, tmp, seed) as answer:
        return compare_seed(etcd.request, answer, seed, steps, big=big)


def compare_seed(etcd: Callable[[Any], Any], ours: Callable[[Any], Any], seed: int,
                 steps: int = STEPS, *, big: bool = True, ids: LeaseIds | None = None,
                 max_diffs: int = 3) -> list[str]:
    """One seed's requests to etcd (`etcd`) and to Sediment (`ours`), both answering one
    request each call; the differences (at most `max_diffs`). `ids`: the lease id pairs
    of earlier seeds sent to the same two (a new table otherwise)."""
    gen = RequestGen(seed, big=big, leases=True)
    ids = LeaseIds() if ids is None else ids
    diffs: list[str] = []
    for step in range(steps):
        request = gen.next()
        want = _answer(lambda r=request: etcd(r))
        theirs = ids.to_ours(request)
        got = ids.granted(request, want, _answer(lambda r=theirs: ours(r)))
        if not _same(want, got):
            diffs.append(f"seed {seed} step {step}: {request!r:.4000}\n  etcd:  {want!r:.900}"
                         f"\n  ours:  {got!r:.900}")
            if len(diffs) >= max_diffs:
                break
        gen.observe(want, request)
        if isinstance(request, Compact) and not isinstance(want, Exception):
            gen.compacted_at(request.revision)
    return diffs


def test_the_generator_leaves_out_a_kept_lease_of_a_key_deleted_before_it_nested_too() -> None:
    """The shape that exits etcd 3.4.23 (a put with ignore_lease of a key its txn
    deleted before it) is not sent, whether the delete or the put sits in a nested txn."""
    keep = Put(b"e", b"", ignore_lease=True)
    delete = DeleteRange(b"e")
    assert _keeps_what_was_deleted(keep, [delete])
    assert _keeps_what_was_deleted(Txn((), (keep,)), [delete])
    assert _keeps_what_was_deleted(keep, [Txn((), (), (delete,))])
    assert not _keeps_what_was_deleted(keep, [DeleteRange(b"f")])
    assert not _keeps_what_was_deleted(Put(b"e", b"v"), [delete])


@pytest.mark.parametrize("seed", CI_SEEDS)
def test_store_answers_as_etcd_does(seed: int) -> None:
    require_etcd()
    with RealEtcd() as etcd:
        diffs = run_seed(etcd.endpoint, seed)
    assert not diffs, "\n".join(diffs)


def test_a_sim_cluster_answers_as_etcd_does() -> None:
    """Through raft: revisions are the machine's numbering, not raft indexes."""
    require_etcd()
    with RealEtcd() as etcd:
        diffs = run_seed(etcd.endpoint, 7, steps=120, big=False, target="cluster")
    assert not diffs, "\n".join(diffs)


def test_a_three_member_etcd_serves_one_history() -> None:
    """The fixture's 3-member form: a write through one member is read through another
    at the same revision (etcd's reads are linearizable by default)."""
    require_etcd()
    with RealEtcd(members=3) as etcd:
        assert len(etcd.endpoints) == 3
        with EtcdClient(etcd.endpoints[0]) as one, EtcdClient(etcd.endpoints[2]) as three:
            put = one.request(Put(b"k", b"v"))
            got = three.request(Range(b"k"))
            assert isinstance(got, RangeResult) and got.kvs[0].value == b"v"
            assert got.kvs[0].mod_revision == put.revision == got.revision
    assert etcd.endpoints == []  # stopped


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--target", choices=("store", "cluster", "wire"), default="store")
    args = parser.parse_args(argv)
    if args.target == "wire":
        passed = wire_seeds(range(args.first, args.first + args.seeds), args.steps,
                            lambda line: print(line, flush=True))
        failed = passed < args.seeds
        print(f"{passed} passed, {int(failed)} failed"
              + (f", {args.seeds - passed - 1} not run (the run stops at the first"
                 " difference)" if failed else ""))
        return 1 if failed else 0
    failed = 0
    for seed in range(args.first, args.first + args.seeds):
        with RealEtcd() as etcd:
            diffs = run_seed(etcd.endpoint, seed, args.steps, target=args.target)
        print(f"seed {seed}: {'ok' if not diffs else 'DIFFERS'}", flush=True)
        for d in diffs:
            print(d)
        failed += bool(diffs)
    print(f"{args.seeds - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main(sys.argv[1:]))
