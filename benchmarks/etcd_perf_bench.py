"""`etcdctl check perf` against a Sediment cluster on Ray and a real etcd 3.4, in one run.

`etcdctl check perf --load=L` (etcd 3.4's own health check) runs for 60 s: a rate limiter
hands Puts of a 256-byte key and a 1 KiB value to a pool of clients (`s`: 150 writes/s
over 50 clients; `m`: 1000 writes/s over 200 clients) and it passes when the throughput
is above 90 % of the limit, the slowest request took at most 0.5 s, the standard deviation
is at most 0.1 s and no request failed. Both sides are 3 members on this machine, both
given every member's endpoint (etcdctl's balancer spreads the clients over them; a
follower forwards a Put to its leader): a real etcd 3.4 (`tests/etcd_helpers.RealEtcd`)
and a Sediment cluster with the etcd API on an embedded local Ray. For each load the
script parses writes/s, the slowest request, the standard deviation, errors and the
verdict, and prints Sediment's figures against etcd's.

`--profile SECONDS` samples the Sediment leader's raft host (the process that runs the
raft member, the KV machine and the leader's gRPC server) with py-spy during the first
Sediment load (py-spy's collapsed stacks in a temporary directory named in the results,
and the share of samples per area of the code); sampling slows the host a little, so
record figures from a run without it.

Usage: python benchmarks/etcd_perf_bench.py [--loads s,m] [--json PATH] [--profile 20]
       [--systems etcd,sediment] [--target all|leader]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("SEDIMENT_LOG_LEVEL", "error")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

LOADS = {"s": (150, 50), "m": (1000, 200), "l": (8000, 500), "xl": (15000, 1000)}
CHECK_TIMEOUT = 300.0  # seconds for one `check perf` (it runs 60 s plus cleanup)
PREFIX = "/etcdctl-check-perf/"
CLOCK = os.sysconf("SC_CLK_TCK")


def cpu_by_pid() -> dict[int, tuple[str, float]]:
    """Every process's command line and CPU seconds so far (from /proc)."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(entry)] = (cmd, (int(stat[11]) + int(stat[12])) / CLOCK)
    return out


def cores_used(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]],
               seconds: float, names: dict[int, str]) -> dict[str, float]:
    """Cores each kind of process used between two `cpu_by_pid` snapshots: etcdctl,
    etcd, Sediment's hosts by what runs in them (`names`: OS pid -> label), Ray's own
    daemons, everything else."""
    kinds: dict[str, float] = {}
    for pid, (cmd, cpu) in after.items():
        used = cpu - before.get(pid, (cmd, 0.0))[1]
        if used <= 0:
            continue
        if pid in names:
            kind = names[pid]
        elif "etcdctl" in cmd:
            kind = "etcdctl"
        elif "/etcd " in cmd or cmd.startswith("etcd "):
            kind = "etcd"
        elif "ray" in cmd:
            kind = "ray (daemons, other workers)"
        else:
            kind = "other"
        kinds[kind] = kinds.get(kind, 0.0) + used / seconds
    return {k: round(v, 2) for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])}


def parse_check_perf(out: str) -> dict[str, Any]:
    """etcdctl 3.4's `check perf` report: throughput, slowest, stddev, errors, verdict."""
    row: dict[str, Any] = {"writes_per_s": None, "slowest_s": None, "stddev_s": None,
                           "errors": {}, "passed": False}
    if m := re.search(r"Throughput (?:is|too low:) (\d+) writes/s", out):
        row["writes_per_s"] = int(m.group(1))
    if m := re.search(r"Slowest request took(?: too long:)? ([\d.]+)s", out):
        row["slowest_s"] = float(m.group(1))
    if m := re.search(r"Stddev (?:is|too high:) ([\d.]+)s", out):
        row["stddev_s"] = float(m.group(1))
    for m in re.finditer(r"ERROR\((.*)\) -> (\d+)", out):
        row["errors"][m.group(1)] = int(m.group(2))
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    row["passed"] = bool(lines) and lines[-1] == "PASS"
    row["failures"] = [line for line in lines
                       if line.startswith("FAIL") or "too long" in line]
    return row


def etcdctl(endpoints: list[str], *args: str, timeout: float = 60.0,
            ) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("etcdctl")
    if binary is None:
        raise SystemExit("etcdctl is not installed (apt-get install etcd-client)")
    urls = ",".join(e if e.startswith("http") else f"http://{e}" for e in endpoints)
    return subprocess.run([binary, f"--endpoints={urls}", *args], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "ETCDCTL_API": "3"})


def check_perf(endpoints: list[str], load: str, names: dict[int, str] | None = None,
               ) -> dict[str, Any]:
    """One `check perf --load=load` (after clearing a previous run's prefix), with the
    cores every kind of process used meanwhile."""
    etcdctl(endpoints, "del", "--prefix", PREFIX)
    t0 = time.perf_counter()
    before = cpu_by_pid()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = etcdctl(endpoints, "check", "perf", f"--load={load}", timeout=CHECK_TIMEOUT)
    seconds = time.perf_counter() - t0
    cores = cores_used(before, cpu_by_pid(), seconds, names or {})
    ended = resource.getrusage(resource.RUSAGE_CHILDREN)  # etcdctl, once it was waited for
    cores["etcdctl"] = round((ended.ru_utime + ended.ru_stime - children.ru_utime
                              - children.ru_stime) / seconds, 2)
    row = parse_check_perf(done.stdout + done.stderr)
    row["cores"] = cores
    row["cores_total"] = round(sum(cores.values()), 2)
    limit, clients = LOADS[load]
    row.update(load=load, limit=limit, clients=clients, exit_code=done.returncode,
               wall_s=round(time.perf_counter() - t0, 1),
               output=[line.strip() for line in (done.stdout + done.stderr).splitlines()
                       if line.strip() and "Boo" not in line][-12:])
    return row


def _etcd_leader(endpoints: list[str]) -> str:
    import grpc

    from sediment.actors.etcd.pb import rpc_pb2, rpc_pb2_grpc

    for endpoint in endpoints:
        with grpc.insecure_channel(endpoint) as channel:
            status = rpc_pb2_grpc.MaintenanceStub(channel).Status(rpc_pb2.StatusRequest(),
                                                                  timeout=10)
            if status.leader == status.header.member_id:
                return endpoint
    return endpoints[0]


def run_etcd(loads: list[str], target: str = "all") -> dict[str, Any]:
    from etcd_helpers import RealEtcd, etcd_version

    out: dict[str, Any] = {"version": etcd_version(), "members": 3, "loads": {},
                           "target": target}
    with RealEtcd(members=3) as etcd:
        endpoints = list(etcd.endpoints)
        if target == "leader":
            endpoints = [_etcd_leader(endpoints)]
        for load in loads:
            print(f"etcd 3.4: check perf --load={load} ...", flush=True)
            out["loads"][load] = check_perf(endpoints, load)
            _print_row("etcd", out["loads"][load])
    return out


def _raft_host(cluster: Any, node: str) -> Any:
    """The Ray actor hosting `node`'s raft member (and its gRPC server), or None."""
    from sediment.actors.log.shell.names import raft_name

    pid = cluster.rt.whereis(raft_name(cluster.spec.group, node))
    return None if pid is None else cluster.rt.transport.handle(pid)


def host_names(cluster: Any) -> dict[int, str]:
    """OS pid -> what runs in that Ray host ("raft:kv@n1 etcd@n1 wal@n1 (leader)")."""
    import ray

    leader = cluster.leader()
    out: dict[int, str] = {}
    handles = {}  # pids travel without their host's handle: the transport knows it
    for pid in cluster.rt.processes():
        handle = cluster.rt.transport.handle(pid)
        if handle is not None:
            handles[pid.host or id(handle)] = handle
    for handle in handles.values():
        try:
            info = ray.get(handle.info.remote(), timeout=10)
        except Exception:  # noqa: BLE001 - a host that ended meanwhile
            continue
        labels = sorted(x for x in info.get("labels", []) if x and "sup" not in x)
        name = " ".join(labels) or "supervisors"
        if any(x.endswith(f"@{leader}") for x in labels):
            name += " (leader)"
        out[int(info["os_pid"])] = name
    return out


def _profile_host(handle: Any, seconds: float, out_dir: Path) -> dict[str, Any]:
    """py-spy on the host's OS process (every thread: grpc's and Ray's too)."""
    import ray

    info = ray.get(handle.info.remote(), timeout=30)
    spy = _py_spy(int(info["os_pid"]), seconds, out_dir)
    return {**spy, "processes": info.get("labels", [])}


def _py_spy(pid: int, seconds: float, out_dir: Path) -> dict[str, Any]:
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not os.path.exists(spy):
        return {"error": "py-spy is not installed in the venv"}
    raw = out_dir / "etcd_perf_profile.txt"
    done = subprocess.run([spy, "record", "--pid", str(pid), "--duration", str(int(seconds)),
                           "--rate", "50", "--format", "raw", "--output", str(raw),
                           "--nonblocking"], capture_output=True, text=True,
                          timeout=seconds + 60)
    if done.returncode != 0:
        return {"error": done.stderr[-500:]}
    return {"pid": pid, "raw": str(raw), "top": summarize_profile(raw)}


# where the raft host's samples are (a sample counts for every area its stack passes)
AREAS = {
    "etcd gRPC server (actors/etcd)": ("actors/etcd/",),
    "grpc library": ("grpc/",),
    "raft server shell": ("actors/log/shell/server.py",),
    "raft core": ("actors/log/raft/",),
    "WAL": ("actors/log/storage/wal",),
    "KV machine and store": ("actors/kv/",),
    "runtime transport flush (Ray actor calls out)": ("transport.py",),
    "Ray: actor method calls": ("ActorMethod._remote",),
    "Ray: deserializing what arrives": ("deserialize_objects",),
    "Ray: metrics": ("util/metrics.py",),
}


def summarize_profile(raw: Path, top: int = 25) -> dict[str, Any]:
    """From a py-spy raw (collapsed) file: the share of samples in each area (AREAS)
    and the functions with the highest inclusive share."""
    total = 0
    inclusive: dict[str, int] = {}
    areas: dict[str, int] = dict.fromkeys(AREAS, 0)
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        total += n
        for area, marks in AREAS.items():
            if any(mark in stack for mark in marks):
                areas[area] += n
        for frame in set(stack.split(";")):
            name = frame.split(" (")[0] + " " + frame.rsplit("/", 1)[-1].split(":")[0]
            inclusive[name] = inclusive.get(name, 0) + n
    ranked = sorted(inclusive.items(), key=lambda kv: -kv[1])[:top]
    return {"samples": total,
            "areas": {a: round(n / max(total, 1), 3) for a, n in areas.items()},
            "functions": [(name, round(n / max(total, 1), 3)) for name, n in ranked]}


def run_sediment(loads: list[str], profile: float, out_dir: Path, target: str = "all",
                 ) -> dict[str, Any]:
    from sediment.actors.etcd.shell.server import EtcdWire
    from sediment.runtime import api
    from sediment.wiring.cluster import Cluster

    data = tempfile.mkdtemp(prefix="sediment-perf-")
    out: dict[str, Any] = {"members": 3, "loads": {}}
    t0 = time.perf_counter()
    rt = api.start("ray", nodes=("n1", "n2", "n3"))
    try:
        cluster = Cluster.start(runtime=rt, data_dir=data, etcd=EtcdWire(),
                                compaction_interval=3600.0)
        out["start_s"] = round(time.perf_counter() - t0, 1)
        leader = cluster.wait_ready()
        endpoints = list(cluster.endpoints().values())
        if target == "leader":
            endpoints = [cluster.endpoints()[leader]]
        out.update(leader=leader, target=target)
        for i, load in enumerate(loads):
            print(f"sediment: check perf --load={load} ...", flush=True)
            spy: dict[str, Any] = {}
            thread = None
            host = _raft_host(cluster, leader) if profile and i == 0 else None
            if host is not None:
                def record(host: Any = host, spy: dict[str, Any] = spy) -> None:
                    time.sleep(10)  # past the clients' connection setup
                    spy.update(_profile_host(host, profile, out_dir))
                thread = threading.Thread(target=record, daemon=True)
                thread.start()
            first = cluster._raft_status(leader) or {}
            out["loads"][load] = check_perf(endpoints, load, host_names(cluster))
            last = cluster._raft_status(leader) or {}
            now_leading = cluster.leader()
            if now_leading != leader:  # its counters are not the load's: say so
                out["loads"][load]["leader_changed"] = f"{leader} -> {now_leading}"
                leader = now_leading or leader
            batches = last.get("batches", 0) - first.get("batches", 0)
            proposals = last.get("proposals", 0) - first.get("proposals", 0)
            out["loads"][load]["leader_batches"] = {
                "batches": batches, "proposals": proposals,
                "per_batch": round(proposals / batches, 2) if batches else None}
            if thread is not None:
                thread.join()
                out["profile"] = spy
            _print_row("sediment", out["loads"][load])
    finally:
        rt.shutdown()
        shutil.rmtree(data, ignore_errors=True)
    return out


def _print_row(side: str, row: dict[str, Any]) -> None:
    verdict = "PASS" if row["passed"] else "FAIL"
    print(f"  {side}: {verdict} {row['writes_per_s']} writes/s, slowest {row['slowest_s']} s, "
          f"stddev {row['stddev_s']} s, errors {sum(row['errors'].values())}; "
          f"cores {row['cores_total']}: {row['cores']}", flush=True)


def ratios(etcd: dict[str, Any], sed: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for load in sed.get("loads", {}):
        a, b = etcd.get("loads", {}).get(load), sed["loads"][load]
        if a is None:
            continue
        out[load] = {
            "writes_per_s": (round(b["writes_per_s"] / a["writes_per_s"], 2)
                             if a["writes_per_s"] and b["writes_per_s"] is not None else None),
            "slowest_s": (round(b["slowest_s"] / a["slowest_s"], 1)
                          if a["slowest_s"] and b["slowest_s"] is not None else None),
        }
    return out


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, cwd=ROOT)
    return done.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--loads", default="s,m")
    p.add_argument("--systems", default="etcd,sediment")
    p.add_argument("--target", choices=("all", "leader"), default="all",
                   help="give etcdctl every member's endpoint (default) or the leader's")
    p.add_argument("--profile", type=float, default=0.0,
                   help="seconds of py-spy on the Sediment leader's raft host (0: none)")
    p.add_argument("--json", default=str(ROOT / "benchmarks" / "results_etcd_perf.json"))
    args = p.parse_args(argv)
    loads = [x for x in args.loads.split(",") if x]
    if unknown := [x for x in loads if x not in LOADS]:
        p.error(f"unknown load {unknown}; choose from {sorted(LOADS)}")
    systems = set(args.systems.split(","))
    result: dict[str, Any] = {"commit": _commit(), "date": time.strftime("%Y-%m-%d"),
                              "machine": f"{os.cpu_count()} cores"}
    out_dir = Path(tempfile.mkdtemp(prefix="sediment-perf-profile-"))
    result["etcd"] = run_etcd(loads, args.target) if "etcd" in systems else {}
    result["sediment"] = (run_sediment(loads, args.profile, out_dir, args.target)
                          if "sediment" in systems else {})
    result["ratio_sediment_to_etcd"] = ratios(result["etcd"], result["sediment"])
    print()
    print(f"{'load':<5} {'side':<9} {'verdict':<7} {'writes/s':>9} {'slowest s':>10} "
          f"{'stddev s':>9} {'errors':>7}")
    for load in loads:
        for side in ("etcd", "sediment"):
            row = result[side].get("loads", {}).get(load)
            if row:
                print(f"{load:<5} {side:<9} {'PASS' if row['passed'] else 'FAIL':<7} "
                      f"{row['writes_per_s']!s:>9} {row['slowest_s']!s:>10} "
                      f"{row['stddev_s']!s:>9} {sum(row['errors'].values()):>7}")
        r = result["ratio_sediment_to_etcd"].get(load)
        if r:
            print(f"{load:<5} ratio     sediment/etcd: writes/s {r['writes_per_s']}x, "
                  f"slowest {r['slowest_s']}x")
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
