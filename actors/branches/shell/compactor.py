"""The staging compactor as a process, registered as `COMPACTOR_NAME`.

It runs one compaction at a time (`compactor.compact`: the three steps), for:
- sensor triggers: on a nudge from the sensor, and every `poll_interval` in case a
  nudge was lost, it takes triggers with `Take()` until none is left; these
  compactions honour CompactionStartTime (the SetIf claim: a branch compacted within
  the interval is skipped, CompactionThrottled);
- calls `Compact(repo, branch, force)` -> `Compacted(Compaction)` | `CompactFailed(error)`
  (`protocol.py`).

Failpoints `branches.compactor.after_step1|2|3` sit after each step: a crash there is
the "compactor killed at each step" of the seed's promise (the branch stays readable
and equivalent; what the steps left behind is garbage for `gc.py`).
Status() answers the counts of compactions by outcome.

Merges that read at least `spark.threshold` base entries go to the cluster's Spark
bridge, the rest run here (`merging.py`; either way the same metarange).

On start it lists the branches and schedules an unforced compaction of every branch
holding sealed tokens (`recovery.py`: what a compaction killed after step 1 left,
e.g. by a move of the services to a new KV leader), run on the tick once due.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from sediment import log
from sediment.actors.branches import compactor as cp
from sediment.actors.branches import recovery as rc
from sediment.actors.branches.apply import SplitRule
from sediment.actors.branches.branch import Branch
from sediment.actors.branches.errors import BranchesError
from sediment.actors.branches.history import NoRecorder, Recorder
from sediment.actors.branches.metarange import MetaRangeStore
from sediment.actors.branches.sensor import Take, Trigger
from sediment.actors.branches.shell.kv_process import ProcessKv
from sediment.actors.branches.shell.merging import BridgeMerger, SparkPolicy
from sediment.actors.branches.shell.names import SENSOR_NAME
from sediment.actors.branches.shell.process_env import ProcessEnv
from sediment.actors.branches.shell.protocol import Compact, Compacted, CompactFailed, Work
from sediment.actors.branches.shell.recorder import ProcessRecorder
from sediment.actors.branches.tier import Tier, TierConfig
from sediment.actors.kv.errors import KvError
from sediment.runtime.common_calls import Status, UnknownRequest
from sediment.runtime.errors import CallError
from sediment.runtime.messages import Call
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process

_logger = log.get_logger("sediment.branches.compactor")

FAILPOINTS = tuple(f"branches.compactor.{step}" for step in cp.STEPS)
MAX_TAKES = 1000  # triggers taken per wake-up (the sensor's queue is bounded the same)


@dataclass(frozen=True)
class CompactorConfig:
    kv_nodes: tuple[str, ...]
    root: str
    tier: TierConfig = field(default_factory=TierConfig)
    rule: SplitRule = field(default_factory=SplitRule)
    poll_interval: float = 5.0
    sensor: str = SENSOR_NAME
    recorder: Pid | None = None  # a `recorder.collector` for history checks
    seed: int | None = None  # deterministic staging tokens on sim
    spark: SparkPolicy = field(default_factory=SparkPolicy)  # large merges on Spark
    wall_clock: bool = False  # claims on the wall clock (`shell/process_env.py`)

    def __post_init__(self) -> None:
        if not self.kv_nodes or not all(isinstance(n, str) and n for n in self.kv_nodes):
            raise ValueError(f"kv_nodes must be node names: {self.kv_nodes!r}")
        if not isinstance(self.root, str) or not self.root:
            raise ValueError(f"root must be a directory: {self.root!r}")
        p = self.poll_interval
        if not isinstance(p, int | float) or not math.isfinite(p) or p <= 0:
            raise ValueError(f"poll_interval must be positive seconds: {p!r}")


@dataclass(frozen=True)
class _Tick:
    pass


async def compactor_process(ctx: Process, config: CompactorConfig) -> None:
    recorder: Recorder = (NoRecorder() if config.recorder is None
                          else ProcessRecorder(ctx, config.recorder))
    env = ProcessEnv(ctx, config.seed, config.wall_clock)
    tier = Tier(ProcessKv(ctx, config.kv_nodes), env, MetaRangeStore(config.root, config.rule),
                config.tier, recorder, merger=BridgeMerger(ctx, env, config.spark))
    counts: dict[str, int] = {}

    async def hook(step: str) -> None:
        await ctx.failpoint(f"branches.compactor.{step}")

    async def run(repo: str, branch: str, force: bool) -> cp.Compaction | BaseException:
        try:
            done = await cp.compact(tier, repo, branch, force, hook)
        except (BranchesError, KvError) as err:
            counts[type(err).__name__] = counts.get(type(err).__name__, 0) + 1
            return err
        counts["done"] = counts.get("done", 0) + 1
        _logger.info("branch compacted", repo=repo, branch=branch,
                     tokens=len(done.started.sealed_tokens), seconds=round(done.seconds, 3))
        return done

    pending = await _recoveries(tier)
    if pending:
        _logger.info("compactions to redo", branches=len(pending))
    ctx.send_after(config.poll_interval, ctx.self(), _Tick())
    while True:
        msg = await ctx.receive()
        if isinstance(msg, _Tick | Work):
            if isinstance(msg, _Tick):
                ctx.send_after(config.poll_interval, ctx.self(), _Tick())
                ready, pending = rc.due(pending, ctx.now())
                for r in ready:
                    await run(r.repo, r.branch, force=False)
            for _ in range(MAX_TAKES):
                trigger = await _take(ctx, config.sensor)
                if trigger is None:
                    break
                await run(trigger.repo, trigger.branch, force=False)
        elif isinstance(msg, Call) and isinstance(msg.request, Compact):
            c = msg.request
            result = await run(c.repo, c.branch, bool(c.force))
            ctx.reply(msg.from_, Compacted(result) if isinstance(result, cp.Compaction)
                      else CompactFailed(result))
        elif isinstance(msg, Call) and isinstance(msg.request, Status):
            ctx.reply(msg.from_, {"counts": dict(counts), "recoveries": len(pending)})
        elif isinstance(msg, Call):
            ctx.reply(msg.from_, UnknownRequest.of(msg.request))
        else:
            _logger.warning("compactor got an unexpected message", message=repr(msg)[:200])


async def _recoveries(tier: Tier) -> list[rc.Recovery]:
    """The compactions to redo (a KV that does not answer: none, logged)."""
    found: list[tuple[str, str, Branch]] = []
    try:
        for repo in await tier.refs.list_repos():
            for name, b in await tier.refs.list_branches(repo):
                found.append((repo, name, b))
    except (BranchesError, KvError, CallError) as err:
        _logger.warning("could not list branches to redo their compactions",
                        error=f"{type(err).__name__}: {err}"[:200])
        return []
    return rc.recoveries(found, tier.env.now(), tier.config.compaction_interval)


async def _take(ctx: Process, sensor: str) -> Trigger | None:
    try:
        answer = await ctx.call(sensor, Take(), timeout=5.0)
    except CallError:
        return None
    return answer if isinstance(answer, Trigger) else None


__all__ = ["FAILPOINTS", "CompactorConfig", "compactor_process"]
