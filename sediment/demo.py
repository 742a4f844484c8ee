"""The demos, on an embedded local Ray: the headline scenario (default), the KV demo
(`--kv`, `sediment/kv_demo.py`) and the supervision tree broken on purpose
(`--supervision`).

The headline is the library scenario `primary-killed-in-notice`: a 3-node KV cluster
under client traffic and watchers, the Primary killed while its compaction notices are
out, and every check of the library run on the history (linearizability, the watch
guarantees, no lost write, compaction safety); its report (result.json, history.json,
timeline.html) lands under `sediment-runs/`.

The supervision demo starts three logical nodes, a top supervisor with workers spread
over them and a nested supervisor, then kills a worker with `ray.kill` and later a whole
logical node, printing each restart as it happens and the tree after each step.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from sediment import cli_args, log
from sediment.runtime import api
from sediment.runtime.gen_server import GenServer, serve
from sediment.runtime.messages import Call
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process
from sediment.supervision import ChildSpec, Spawn, SupFlags, requests, start_top


class Ticker(GenServer):
    """A worker that counts calls; stands in for a domain process."""

    async def init(self, ctx: Process, name: str) -> None:
        self.name, self.calls = name, 0

    async def handle_call(self, ctx: Process, request: Any, from_: Any) -> Any:
        self.calls += 1
        return (self.name, str(ctx.self()), self.calls)


async def report_sink(ctx: Process) -> None:
    """Collects supervisor reports; a call returns and clears them."""
    seen: list[Any] = []
    while True:
        msg = await ctx.receive()
        if isinstance(msg, Call):
            ctx.reply(msg.from_, seen)
            seen = []
        else:
            seen.append(msg)


def ticker(name: str, node: str) -> ChildSpec:
    return ChildSpec(name, (Spawn(serve, node=node, name=name, label=name), (Ticker, name)))


def build_tree(rt: api.Runtime, sink: Pid) -> Pid:
    pool = ChildSpec("pool", (Spawn(_pool_supervisor, node="n3", label="pool"), (sink,)),
                     type="supervisor")
    specs = [ticker("ticker-n1", "n1"), ticker("ticker-n2", "n2"), ticker("ticker-n3", "n3"),
             pool]
    return start_top(rt, SupFlags(strategy="one_for_one", intensity=10, period=10), specs,
                     report_to=sink)


async def _pool_supervisor(ctx: Process, sink: Pid) -> None:
    from sediment.supervision import supervisor

    await supervisor(ctx, SupFlags(intensity=10, period=10),
                     [ticker("pool-a", "n3"), ticker("pool-b", "n3")], sink)


def tree(rt: api.Runtime, sup: Pid, indent: str = "  ") -> list[str]:
    lines = []
    for cid, pid, kind in rt.call(sup, requests.WhichChildren(), timeout=30):
        lines.append(f"{indent}{cid:<10} {kind:<10} {pid}")
        if kind == "supervisor" and isinstance(pid, Pid):
            lines.extend(tree(rt, pid, indent + "    "))
    return lines


def wait_for_restart(rt: api.Runtime, sup: Pid, child: str, old: Pid, t0: float,
                     out: Any, probe: Any = "hello") -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        which = rt.call(sup, requests.WhichChildren(), timeout=30)
        new = requests.child_pid(which, child)
        if new is not None and new != old:
            answer = rt.call(new, probe, timeout=30)
            ms = (time.monotonic() - t0) * 1000
            out(f"  restarted {child}: {old} -> {new} after {ms:.0f} ms, answering "
                f"{str(answer)[:60]}")
            return
        rt.sleep(0.02)
    raise SystemExit(f"{child} was not restarted within 60 s")


HEADLINE = "primary-killed-in-notice"


def build_parser() -> argparse.ArgumentParser:
    parser = cli_args.parser(
        "sediment demo",
        f"The headline scenario ({HEADLINE}) with its report; --kv runs the KV demo "
        "(watch-aware compaction, the leader killed), --supervision the supervision-tree "
        "demo. The processes' logs go to a file (named at the end); the console shows "
        "what each demo shows.")
    parser.add_argument("--backend", choices=api.BACKENDS, default="ray",
                        help="ray: an embedded local Ray (or RAY_ADDRESS); sim: the "
                             "deterministic simulator, in seconds")
    parser.add_argument("--seed", type=cli_args.int_at_least(0), default=0,
                        help="the headline scenario's seed")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="report directory (default: sediment-runs/demo-<time>)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--kv", action="store_true", help="the KV demo instead")
    which.add_argument("--supervision", action="store_true",
                       help="the supervision-tree demo instead (restarts after ray.kill)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not args.kv and not args.supervision:
        return headline_scenario(args.backend, args.seed, args.out)
    logs = Path(tempfile.mkdtemp(prefix="sediment-demo-")) / "demo.log"
    with log.file_sink(logs, capture_processes=True):
        if args.supervision:
            code = supervision_demo(args.backend)
        else:
            from sediment import kv_demo

            code = kv_demo.run(args.backend, data_dir=str(logs.parent / "data"))
    print(f"logs: {logs}")
    return code


def headline_scenario(backend: str, seed: int, out: str | None) -> int:
    """`sediment run` of the headline library scenario: progress, summary, report."""
    from sediment import cli, scenarios

    path = Path(scenarios.__file__).parent / "library" / f"{HEADLINE}.yaml"
    out = out or f"sediment-runs/demo-{time.strftime('%Y%m%d-%H%M%S')}"
    proves = [line.removeprefix("#").strip() for line in path.read_text().splitlines()
              if line.startswith("#")]
    print(f"{HEADLINE} on {backend}, seed {seed}:\n  " + "\n  ".join(proves) + "\n",
          flush=True)
    return cli.main(["run", str(path), "--backend", backend, "--seed", str(seed), "--out",
                     out, "--each"])


def supervision_demo(backend: str) -> int:
    """The runtime's demo: a supervision tree on three nodes, a worker and a node killed."""
    out = print
    how = "ray.kill" if backend == "ray" else "a simulated crash"
    t_start = time.monotonic()
    out(f"starting a {backend} runtime with logical nodes n1, n2, n3 ...")
    rt = api.start(backend, nodes=("n1", "n2", "n3"))
    try:
        sink = rt.spawn(report_sink, label="reports")
        sup = build_tree(rt, sink)
        out(f"supervision tree up in {time.monotonic() - t_start:.1f} s (top = {sup}):")
        out("\n".join(tree(rt, sup)))

        victim = requests.child_pid(rt.call(sup, requests.WhichChildren()), "ticker-n2")
        assert victim is not None
        out(f"\nkilling ticker-n2 {victim} with {how} ...")
        t0 = time.monotonic()
        rt.kill(victim)
        wait_for_restart(rt, sup, "ticker-n2", victim, t0, out)

        old_n3 = requests.child_pid(rt.call(sup, requests.WhichChildren()), "ticker-n3")
        assert old_n3 is not None
        out("\nkilling every process on logical node n3 ...")
        t0 = time.monotonic()
        for pid in rt.kill_node("n3"):
            out(f"  killed {pid}")
        wait_for_restart(rt, sup, "ticker-n3", old_n3, t0, out)
        wait_for_restart(rt, sup, "pool", Pid("-", "-"), t0, out, requests.CountChildren())
        out("\nsupervisor reports:")
        for report in rt.call(sink, "drain", timeout=30):
            data = report.data
            out(f"  {report.supervisor} {report.kind}: {data.get('id')!r} "
                f"reason={data.get('reason')!r}")
        out("\ntree after the faults:")
        out("\n".join(tree(rt, sup)))
    finally:
        rt.shutdown()
        out(f"\nshut down cleanly; total {time.monotonic() - t_start:.1f} s")
    return 0
