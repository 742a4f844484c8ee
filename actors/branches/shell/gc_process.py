"""The branch tier's garbage collector as a process, registered as `GC_NAME`, beside
the sensor and the compactor (so it follows the KV leader with them, `service.py`).

Every `interval` it sweeps one repository (`gc.sweep`, bounded: at most `max_tokens`
staging tokens dropped and `max_files` files removed per pass), taking the
repositories in turn, and sweeps the same one again on the next pass while a budget
ran out. Calls (`protocol.py`): `Sweep(repo)` sweeps that repository now ->
`Swept(gc.Swept)` | `SweepFailed(error)`; Status() -> the passes and what they
collected.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from sediment import log
from sediment.actors.branches import garbage as gb
from sediment.actors.branches import gc
from sediment.actors.branches.errors import BranchesError
from sediment.actors.branches.metarange import MetaRangeStore
from sediment.actors.branches.shell import protocol as bp
from sediment.actors.branches.shell.compactor import CompactorConfig
from sediment.actors.branches.shell.kv_process import ProcessKv
from sediment.actors.branches.shell.process_env import ProcessEnv
from sediment.actors.branches.tier import Tier
from sediment.actors.kv.errors import KvError
from sediment.runtime.common_calls import Status, UnknownRequest
from sediment.runtime.errors import CallError
from sediment.runtime.messages import Call
from sediment.runtime.process import Process

_logger = log.get_logger("sediment.branches.gc")

GC_NAME = "branches-gc"


@dataclass(frozen=True)
class GcConfig:
    """How often and how much: a pass every `interval` seconds over one repository,
    files younger than `grace` seconds kept (`garbage.py`)."""

    interval: float = 600.0
    grace: float = gb.DEFAULT_GRACE
    max_tokens: int = gc.MAX_TOKENS
    max_files: int = gc.MAX_FILES

    def __post_init__(self) -> None:
        for name, least in (("interval", 1e-9), ("grace", 0.0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) \
                    or v < least:
                raise ValueError(f"{name} must be at least {least} seconds: {v!r}")
        for name in ("max_tokens", "max_files"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int: {v!r}")


@dataclass
class _Totals:
    passes: int = 0
    tokens: int = 0
    files: int = 0
    scratch: int = 0
    failed: int = 0
    last: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class _Pass:
    pass


async def gc_process(ctx: Process, compactor: CompactorConfig, config: GcConfig) -> None:
    env = ProcessEnv(ctx, compactor.seed, compactor.wall_clock)
    tier = Tier(ProcessKv(ctx, compactor.kv_nodes), env,
                MetaRangeStore(compactor.root, compactor.rule), compactor.tier)
    totals = _Totals()
    turn = 0
    again: str | None = None  # a repository whose last pass ran out of budget

    async def sweep(repo: str) -> gc.Swept | BaseException:
        try:
            swept = await gc.sweep(tier, repo, config.grace, max_tokens=config.max_tokens,
                                   max_files=config.max_files)
        except (BranchesError, KvError, CallError, OSError) as err:
            totals.failed += 1
            _logger.warning("garbage pass failed", repo=repo,
                            error=f"{type(err).__name__}: {err}"[:200])
            return err
        totals.passes += 1
        totals.tokens += len(swept.tokens)
        totals.files += len(swept.files)
        totals.scratch += len(swept.scratch)
        totals.last = {"repo": repo, "tokens": len(swept.tokens), "files": len(swept.files),
                       "scratch": len(swept.scratch), "more": swept.more}
        if swept.tokens or swept.files or swept.scratch:
            _logger.info("garbage collected", **totals.last)
        return swept

    ctx.send_after(config.interval, ctx.self(), _Pass())
    while True:
        msg = await ctx.receive()
        if isinstance(msg, _Pass):
            ctx.send_after(config.interval, ctx.self(), _Pass())
            repo = again
            if repo is None:
                try:
                    repos = await tier.refs.list_repos()
                except (BranchesError, KvError, CallError) as err:
                    totals.failed += 1
                    _logger.warning("could not list repositories", error=str(err)[:200])
                    continue
                if not repos:
                    continue
                repo = repos[turn % len(repos)]
                turn += 1
            swept = await sweep(repo)
            again = repo if isinstance(swept, gc.Swept) and swept.more else None
        elif isinstance(msg, Call) and isinstance(msg.request, bp.Sweep) \
                and isinstance(msg.request.repo, str):
            result = await sweep(msg.request.repo)
            ctx.reply(msg.from_, bp.Swept(result) if isinstance(result, gc.Swept)
                      else bp.SweepFailed(result))
        elif isinstance(msg, Call) and isinstance(msg.request, Status):
            ctx.reply(msg.from_, {"passes": totals.passes, "tokens": totals.tokens,
                                  "files": totals.files, "scratch": totals.scratch,
                                  "failed": totals.failed, "last": dict(totals.last)})
        elif isinstance(msg, Call):
            ctx.reply(msg.from_, UnknownRequest.of(msg.request))
        else:
            _logger.warning("gc got an unexpected message", message=repr(msg)[:200])


__all__ = ["GC_NAME", "GcConfig", "gc_process"]
