"""Idle cost benchmark: what a started, idle Sediment cluster costs on Ray, beside as many
idle raw Ray actors, in one run.

On a small machine the CPU an idle cluster burns is what its clients' operations must
share, so it sets their latency under every scenario. Both sides are measured the same
way: CPU seconds of every Ray process on this machine (workers and Ray's own daemons,
read from /proc) over `--seconds`, after `--settle` seconds of quiet.
  baseline   as many async Ray actors (num_cpus=0) as the cluster has processes, doing
             nothing: the floor that the process count alone costs.
  sediment   the cluster of a library scenario file (`--scenario`, default the block-tier
             file CI runs on Ray), started by `Cluster.start` as the runner starts it,
             without traffic and without the runner's own observers.
Per process kind it prints the CPU share and the signals received per second
(`HostActor.info`), so a change to heartbeats, polling or lookups shows up here.

Usage: python benchmarks/idle_bench.py [--scenario PATH] [--settle 20] [--seconds 20]
       [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("SEDIMENT_LOG_LEVEL", "error")

import ray  # noqa: E402

from sediment.runtime import api  # noqa: E402
from sediment.scenarios import schema, tier  # noqa: E402
from sediment.wiring.cluster import Cluster  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SCENARIO = ROOT / "scenarios/library/compaction-worker-killed-holding-lease.yaml"
CLOCK = os.sysconf("SC_CLK_TCK")


@ray.remote(num_cpus=0)
class IdleActor:
    async def ping(self) -> int:
        return os.getpid()


def ray_cpu() -> dict[int, float]:
    """CPU seconds so far of every Ray process on this machine (not this driver)."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if "ray" in cmd:
            out[int(entry)] = (int(stat[11]) + int(stat[12])) / CLOCK
    return out


def measure(seconds: float) -> tuple[float, dict[int, float]]:
    """(cores used in all, cores per OS pid) over `seconds`."""
    before = ray_cpu()
    t0 = time.monotonic()
    time.sleep(seconds)
    after = ray_cpu()
    dt = time.monotonic() - t0
    per = {p: (after[p] - before[p]) / dt for p in after if p in before}
    return sum(per.values()), per


def kind(label: str) -> str:
    """A process label without its node: raft:kv@n1 -> raft:kv."""
    return re.sub(r"@\w+$", "", label or "?")


def baseline(count: int, settle: float, seconds: float) -> dict[str, Any]:
    actors = [IdleActor.remote() for _ in range(count)]  # type: ignore[attr-defined]
    ray.get([a.ping.remote() for a in actors], timeout=600)
    time.sleep(settle)
    total, _ = measure(seconds)
    for a in actors:
        ray.kill(a)
    return {"actors": count, "cores": round(total, 3)}


def infos(rt: Any) -> dict[int, dict[str, Any]]:
    out = {}
    for pid in rt.processes():
        try:
            got = ray.get(rt.transport.handle(pid).info.remote(), timeout=10)
        except Exception:  # noqa: BLE001 - a process that ended meanwhile
            continue
        out[got["os_pid"]] = got
    return out


def sediment(path: Path, settle: float, seconds: float) -> dict[str, Any]:
    scenario = schema.load(path)
    nodes = scenario.cluster.nodes
    rt = api.start("ray", nodes=("client", *nodes))
    settings = scenario.cluster.settings.to_kwargs()
    if scenario.cluster.blocks is not None:
        settings["blocks"] = tier.block_tier(scenario.cluster.blocks, scenario.cluster.settings)
    with tempfile.TemporaryDirectory(prefix="sediment-idle-") as data:
        Cluster.start(nodes, data_dir=data, runtime=rt, top_node="client", **settings)
        time.sleep(settle)
        first = infos(rt)
        total, per = measure(seconds)
        last = infos(rt)
        processes = len(last)
        rt.shutdown()
    cores: Counter[str] = Counter()
    count: Counter[str] = Counter()
    signals: dict[str, Counter[str]] = defaultdict(Counter)
    for os_pid, info in last.items():
        k = (f"host {info['name']}" if info["name"]  # a named host: every process in it
             else kind(info["labels"][0] if info["labels"] else ""))
        cores[k] += per.get(os_pid, 0.0)
        count[k] += 1
        before = first.get(os_pid, {}).get("received", {})
        for sig, n in info["received"].items():
            signals[k][sig] += (n - before.get(sig, 0)) / seconds
    ours = sum(cores.values())
    kinds = [{"kind": k, "processes": count[k], "cores": round(c, 3),
              "signals_per_s": {s: round(v, 1) for s, v in signals[k].most_common(4) if v}}
             for k, c in cores.most_common()]
    return {"scenario": scenario.name, "processes": processes, "cores": round(total, 3),
            "ray_daemons_cores": round(total - ours, 3), "kinds": kinds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", type=Path, default=DEFAULT_SCENARIO)
    ap.add_argument("--settle", type=float, default=20.0)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--json", type=Path, default=ROOT / "benchmarks/results_idle.json")
    args = ap.parse_args()
    ray.init(namespace="sediment-bench", include_dashboard=False, log_to_driver=False)
    ours = sediment(args.scenario, args.settle, args.seconds)
    base = baseline(ours["processes"], args.settle, args.seconds)
    ratio = ours["cores"] / base["cores"] if base["cores"] else float("inf")
    print(f"{'side':<10} {'processes':>9} {'cores':>7}")
    print(f"{'baseline':<10} {base['actors']:>9} {base['cores']:>7.3f}  (idle raw Ray actors)")
    print(f"{'sediment':<10} {ours['processes']:>9} {ours['cores']:>7.3f}  ({ours['scenario']}, "
          f"idle) ratio {ratio:.2f}x")
    print(f"\n{'kind':<28} {'n':>3} {'cores':>6}  signals received per second")
    for k in ours["kinds"]:
        print(f"{k['kind']:<28} {k['processes']:>3} {k['cores']:>6.3f}  {k['signals_per_s']}")
    result = {"machine_cpus": os.cpu_count(), "ray": ray.__version__, "settle_s": args.settle,
              "seconds": args.seconds, "baseline": base, "sediment": ours,
              "ratio": round(ratio, 2)}
    args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(f"\nwritten to {args.json}")


if __name__ == "__main__":
    main()
