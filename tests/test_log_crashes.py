"""A crash at every storage failpoint of one member's processes, one failpoint at a time.

The member's WAL, segment writer or log worker is armed to crash (abruptly: no cleanup
code runs) at one named point while the group takes writes, snapshots and compactions.
Its supervisor restarts it and the processes started after it, which recover from disk.
Checked: the failpoint fired, the member converges with the others, and every key's
latest value (a live entry) is readable on it: nothing committed, nothing live lost.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
from log_helpers import put_mixed
from runtime_helpers import eventually

from sediment.actors.log.shell.cluster import start_log_cluster, status
from sediment.actors.log.shell.group_spec import GroupSpec
from sediment.actors.log.shell.names import raft_name, segwriter_name, wal_name, worker_name
from sediment.actors.log.shell.protocol import CompactLog, Found, GetKey
from sediment.actors.log.storage.failpoints import (
    COMPACTION_FAILPOINTS,
    SEGMENT_FAILPOINTS,
    SNAPSHOT_FAILPOINTS,
    WAL_FAILPOINTS,
)
from sediment.runtime import api
from sediment.runtime.errors import CallError

# Points only recovery of a damaged file reaches (tested in the storage suite).
RECOVERY_ONLY = {"wal.after_truncate", "segment.after_truncate",
                 "compaction.after_orphan_delete"}


def _host(point: str, group: str, node: str) -> str:
    if point.startswith("wal."):
        return wal_name(node)
    if point.startswith("segment."):
        return segwriter_name(node)
    return worker_name(group, node)


CASES = [p for p in WAL_FAILPOINTS + SEGMENT_FAILPOINTS + SNAPSHOT_FAILPOINTS
         + COMPACTION_FAILPOINTS if p not in RECOVERY_ONLY]


@pytest.mark.parametrize("point", CASES)
def test_crash_at_failpoint_then_recover(point: str, tmp_path: Path) -> None:
    rt = api.start("sim", seed=len(point), nodes=("n1", "n2", "n3"))
    try:
        _crash_and_check(rt, point, tmp_path)
    finally:
        rt.shutdown()


def _crash_and_check(rt: Any, point: str, tmp_path: Path) -> None:
    spec = GroupSpec("g1", ("n1", "n2", "n3"), str(tmp_path / "data"), wal_max_size=1024,
                     snapshot_every=15, num_minors=1000, segment_max_entries=6)
    start_log_cluster(rt, [spec])
    keys: dict[str, int] = {}
    latest: dict[str, int] = {}
    put_mixed(rt, spec, 0, 10, keys, latest)
    host = _host(point, spec.group, "n2")
    victim = rt.whereis(host)
    rt.arm_failpoint(victim, point, "crash")
    put_mixed(rt, spec, 10, 50, keys, latest)
    for _ in range(3):  # majors (and the next snapshots' minors) reach the rest
        with contextlib.suppress(CallError):
            rt.call(raft_name(spec.group, "n2"), CompactLog(), timeout=5)
        put_mixed(rt, spec, 1000 + len(latest), 16, keys, latest)
        put_mixed(rt, spec, 2000 + len(latest), 24, keys, latest, cold_every=0)
    assert eventually(rt, lambda: rt.whereis(host) not in (None, victim), timeout=30), \
        f"{point} never fired on {host}"
    assert eventually(rt, lambda: _converged(rt, spec, keys), timeout=60)
    got = {k: rt.call(raft_name(spec.group, "n2"), GetKey(k), timeout=10) for k in latest}
    assert got == {k: Found(v) for k, v in latest.items()}


def _converged(rt: Any, spec: GroupSpec, keys: dict[str, int]) -> bool:
    views = status(rt, spec)
    return all(v is not None and v["keys"] == keys and v["applied"] == v["commit"]
               for v in views.values())
