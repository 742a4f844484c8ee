"""The store against a real etcd 3.4: the same seeded random request sequence to both,
every answer compared field by field (header ids aside: the results carry only the
revision), errors by type and exact etcd description.

The requests go to etcd through `EtcdClient` (gRPC, etcd's compiled stubs) and to an
in-process `Store` directly, or (`--target cluster`) through the client of a 3-node KV
cluster on the simulator, so every request is a raft entry and the revisions are the
machine's (over the wire, once Sediment serves gRPC, the same client will talk to both).
CI runs a few seeds; more by hand:

    .venv/bin/python tests/test_etcd_differential.py --seeds 50 [--first 100] [--steps 300]
        [--target store|cluster]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from etcd_helpers import RealEtcd, require_etcd
from etcd_requests import RequestGen

from sediment.actors.kv.errors import KvError
from sediment.actors.kv.etcd_client import EtcdClient
from sediment.actors.kv.store import Store
from sediment.actors.kv.types import Compact, Put, Range, RangeResult

CI_SEEDS = (0, 1, 2)
STEPS = 200


def _answer(fn: Any) -> Any:
    try:
        return fn()
    except KvError as err:
        return err


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, Exception) or isinstance(b, Exception):
        # etcd's error (a), the store's (b): the same etcd error, or a finer one of it
        return isinstance(a, Exception) and isinstance(b, type(a)) and str(a) == str(b)
    return bool(a == b)


@contextlib.contextmanager
def _target(kind: str, tmp: str, seed: int) -> Iterator[Callable[[Any], Any]]:
    """A function answering one request: the in-process Store's, or a sim cluster's."""
    if kind == "store":
        with Store(Path(tmp) / "kv.sqlite", synchronous="OFF") as store:
            yield store.request
        return
    from sediment.runtime import api
    from sediment.wiring.cluster import Cluster

    rt = api.start("sim", seed=seed, nodes=("n1", "n2", "n3"))
    try:  # no compaction cycle of its own: only the requests compact
        cluster = Cluster.start(data_dir=tmp, runtime=rt, compaction_interval=3600.0)
        cluster.wait_ready()
        client = cluster.client()
        yield client._propose  # every request through the log, the machine's answer
    finally:
        rt.shutdown()


def run_seed(endpoint: str, seed: int, steps: int = STEPS, *, big: bool = True,
             target: str = "store") -> list[str]:
    """Send one seed's requests to the etcd at `endpoint` (fresh: revision 1, nothing
    compacted) and to a fresh store (`target`); the differences found (empty: none)."""
    gen = RequestGen(seed, big=big)
    diffs: list[str] = []
    with tempfile.TemporaryDirectory() as tmp, EtcdClient(endpoint) as etcd, \
            _target(target, tmp, seed) as answer:
        for step in range(steps):
            request = gen.next()
            want = _answer(lambda r=request: etcd.request(r))
            got = _answer(lambda r=request: answer(r))
            if not _same(want, got):
                diffs.append(f"seed {seed} step {step}: {request!r:.400}\n  etcd:  {want!r:.900}"
                             f"\n  store: {got!r:.900}")
                if len(diffs) >= 3:
                    break
            gen.observe(want)
            if isinstance(request, Compact) and not isinstance(want, Exception):
                gen.compacted_at(request.revision)
    return diffs


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
    parser.add_argument("--target", choices=("store", "cluster"), default="store")
    args = parser.parse_args(argv)
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
