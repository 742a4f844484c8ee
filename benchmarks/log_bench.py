"""Log storage benchmark: Sediment's Ra-style storage against raw Python file I/O.

Rows (storage part; the Ray and sim rows for a 3-node group are added separately):
  WAL append        ``Wal.append`` of batches (64 entries of 256 B by default, 8 groups,
                    one fsync per batch) vs a raw ``os.write`` + ``os.fsync`` loop of
                    the identical encoded bytes in the same batches. Target: >= 0.7x.
  major compaction  ``major_compaction`` of 16 segments written by ra_kv-like random
                    puts (keys = puts/2, and a sparser puts/4) vs a raw copy of the same
                    live bytes (pread + write of each run of adjacent live records, one
                    fsync per output file). Target: >= 0.7x.
  snapshot size     a ra_kv-like map with overwrites: the snapshot with live indexes
                    (key -> index, values stay in the log) vs a full snapshot (values
                    included), both written by ``write_snapshot``.

Timed rows are paired: Sediment and raw run back to back, in alternating order, because
fsync latency on a shared virtual disk drifts by several times within a minute. The WAL
row sums every round; the compaction rows take the median of 2 * repeat + 1 runs.

Usage: python benchmarks/log_bench.py [--batches 1000] [--batch 64] [--payload 256]
       [--segments 16] [--keys-div 2 4] [--repeat 3] [--dir DIR] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("SEDIMENT_LOG_LEVEL", "error")

from sediment.actors.log.kv_machine import KvPut  # noqa: E402
from sediment.actors.log.shell.protocol import Propose
from sediment.actors.log.storage import (  # noqa: E402
    CompactionResult,
    Entry,
    GroupSegmentWriter,
    SegmentConfig,
    SegmentReader,
    SnapshotState,
    Wal,
    WalWrite,
    major_compaction,
    write_snapshot,
)
from sediment.actors.log.storage.compaction import compaction_groups, segment_infos  # noqa: E402
from sediment.actors.log.storage.records import encode  # noqa: E402
from sediment.actors.log.storage.segrefs import SegRefs  # noqa: E402

# -- WAL ----------------------------------------------------------------------------------


def wal_rows(base: str, batches: int, batch: int, payload: int, repeat: int) -> dict[str, Any]:
    groups = [f"group-{k}" for k in range(8)]
    rng = random.Random(1)
    data = [rng.randbytes(payload) for _ in range(64)]
    plan: list[list[WalWrite]] = []
    nxt = dict.fromkeys(groups, 1)
    for b in range(batches):
        rows = []
        for k in range(batch):
            g = groups[(b * batch + k) % len(groups)]
            rows.append(WalWrite(g, Entry(nxt[g], 1, 1_700_000_000_000 + b, data[k % 64])))
            nxt[g] += 1
        plan.append(rows)
    # the exact bytes the WAL writes, per batch, for the raw loop
    raw_batches = [
        b"".join(
            encode(
                w.entry.index,
                w.entry.term,
                w.entry.timestamp,
                w.entry.payload,
                group=w.group.encode(),
            )
            for w in rows
        )
        for rows in plan
    ]
    total = sum(len(b) for b in raw_batches)

    # Paired: each batch goes through the WAL and the same bytes through the raw loop
    # (separate files), one right after the other, in alternating order, so both see
    # the same disk: fsync latency on a shared virtual disk drifts by 2-10x within a
    # minute. Totals over every round.
    so = sr = 0.0
    for _ in range(repeat):
        d = tempfile.mkdtemp(dir=base)
        w = Wal(os.path.join(d, "wal"), max_size=1 << 40)
        fd = os.open(os.path.join(d, "raw.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        for k, (rows, buf) in enumerate(zip(plan, raw_batches, strict=True)):
            if k % 2:
                t0 = time.perf_counter()
                os.write(fd, buf)
                os.fsync(fd)
                t1 = time.perf_counter()
                w.append(rows)
                t2 = time.perf_counter()
                sr += t1 - t0
                so += t2 - t1
            else:
                t0 = time.perf_counter()
                w.append(rows)
                t1 = time.perf_counter()
                os.write(fd, buf)
                os.fsync(fd)
                t2 = time.perf_counter()
                so += t1 - t0
                sr += t2 - t1
        w.close()
        os.close(fd)
        shutil.rmtree(d)
    t_ours, t_raw = so / repeat, sr / repeat
    n = batches * batch
    return {
        "entries": n,
        "bytes": total,
        "ours_s": t_ours,
        "raw_s": t_raw,
        "ours_entries_per_s": n / t_ours,
        "raw_entries_per_s": n / t_raw,
        "ours_mb_per_s": total / t_ours / 1e6,
        "raw_mb_per_s": total / t_raw / 1e6,
        "ratio": t_raw / t_ours,
    }


# -- major compaction ---------------------------------------------------------------------


def kv_workload(n: int, keys: int, seed: int) -> dict[str, int]:
    """ra_kv-like: n puts to random keys; returns key -> latest index (the live set)."""
    rng = random.Random(seed)
    latest: dict[str, int] = {}
    for i in range(1, n + 1):
        latest[f"key-{rng.randrange(keys)}"] = i
    return latest


def build_segments(seg_dir: str, n: int, per_seg: int, payload: int) -> SegRefs:
    rng = random.Random(2)
    blob = rng.randbytes(payload * 4)
    w = GroupSegmentWriter(seg_dir, "bench", SegmentConfig(max_entries=per_seg))
    chunk = 4096
    for lo in range(1, n + 1, chunk):
        hi = min(n, lo + chunk - 1)
        w.flush(
            [
                Entry(i, 1, i, blob[(i % 4) * payload : (i % 4 + 1) * payload])
                for i in range(lo, hi + 1)
            ],
            SnapshotState.initial(),
        )
    refs = w.refs
    w.close()
    return refs


def raw_copy(seg_dir: str, out_dir: str, groups: list[list[tuple[str, list[int]]]]) -> float:
    """pread the live records' runs of each group's files, write one file per group,
    fsync it: the same bytes major compaction moves, with no format or protocol."""
    # index lookups happen outside the timed part: a raw copy is told what to copy
    plans = []
    for gi, group in enumerate(groups):
        spans: list[tuple[str, int, int]] = []
        for name, live in group:
            with SegmentReader.open(os.path.join(seg_dir, name)) as r:
                locs = [loc for i in live if (loc := r.location(i)) is not None]
            run_start, run_end = locs[0][0], locs[0][0] + locs[0][1]
            for off, length, _ in locs[1:]:
                if off == run_end and off + length - run_start <= 4 << 20:
                    run_end = off + length
                else:
                    spans.append((name, run_start, run_end - run_start))
                    run_start, run_end = off, off + length
            spans.append((name, run_start, run_end - run_start))
        plans.append((os.path.join(out_dir, f"group-{gi}.copy"), spans))
    t0 = time.perf_counter()
    for out, spans in plans:
        fds: dict[str, int] = {}
        fd_out = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        for name, off, length in spans:
            fd = fds.get(name)
            if fd is None:
                fd = fds[name] = os.open(os.path.join(seg_dir, name), os.O_RDONLY)
            os.write(fd_out, os.pread(fd, length, off))
        os.fsync(fd_out)
        os.close(fd_out)
        for fd in fds.values():
            os.close(fd)
    return time.perf_counter() - t0


def timed_major(
    seg_dir: str, refs: SegRefs, state: SnapshotState, per_seg: int
) -> tuple[float, CompactionResult, tuple[float, float, float, float]]:
    """Run major compaction; returns its time, result, and the shares of that time spent
    planning (to the first marker), copying (to every .compacting durable), in the rest
    of the protocol (renames, symlinks, markers, directory fsyncs) and freeing the
    replaced files (closing the last descriptors of the originals)."""
    marks: list[tuple[str, float]] = []
    t0 = time.perf_counter()

    def fp(name: str) -> None:
        marks.append((name, time.perf_counter() - t0))

    res = major_compaction(seg_dir, refs, state, max_count=per_seg, fp=fp)
    total = time.perf_counter() - t0
    first_marker = next(t for n, t in marks if n == "compaction.after_marker")
    copied = next(t for n, t in marks if n == "compaction.after_compacting_sync")
    synced = next(t for n, t in marks if n == "compaction.after_dir_sync")
    plan, copy = first_marker / total, (copied - first_marker) / total
    return total, res, (plan, copy, (synced - copied) / total, 1 - synced / total)


def compaction_rows(
    base: str, segments: int, per_seg: int, payload: int, repeat: int, keys_div: int
) -> dict[str, Any]:
    n = segments * per_seg
    latest = kv_workload(n, keys=n // keys_div, seed=3)
    state = SnapshotState.of(n, latest.values())
    src = tempfile.mkdtemp(dir=base)
    refs = build_segments(src, n, per_seg, payload)
    comp = refs.compactable(state.snapshot_index)
    dead, infos = segment_infos(src, comp, state)
    groups = compaction_groups(infos, per_seg, 64_000_000)
    plan = [[(g.ref.file, list(g.live)) for g in grp] for grp in groups]
    live_bytes = sum(g.live_size for grp in groups for g in grp)
    ratios: list[float] = []
    t_ours: list[float] = []
    t_raw: list[float] = []
    shares: list[tuple[float, float, float, float]] = []
    res: CompactionResult | None = None
    for r in range(repeat):
        seg_dir = os.path.join(base, f"compact-{r}")
        shutil.copytree(src, seg_dir)
        out_dir = tempfile.mkdtemp(dir=base)
        os.sync()
        # paired, alternating order: the disk's fsync latency drifts
        if r % 2:
            a, res, share3 = timed_major(seg_dir, refs, state, per_seg)
            b = raw_copy(src, out_dir, plan)
        else:
            b = raw_copy(src, out_dir, plan)
            a, res, share3 = timed_major(seg_dir, refs, state, per_seg)
        t_ours.append(a)
        t_raw.append(b)
        ratios.append(b / a)
        shares.append(share3)
        shutil.rmtree(out_dir)
        shutil.rmtree(seg_dir)
    shutil.rmtree(src)
    assert res is not None
    t_o, t_r = statistics.median(t_ours), statistics.median(t_raw)
    return {
        "segments": segments,
        "segment_entries": per_seg,
        "groups": len(groups),
        "compacted": len(res.compacted_segrefs),
        "linked": len(res.linked),
        "unreferenced": len(res.unreferenced),
        "live_entries": sum(len(g.live) for grp in groups for g in grp),
        "live_bytes": live_bytes,
        "total_bytes": sum(i.data_size for i in infos),
        "ours_s": t_o,
        "raw_s": t_r,
        "ours_mb_per_s": live_bytes / t_o / 1e6,
        "raw_mb_per_s": live_bytes / t_r / 1e6,
        "ratio": statistics.median(ratios),
        "ratios": ratios,
        "shares": tuple(statistics.median(x[k] for x in shares) for k in range(4)),
    }


# -- snapshot size ------------------------------------------------------------------------


def snapshot_rows(base: str, puts: int, keys: int, payload: int) -> dict[str, Any]:
    rng = random.Random(4)
    latest: dict[str, int] = {}
    values: dict[str, bytes] = {}
    for i in range(1, puts + 1):
        k = f"key-{rng.randrange(keys)}"
        latest[k] = i
        values[k] = rng.randbytes(payload)
    # with live indexes (ra_kv): key -> index; values stay in the log
    light = b"".join(
        struct.pack("<H", len(k)) + k.encode() + struct.pack("<q", i) for k, i in latest.items()
    )
    full = b"".join(
        struct.pack("<H", len(k)) + k.encode() + struct.pack("<I", len(v)) + v
        for k, v in values.items()
    )
    root_a, root_b = tempfile.mkdtemp(dir=base), tempfile.mkdtemp(dir=base)
    a = write_snapshot(root_a, puts, 1, light, latest.values())
    b = write_snapshot(root_b, puts, 1, full, [])

    def size(p: str) -> int:
        return sum(os.path.getsize(os.path.join(p, f)) for f in os.listdir(p))

    sa, sb = size(a.path), size(b.path)
    shutil.rmtree(root_a)
    shutil.rmtree(root_b)
    return {
        "puts": puts,
        "keys": len(latest),
        "live_snapshot_bytes": sa,
        "full_snapshot_bytes": sb,
        "ratio": sa / sb,
    }


# -- main ---------------------------------------------------------------------------------


# -- a 3-node raft group through the process shells (sim and Ray) ------------------------


async def _proposer(ctx: Any, group: str, leader: str, n: int, report_to: Any) -> None:
    from sediment.actors.log.shell.names import raft_name

    server = await ctx.whereis(raft_name(group, leader))
    ctx.send(report_to, "ready")
    await ctx.receive(lambda m: m == "go")
    for i in range(n):
        await ctx.call(server, Propose(KvPut(f"k{i % 64}", i)), timeout=30)
    ctx.send(report_to, "done")


async def _drive(ctx: Any, group: str, leader: str, n: int, k: int) -> tuple[int, float]:
    """Start k proposers, wait until they are all up, then time n proposals."""
    pids = [await ctx.spawn(_proposer, group, leader, n // k, ctx.self(), node=leader)
            for _ in range(k)]
    for _ in range(k):
        await ctx.receive(lambda m: m == "ready", timeout=600)
    t0 = time.perf_counter()
    for pid in pids:
        ctx.send(pid, "go")
    for _ in range(k):
        await ctx.receive(lambda m: m == "done", timeout=600)
    return (n // k) * k, time.perf_counter() - t0


def group_commit_rate(backend: str, n: int, concurrency: int, data_dir: str) -> float:
    """Committed entries per wall-clock second through a 3-node group: `concurrency`
    client processes on the leader's node, each proposing and waiting for the outcome."""
    from sediment.actors.log.shell.cluster import propose, start_log_cluster, status
    from sediment.actors.log.shell.server import GroupSpec
    from sediment.runtime import api

    spec = GroupSpec("bench", ("n1", "n2", "n3"), data_dir)
    kwargs: dict[str, Any] = ({"seed": 1, "trace": False} if backend == "sim"
                              else {"warm_pool": 0})
    rt = api.start(backend, nodes=("n1", "n2", "n3"), **kwargs)
    try:
        start_log_cluster(rt, [spec], name="bench-log")
        propose(rt, spec, KvPut("warm", 0))
        leader = next(v["node"] for v in status(rt, spec).values()
                      if v is not None and v["role"] == "leader")
        done, seconds = rt.run(_drive, "bench", leader, n, concurrency, node=leader,
                               timeout=1e6 if backend == "sim" else 600)
        return done / seconds
    finally:
        rt.shutdown()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--payload", type=int, default=256)
    ap.add_argument("--segments", type=int, default=16)
    ap.add_argument("--segment-entries", type=int, default=4096)
    ap.add_argument(
        "--keys-div",
        type=int,
        nargs="+",
        default=[2, 4],
        help="compaction workloads: keys = puts / each of these (one row each)",
    )
    ap.add_argument("--puts", type=int, default=200_000)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--group-n", type=int, default=600,
                    help="proposals per group row (0 skips the sim/Ray group rows)")
    args = ap.parse_args(argv)
    base = tempfile.mkdtemp(prefix="log-bench-", dir=args.dir)
    t0 = time.perf_counter()
    try:
        wal = wal_rows(base, args.batches, args.batch, args.payload, args.repeat)
        comps = [
            compaction_rows(
                base,
                args.segments,
                args.segment_entries,
                args.payload,
                2 * args.repeat + 1,
                div,
            )
            for div in args.keys_div
        ]
        snap = snapshot_rows(base, args.puts, args.keys, args.payload)
        group: dict[str, float] = {}
        for backend in ("sim", "ray") if args.group_n else ():
            for clients in (1, 16):
                gdir = tempfile.mkdtemp(dir=base)
                group[f"{backend}/{clients}"] = group_commit_rate(
                    backend, args.group_n, clients, gdir)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    elapsed = time.perf_counter() - t0

    def ok(ratio: float, target: float) -> str:
        return "yes" if ratio >= target else "**no**"

    print(f"# log storage benchmark ({elapsed:.0f} s)\n")
    print("| row | Sediment | raw | ratio | target | met |")
    print("|---|---|---|---|---|---|")
    print(
        f"| WAL append, fsync per batch ({args.batch} x {args.payload} B, "
        f"{args.batches} batches) | {wal['ours_entries_per_s']:,.0f} entries/s "
        f"({wal['ours_mb_per_s']:.1f} MB/s) | {wal['raw_entries_per_s']:,.0f} entries/s "
        f"({wal['raw_mb_per_s']:.1f} MB/s) | {wal['ratio']:.2f}x | >= 0.7x | "
        f"{ok(wal['ratio'], 0.7)} |"
    )
    for div, comp in zip(args.keys_div, comps, strict=True):
        print(
            f"| major compaction, keys = puts/{div} ({comp['segments']} x "
            f"{comp['segment_entries']}-entry segments, {comp['live_bytes'] / 1e6:.1f} MB "
            f"live in {comp['groups']} groups, {comp['linked']} segments linked) | "
            f"{comp['ours_mb_per_s']:.0f} MB/s live | {comp['raw_mb_per_s']:.0f} MB/s | "
            f"{comp['ratio']:.2f}x | >= 0.7x | {ok(comp['ratio'], 0.7)} |"
        )
    print(
        f"| snapshot size, ra_kv map ({snap['puts']:,} puts, {snap['keys']:,} keys, "
        f"{args.payload} B values) | {snap['live_snapshot_bytes']:,} B with live indexes | "
        f"{snap['full_snapshot_bytes']:,} B full | {snap['ratio']:.3f}x | smaller | "
        f"{ok(1 / snap['ratio'], 1.0)} |"
    )
    for key, rate in group.items():
        backend, clients = key.split("/")
        print(f"| 3-node group on {backend}, {clients} client(s): committed entries/s "
              f"(wall clock) | {rate:,.0f} entries/s | | | measured | - |")
    print()
    print(
        f"- WAL: {args.repeat} rounds; each batch goes through `Wal.append` and the "
        "identical encoded bytes through `os.write` + `os.fsync` (separate files), paired "
        "and in alternating order; totals."
    )
    for div, comp in zip(args.keys_div, comps, strict=True):
        plan, copy, rest, free = comp["shares"]
        print(
            f"- compaction, keys = puts/{div}: median of {len(comp['ratios'])} paired runs "
            "(ratios " + ", ".join(f"{r:.2f}" for r in comp["ratios"]) + "); Sediment's "
            f"time: planning {plan:.0%}, copying {copy:.0%}, the rest of the v3 protocol "
            f"{rest:.0%} (renames, symlinks, markers, 4 directory fsyncs), freeing the "
            f"replaced files {free:.0%} (the originals' last descriptors closed)."
        )
    print(
        "- raw copy: `os.pread` + `os.write` of each run of adjacent live records, one "
        "fsync per output file, told what to copy; it deletes nothing."
    )
    print(
        "- snapshot: both written by `write_snapshot` (meta, live-index file, data); "
        "the live-index snapshot stores key -> index, the full one key -> value."
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps({"wal": wal, "compaction": comps, "snapshot": snap, "group": group},
                       indent=2) + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
