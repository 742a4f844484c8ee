"""Runtime benchmark: the mailbox layer against raw Ray actor calls, in one run.

Patterns (every sender and receiver is an async Ray actor on both sides):
  1:1 async   one sender submits N messages; done when the receiver processed all N
              (raw: N actor calls, then await them all; ours: N `send`s, then one `call`,
              which per-sender FIFO answers after the N messages)
  1:1 sync    N sequential round trips (raw: `await actor.m.remote()`; ours: `ctx.call`)
  n:n async   k senders x k receivers, round-robin, all at once
  co-hosted   the 1:1 patterns between two processes in one host actor (a BEAM node's
              processes: an in-memory queue operation) against a raw Ray actor call
              (target: >= 20x)
  host crash  ray.kill of one host holding H processes, each monitored from another
              host: time until every monitor got its `killed` DOWN
  channels    the cross-host patterns again with SEDIMENT_CHANNELS=ray (every batch a Ray
              call, as before the hosts' direct channels)
plus restart latency on Ray (ray.kill of a supervised child until its replacement answers
a call) and simulation throughput (messages per second of the sim backend).

Usage: python benchmarks/runtime_bench.py [--n 3000] [--repeat 3] [--restarts 20] [--markdown]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("SEDIMENT_LOG_LEVEL", "error")

import ray  # noqa: E402

from sediment.runtime import api  # noqa: E402
from sediment.runtime.messages import Call  # noqa: E402
from sediment.runtime.pid import Pid  # noqa: E402
from sediment.runtime.process import Process  # noqa: E402
from sediment.supervision import ChildSpec, Spawn, SupFlags, requests, start_top  # noqa: E402

# --- raw Ray baseline ---------------------------------------------------------------------


@ray.remote(num_cpus=0)
class RawSink:
    async def small(self, x: Any) -> bytes:
        return b"ok"


@ray.remote(num_cpus=0)
class RawSender:
    async def fire(self, sinks: list[Any], n: int) -> float:
        t0 = time.perf_counter()
        refs = [sinks[i % len(sinks)].small.remote(i) for i in range(n)]
        await asyncio.gather(*refs)
        return time.perf_counter() - t0

    async def roundtrips(self, sink: Any, n: int) -> float:
        t0 = time.perf_counter()
        for i in range(n):
            await sink.small.remote(i)
        return time.perf_counter() - t0


# --- the same patterns through the runtime ---------------------------------------------------


async def sink_proc(ctx: Process) -> None:
    while True:
        msg = await ctx.receive()
        if isinstance(msg, Call):
            ctx.reply(msg.from_, b"ok")


async def fire_proc(ctx: Process, sinks: list[Pid], n: int) -> float:
    t0 = time.perf_counter()
    for i in range(n):
        ctx.send(sinks[i % len(sinks)], i)
    for sink in sinks:
        await ctx.call(sink, "sync", timeout=300)
    return time.perf_counter() - t0


async def call_proc(ctx: Process, sink: Pid, n: int) -> float:
    t0 = time.perf_counter()
    for i in range(n):
        await ctx.call(sink, i, timeout=60)
    return time.perf_counter() - t0


async def watcher_proc(ctx: Process, victims: list[Pid]) -> None:
    """Monitors every victim and answers "ready"; on "wait", answers the wall-clock time
    at which the last of their DOWNs (all `killed`) arrived."""
    from sediment.runtime.messages import Down

    first = await ctx.receive(lambda m: isinstance(m, Call))
    for v in victims:
        ctx.monitor(v)
    ctx.reply(first.from_, "ready")
    wait = await ctx.receive(lambda m: isinstance(m, Call))
    reasons = [(await ctx.receive(lambda m: isinstance(m, Down))).reason for _ in victims]
    ctx.reply(wait.from_, (time.time(), sorted({str(r) for r in reasons})))


async def started(ctx: Process, *args: Any) -> str:
    return "ready"


# --- measurements ------------------------------------------------------------------------------


def raw_rates(n: int, k: int) -> dict[str, float]:
    sinks = [RawSink.remote() for _ in range(k)]
    senders = [RawSender.remote() for _ in range(k)]
    ray.get([s.small.remote(0) for s in sinks])
    ray.get([s.roundtrips.remote(sinks[0], 1) for s in senders])
    one = ray.get(senders[0].fire.remote([sinks[0]], n))
    sync = ray.get(senders[0].roundtrips.remote(sinks[0], n))
    t0 = time.perf_counter()
    ray.get([s.fire.remote(sinks, n) for s in senders])
    many = time.perf_counter() - t0
    for actor in sinks + senders:
        ray.kill(actor)
    return {"1:1 async": n / one, "1:1 sync": n / sync, "n:n async": k * n / many}


def our_rates(rt: Any, n: int, k: int) -> dict[str, float]:
    """The same three patterns; the measuring processes are started (and settled) first."""
    nodes = rt.nodes
    sinks = [rt.spawn(sink_proc, node=nodes[i % len(nodes)]) for i in range(k)]
    clients = [rt.spawn(bench_client, node=nodes[(i + 1) % len(nodes)]) for i in range(k)]
    time.sleep(1)  # new worker processes settle, as the raw side's do before it measures
    one = rt.call(clients[0], ("fire", [sinks[0]], n), timeout=600)
    sync = rt.call(clients[0], ("calls", [sinks[0]], n), timeout=600)
    t0 = time.perf_counter()
    for client in clients:
        rt.send(client, ("fire", sinks, n))
    for client in clients:
        rt.call(client, ("last", [], 0), timeout=600)
    many = time.perf_counter() - t0
    for pid in sinks + clients:
        rt.kill(pid)
    return {"1:1 async": n / one, "1:1 sync": n / sync, "n:n async": k * n / many}


COHOST = "bench-cohost"


def cohosted_rates(rt: Any, n: int) -> dict[str, float]:
    """1:1 async and sync between two processes sharing one host actor."""
    sink = rt.spawn(sink_proc, node=rt.nodes[0], host=COHOST)
    client = rt.spawn(bench_client, node=rt.nodes[0], host=COHOST)
    rt.call(client, ("calls", [sink], 10), timeout=60)
    one = rt.call(client, ("fire", [sink], n), timeout=600)
    sync = rt.call(client, ("calls", [sink], n), timeout=600)
    for pid in (sink, client):
        rt.kill(pid)
    return {"co-hosted 1:1 async": n / one, "co-hosted 1:1 sync": n / sync}


def host_crash(rt: Any, processes: int) -> float:
    """Seconds from ray.kill of a host with `processes` processes until a watcher on
    another host holds every one's DOWN (killed)."""
    victims = [rt.spawn(sink_proc, node=rt.nodes[0], host="bench-victims")
               for _ in range(processes)]
    watcher = rt.spawn(watcher_proc, victims, node=rt.nodes[1])
    rt.call(watcher, "watch", timeout=120)
    t0 = time.time()
    rt.kill_host(rt.nodes[0], "bench-victims")
    done, reasons = rt.call(watcher, "wait", timeout=120)
    if reasons != ["killed"]:
        raise RuntimeError(f"unexpected DOWN reasons: {reasons}")
    return float(done - t0)


async def bench_client(ctx: Process) -> None:
    """Runs one measurement per request; a plain message runs it without replying."""
    last = 0.0
    while True:
        msg = await ctx.receive()
        request = msg.request if isinstance(msg, Call) else msg
        kind, sinks, n = request
        if kind == "fire":
            last = await fire_proc(ctx, sinks, n)
        elif kind == "calls":
            last = await call_proc(ctx, sinks[0], n)
        if isinstance(msg, Call):
            ctx.reply(msg.from_, last)


async def echo_server(ctx: Process) -> None:
    while True:
        msg = await ctx.receive()
        if isinstance(msg, Call):
            ctx.reply(msg.from_, "pong")


def restart_latencies(rt: Any, restarts: int, spacing: float, name: str) -> list[float]:
    """ray.kill the supervised child, time until its replacement answers a call.

    `spacing` seconds pass between kills: with time to refill the warm actor pool,
    a restart takes a pooled actor; back to back (0), most restarts create a new one.
    """
    spec = ChildSpec("victim", (Spawn(echo_server, name=name, node=rt.nodes[-1]), ()))
    sup = start_top(rt, SupFlags(intensity=restarts + 10, period=1), [spec], name=f"top-{name}")
    samples = []
    for _ in range(restarts):
        time.sleep(spacing)
        old = rt.whereis(name)
        while old is None:
            time.sleep(0.005)
            old = rt.whereis(name)
        t0 = time.perf_counter()
        rt.kill(old)
        while True:
            new = rt.whereis(name)
            if new is not None and new != old:
                try:
                    rt.call(new, "ping", timeout=10)
                    break
                except Exception:  # noqa: BLE001 - not answering yet
                    pass
            time.sleep(0.002)
        samples.append(time.perf_counter() - t0)
    rt.call(sup, requests.StopSupervisor(), timeout=60)
    return sorted(samples)


async def _blast(ctx: Process, n: int) -> None:
    sink = await ctx.spawn(_count_sink, n, ctx.self(), mailbox_capacity=n + 10)
    for i in range(n):
        ctx.send(sink, i)
    await ctx.receive(lambda m: m == "done")


async def _count_sink(ctx: Process, n: int, parent: Pid) -> None:
    for _ in range(n):
        await ctx.receive()
    ctx.send(parent, "done")


async def _ping_pong(ctx: Process, n: int) -> None:
    peer = await ctx.spawn(_ponger, node="n2")
    me = ctx.self()
    for i in range(n):
        ctx.send(peer, (me, i))
        await ctx.receive()


async def _ponger(ctx: Process) -> None:
    while True:
        sender, i = await ctx.receive()
        ctx.send(sender, i)


def sim_rates(n: int) -> dict[str, float]:
    out = {}
    for label, kwargs in (("sim one-way (defaults: trace, pickle check)", {}),
                          ("sim one-way (trace off)", {"trace": False, "check_pickle": False})):
        rt = api.start("sim", seed=1, **kwargs)
        t0 = time.perf_counter()
        rt.run(_blast, n, timeout=1e9)
        out[label] = n / (time.perf_counter() - t0)
        rt.shutdown()
    rt = api.start("sim", seed=1, trace=False, check_pickle=False)
    t0 = time.perf_counter()
    rt.run(_ping_pong, n // 2, timeout=1e9)
    out["sim ping-pong, cross-node (trace off)"] = n / (time.perf_counter() - t0)
    rt.shutdown()
    return out


def median_of(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=3000, help="messages per pattern")
    parser.add_argument("--k", type=int, default=2, help="senders/receivers for n:n")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--restarts", type=int, default=20)
    parser.add_argument("--sim-n", type=int, default=200_000)
    parser.add_argument("--crash-processes", type=int, default=100,
                        help="processes in the host the crash row kills")
    parser.add_argument("--markdown", action="store_true", help="print a README table")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()

    print(f"ray {ray.__version__}, {os.cpu_count()} cores; n={args.n}, k={args.k}, "
          f"repeat={args.repeat}", flush=True)
    sim = sim_rates(args.sim_n)  # first, while no Ray process competes for the CPU
    # Throughput: no warm pool, so no actor is being started in the background while
    # we measure (the raw side, too, creates its actors before measuring).
    rt = api.start("ray", nodes=("n1", "n2"), warm_pool=0)
    rt.run(started)  # warm up worker processes and imports
    raw_runs, our_runs = [], []
    for i in range(args.repeat):
        raw_runs.append(raw_rates(args.n, args.k))
        our_runs.append(our_rates(rt, args.n, args.k))
        print(f"  round {i + 1}: raw {raw_runs[-1]}\n           ours {our_runs[-1]}", flush=True)
    raw, ours = median_of(raw_runs), median_of(our_runs)
    cohosted = median_of([cohosted_rates(rt, args.n) for _ in range(args.repeat)])
    crash = sorted(host_crash(rt, args.crash_processes) for _ in range(args.repeat))
    rt.shutdown()
    # the same patterns with the hosts' direct channels off: every batch a Ray call
    os.environ["SEDIMENT_CHANNELS"] = "ray"
    rt = api.start("ray", nodes=("n1", "n2"), warm_pool=0)
    del os.environ["SEDIMENT_CHANNELS"]
    rt.run(started)
    ray_calls = median_of([our_rates(rt, args.n, args.k) for _ in range(args.repeat)])
    rt.shutdown()
    rt = api.start("ray", nodes=("n1", "n2"), warm_pool=1)
    time.sleep(3)  # let the warm pool fill
    restarts = {
        "warm pool (1 s between kills)": restart_latencies(rt, args.restarts, 1.0, "spaced"),
        "back to back": restart_latencies(rt, args.restarts, 0.0, "burst"),
    }
    rt.shutdown()

    rows = [(k, raw[k], ours[k], ours[k] / raw[k], ">= 0.8x", ray_calls[k]) for k in raw]
    restart_stats = {label: {"p50": statistics.median(lat), "p95": lat[int(0.95 * (len(lat) - 1))],
                             "max": lat[-1], "n": len(lat)} for label, lat in restarts.items()}
    results = {"throughput": rows, "cohosted": cohosted, "host_crash_s": crash,
               "restart_s": restart_stats, "sim": sim,
               "rounds": {"raw": raw_runs, "ours": our_runs}}
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    print("\n| pattern | raw Ray (msg/s) | Sediment (msg/s) | ratio | target | "
          "Sediment, channels off (msg/s) |")
    print("|---|---:|---:|---:|---|---:|")
    for name, r, o, ratio, target, off in rows:
        ok = "ok" if ratio >= 0.8 else "MISSED"
        print(f"| {name} | {r:,.0f} | {o:,.0f} | {ratio:.2f}x | {target} {ok} | {off:,.0f} |")
    raw_call = raw["1:1 sync"]
    for name, rate in cohosted.items():
        ok = "ok" if rate >= 20 * raw_call else "MISSED"
        print(f"| {name} (vs raw Ray 1:1 sync) | {raw_call:,.0f} | {rate:,.0f} | "
              f"{rate / raw_call:.1f}x | >= 20x {ok} |")
    print(f"| host crash: ray.kill of a host of {args.crash_processes} processes -> every "
          f"monitor DOWN (killed), median of {len(crash)} | | "
          f"{statistics.median(crash) * 1000:.0f} ms | | |")
    for label, st in restart_stats.items():
        ok = "ok" if st["p50"] < 1.0 else "MISSED"
        print(f"| restart on Ray, {label}: ray.kill -> replacement answers (n={st['n']}) | | "
              f"p50 {st['p50'] * 1000:.0f} ms, p95 {st['p95'] * 1000:.0f} ms, "
              f"max {st['max'] * 1000:.0f} ms | | p50 < 1 s {ok} |")
    for name, rate in sim.items():
        ok = "ok" if rate >= 100_000 else "MISSED"
        print(f"| {name} | | {rate:,.0f} msg/s | | >= 100k {ok} |")


if __name__ == "__main__":
    main()
