"""The KV demo: Netsy's watch-aware compaction on a 3-node cluster, broken on purpose.

A 3-node KV cluster on an embedded local Ray (or `--backend sim`): writes, a watch on a
follower whose client does not read, compaction cycles that stop below what the watch
has not delivered, the raft leader killed while cycles and writes go on, and at the end
the watch checked complete: every write of its key, once, in order, none compacted
away under it. Each step prints what it shows.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable

from sediment.actors.kv import watch_protocol as wp
from sediment.actors.kv.shell.watch_session import Watch
from sediment.wiring.cluster import Cluster

Out = Callable[[str], None]


def _delivered(watch: Watch) -> list[int]:
    return [e.kv.mod_revision for r in watch.responses if isinstance(r, wp.Deliver)
            for e in r.events]


def _compacted(cluster: Cluster) -> dict[str, int | None]:
    views = {n: cluster.node(n).status() for n in cluster.nodes}
    return {n: (v["compact_revision"] if v is not None else None) for n, v in views.items()}


def _wait(cluster: Cluster, done: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if cluster.rt.backend == "ray" and time.monotonic() > deadline:
            raise SystemExit(f"demo: {what} did not happen within {timeout:.0f} s")
        cluster.rt.sleep(0.2)


def _catch_up(cluster: Cluster, watch: Watch, revision: int) -> None:
    _wait(cluster, lambda: watch.poll(0.3) is not None and bool(_delivered(watch))
          and _delivered(watch)[-1] >= revision, 120, "the watch catching up")


def run(backend: str, out: Out = print, data_dir: str | None = None) -> int:
    t_start = time.monotonic()
    data_dir = data_dir or tempfile.mkdtemp(prefix="sediment-demo-")
    out(f"starting a 3-node KV cluster on {backend} (data in {data_dir}) ...")
    cluster = Cluster.start(3, data_dir=data_dir, backend=backend, compaction_interval=1.0,
                            watcher_max_pending=4)
    try:
        kv = cluster.client()
        leader = cluster.wait_ready()
        follower = next(n for n in cluster.nodes if n != leader)
        out(f"  up in {time.monotonic() - t_start:.1f} s; raft leader {leader}")

        written = [kv.put(b"config/a", f"v{i}".encode()).revision for i in range(6)]
        out(f"\nwrote config/a six times: revisions {written}")
        start = written[1]
        watch = kv.session(follower).watch(b"config/a", start_revision=start)
        out(f"a watch on {follower} from revision {start} (history replay, then live); "
            "its client does not read yet")
        for i in range(6):
            head = kv.put(b"other", f"{i}".encode()).revision
        out(f"six more writes to another key; head is now {head}")

        out("\nletting compaction cycles run (every 1 s) ...")
        cluster.rt.sleep(4.0)
        status = cluster.node(follower).status() or {}
        floor = status.get("min_revision")
        out(f"  {follower} reports its minimum watch revision {floor}; compaction "
            f"revisions per node: {_compacted(cluster)}")
        out("  -> the cycles stopped below what the slow watch has not delivered")

        out("\nthe watch's client now reads ...")
        _catch_up(cluster, watch, written[-1])
        out(f"  delivered revisions {_delivered(watch)}")
        _wait(cluster, lambda: min((v or 0) for v in _compacted(cluster).values())
              >= head - 1, 120, "compaction moving past the watch")
        out(f"  compaction moved on once the watch caught up: {_compacted(cluster)}")

        out(f"\nkilling the raft leader's process on {leader} while writes go on, the "
            "cycles run and the client keeps reading ...")
        cluster.node(leader).kill_process("raft:kv")
        t0 = time.monotonic()
        for i in range(6, 12):
            written.append(kv.put(b"config/a", f"v{i}".encode()).revision)
            watch.poll(0.05)
        out(f"  the client followed the new leader ({cluster.leader()}); six more writes "
            f"of config/a, the last at {written[-1]}, {time.monotonic() - t0:.1f} s after "
            "the kill")
        _catch_up(cluster, watch, written[-1])
        got = _delivered(watch)
        expected = [r for r in written if r >= start]
        out(f"  the watch delivered {got}")
        if got != expected:
            out(f"  MISMATCH: expected {expected}")
            return 1
        out("  -> every write of config/a from the start revision, once, in order; no "
            f"compaction passed it (compaction revisions now {_compacted(cluster)})")
    finally:
        cluster.stop()
        out(f"\nshut down; total {time.monotonic() - t_start:.1f} s")
    return 0


__all__ = ["run"]
