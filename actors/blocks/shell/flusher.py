"""The flusher process: a thin shell over `flusher_core` beside the KV leader.

The node's flush follower (`flush_node.py`) starts it, linked and registered as
`flusher_name(node)`, while the local KV member leads, and kills it when leadership
goes. It runs the core's effects one at a time, each bounded by a timeout, and feeds
their outcomes back as events:

- `ReadCursor` / `ProposeFlush`: a proposal to the metastore group (`ReadFlushCursor`,
  `AddBlocks(blocks, through)`), sent to the leader the members name, following
  "not leader" hints, at most `locate_attempts` rounds with a capped backoff;
- `ReadHistory`: the config's `history` port (`history_source.py`; the wiring layer
  fills it with the local KV member's committed history, `sediment/wiring/kv_history.py`);
- `WriteBlocks`: one level-0 block file per shard (`block.write_level0`: temporary file,
  fsync, rename), off the event loop where the runtime has threads.

Time is the runtime's clock, read here and handed to the core. A tick every
`tick_interval` drives the flush thresholds. Calls: Status() -> the core's view.
Failpoint `blocks.flusher.before_propose`: the blocks are written, the AddBlocks not
yet proposed (a crash there leaves files no index entry names; the next flusher
rewrites the same ids, keeping the files on disk and proposing their metadata, or
others, and only what commits counts: the leader's cleanup deletes the files left
behind once the flush watermark passes them, `orphans.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from sediment import log
from sediment.actors.blocks import block as blk
from sediment.actors.blocks import flusher_core as fc
from sediment.actors.blocks.errors import BlockError, MetastoreError
from sediment.actors.blocks.meta import BlockMeta
from sediment.actors.blocks.metastore import AddBlocks, FlushCursor, ReadFlushCursor
from sediment.actors.blocks.service import AddBlocksResult
from sediment.actors.blocks.shell.history_source import HistoryBatch, HistorySource
from sediment.actors.blocks.shell.names import METASTORE_GROUP
from sediment.actors.log.shell.names import raft_name
from sediment.actors.log.shell.protocol import Done, NotLeader, Propose
from sediment.actors.mvcc_errors import KvError
from sediment.runtime.common_calls import Status, UnknownRequest
from sediment.runtime.core_driver import CoreDriver
from sediment.runtime.errors import CallError, NoProc
from sediment.runtime.messages import Call
from sediment.runtime.offload import run_blocking
from sediment.runtime.process import Process

_logger = log.get_logger("sediment.blocks.flusher")

BEFORE_PROPOSE = "blocks.flusher.before_propose"


@dataclass(frozen=True)
class FlusherConfig:
    """`nodes`: the metastore group's members (where the leader is looked for);
    `root`: the block store directory; `history`: where committed rows are read."""

    nodes: tuple[str, ...]
    root: str
    flush: fc.FlushConfig
    history: HistorySource
    tick_interval: float = 0.5
    call_timeout: float = 10.0  # each call to a raft member
    locate_attempts: int = 6  # rounds of looking for the metastore leader per proposal
    locate_backoff: tuple[float, float] = (0.05, 1.0)  # first and largest pause

    def __post_init__(self) -> None:
        if not self.nodes or not all(isinstance(n, str) and n for n in self.nodes):
            raise ValueError(f"nodes must be node names, got {self.nodes!r}")
        if not isinstance(self.root, str) or not self.root:
            raise ValueError(f"root must be a directory path, got {self.root!r}")
        if not isinstance(self.flush, fc.FlushConfig):
            raise ValueError(f"flush must be a FlushConfig, got {self.flush!r}")
        if not isinstance(self.history, HistorySource):
            raise ValueError(f"history must be a HistorySource, got {self.history!r}")
        times = (self.tick_interval, self.call_timeout, *self.locate_backoff)
        if not all(isinstance(t, int | float) and math.isfinite(t) and t > 0 for t in times):
            raise ValueError(f"intervals and timeouts must be positive seconds: {self}")
        if isinstance(self.locate_attempts, bool) or self.locate_attempts < 1:
            raise ValueError(f"locate_attempts must be a positive int: {self}")


@dataclass(frozen=True)
class _Tick:
    pass


@dataclass
class _Flusher:
    ctx: Process
    config: FlusherConfig
    hint: str | None = None  # the metastore leader that answered last
    counts: dict[str, int] = field(default_factory=dict)
    last_problem: str | None = None


async def flusher(ctx: Process, config: FlusherConfig, term: int) -> None:
    """Process entry: flush for the KV leader of `term` until killed."""
    fl = _Flusher(ctx, config)
    driver: CoreDriver[fc.FlusherState, fc.Event, fc.Effect] = CoreDriver(
        ctx, fc.step, fc.initial(config.flush))
    driver.on(fc.ReadCursor, lambda effect: _read_cursor(fl, effect))
    driver.on(fc.ReadHistory, lambda effect: _read(fl, effect))
    driver.on(fc.WriteBlocks, lambda effect: _write_blocks(fl, effect))
    driver.on(fc.ProposeFlush, lambda effect: _propose_flush(fl, effect))
    driver.on(fc.Flushed, lambda effect: _flushed(fl, effect))
    driver.on(fc.Problem, lambda effect: _problem(fl, effect))

    async def to_events(msg: Any) -> list[fc.Event]:
        if isinstance(msg, _Tick):
            driver.arm_after(config.tick_interval, _Tick())
            return [fc.Tick(ctx.now())]
        if isinstance(msg, Call):
            _on_call(fl, driver.state, msg)
        else:
            _logger.warning("flusher got an unexpected message", message=repr(msg)[:200])
        return []

    driver.arm_after(config.tick_interval, _Tick())
    _logger.info("flusher up", term=term)
    driver.post(fc.Start(ctx.now(), term))
    await driver.serve(to_events)


async def _read_cursor(fl: _Flusher, effect: fc.ReadCursor) -> fc.Event:
    ok, answer = await _propose(fl, ReadFlushCursor())
    if ok and isinstance(answer, FlushCursor):
        return fc.CursorRead(effect.epoch, answer.through, answer.flushed, fl.ctx.now())
    return fc.Failed(effect.epoch, "cursor", _reason(answer), fl.ctx.now())


async def _write_blocks(fl: _Flusher, effect: fc.WriteBlocks) -> fc.Event:
    try:
        blocks = await run_blocking(_write, fl.config.root, effect.batches, effect.created_at)
    except (BlockError, OSError) as err:
        return fc.Failed(effect.epoch, "write", _reason(err), fl.ctx.now())
    return fc.BlocksWritten(effect.epoch, blocks, fl.ctx.now())


async def _propose_flush(fl: _Flusher, effect: fc.ProposeFlush) -> fc.Event:
    await fl.ctx.failpoint(BEFORE_PROPOSE)
    ok, answer = await _propose(fl, AddBlocks(effect.blocks, effect.through))
    if ok and isinstance(answer, AddBlocksResult):
        return fc.FlushDone(effect.epoch, answer.through, fl.ctx.now())
    return fc.Failed(effect.epoch, "flush", _reason(answer), fl.ctx.now())


def _flushed(fl: _Flusher, effect: fc.Flushed) -> None:
    _count(fl, "flushes")
    fl.counts["rows"] = fl.counts.get("rows", 0) + effect.rows
    _logger.info("level-0 flush committed", blocks=effect.blocks, rows=effect.rows,
                 through=effect.through)


def _problem(fl: _Flusher, effect: fc.Problem) -> None:
    _count(fl, f"failed_{effect.what}")
    fl.last_problem = f"{effect.what}: {effect.reason}"
    _logger.warning("flusher operation failed", what=effect.what, reason=effect.reason)


async def _read(fl: _Flusher, effect: fc.ReadHistory) -> fc.Event:
    ctx = fl.ctx
    try:
        reply = await fl.config.history.read(ctx, effect.lo, effect.max_rows,
                                             fl.config.call_timeout)
    except CallError as err:
        return fc.Failed(effect.epoch, "read", _reason(err), ctx.now())
    if isinstance(reply, HistoryBatch):
        return fc.HistoryRead(effect.epoch, reply.rows, reply.through, reply.more, ctx.now())
    return fc.Failed(effect.epoch, "read", _reason(reply), ctx.now())


def _write(root: str, batches: tuple[tuple[int, tuple[fc.Row, ...]], ...],
           created_at: float) -> tuple[BlockMeta, ...]:
    """One level-0 block per shard. A retried write of the same rows keeps the file on
    disk and gives its metadata (first created_at, its checksum): that is what the
    AddBlocks then proposes, so the index describes the file that is there."""
    return tuple(blk.write_level0(root, shard, [blk.Row(*row) for row in rows], created_at)
                 for shard, rows in batches)


async def _propose(fl: _Flusher, command: Any) -> tuple[bool, Any]:
    """(True, the machine's result) when the command committed and was not refused, else
    (False, the refusal or why no answer came: then it may still commit)."""
    ctx, config = fl.ctx, fl.config
    pause, largest = config.locate_backoff
    last: Any = "no metastore leader found"
    for attempt in range(config.locate_attempts):
        node = fl.hint if fl.hint in config.nodes else await _leader(fl)
        fl.hint = None
        if node is not None:
            try:
                reply = await ctx.call(raft_name(METASTORE_GROUP, node), Propose(command),
                                       timeout=config.call_timeout)
            except NoProc as err:
                last = err  # the member is not running: nothing was appended
            except CallError as err:
                return False, err  # it may have been appended: never proposed twice here
            else:
                if isinstance(reply, Done):
                    fl.hint = node
                    return not isinstance(reply.result, MetastoreError), reply.result
                if isinstance(reply, NotLeader):
                    fl.hint = reply.hint
                last = reply
                if fl.hint is not None:
                    continue
        if attempt + 1 < config.locate_attempts:
            await ctx.sleep(pause)
            pause = min(pause * 2, largest)
    return False, last


async def _leader(fl: _Flusher) -> str | None:
    """The metastore leader as the first member that answers names it (local first)."""
    ctx = fl.ctx
    me = ctx.self().node
    for node in sorted(fl.config.nodes, key=lambda n: n != me):
        try:
            status = await ctx.call(raft_name(METASTORE_GROUP, node), Status(),
                                    timeout=fl.config.call_timeout)
        except CallError:
            continue
        leader = status.get("leader") if isinstance(status, dict) else None
        if leader in fl.config.nodes:
            return str(leader)
    return None


def _on_call(fl: _Flusher, s: fc.FlusherState, call: Call) -> None:
    if isinstance(call.request, Status):
        fl.ctx.reply(call.from_, {
            "node": fl.ctx.self().node, "term": s.term, "phase": s.phase, "cursor": s.cursor,
            "read_through": s.read_through, "flushed": dict(s.flushed),
            "pending": {shard: len(p.rows) for shard, p in sorted(s.pending.items())},
            "counts": dict(fl.counts), "last_problem": fl.last_problem})
    else:
        fl.ctx.reply(call.from_, UnknownRequest.of(call.request))


def _count(fl: _Flusher, name: str) -> None:
    fl.counts[name] = fl.counts.get(name, 0) + 1


def _reason(value: Any) -> str:
    if isinstance(value, KvError | MetastoreError | BlockError | CallError | OSError):
        return f"{type(value).__name__}: {value}"[:200]
    return repr(value)[:200]


__all__ = ["BEFORE_PROPOSE", "FlusherConfig", "flusher"]
