"""The node's WAL process: one per node, shared by every raft group on it.

Raft servers send `WalWriteReq` messages and go on; the WAL process takes every write
waiting in its mailbox, appends them as one batch with one fsync (group commit: writes
that arrive during an fsync form the next batch), and answers each writer with
`WalWritten(group, index, term)` for its last durable entry. It also keeps, per group, the
entries it holds (Ra's memtable role), so a restarted raft server gets its log back with
a `RecoverGroup(group)` call, and one entry with `ReadStored(group, index)`.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass
from typing import Any

from sediment import log
from sediment.actors.log import kv_machine
from sediment.actors.log.shell.codec import from_stored
from sediment.actors.log.shell.names import segwriter_name
from sediment.actors.log.shell.protocol import Failed, Found
from sediment.actors.log.shell.segment_writer import FlushWal, SnapshotStateChanged, WalFlushed
from sediment.actors.log.storage.records import Entry as Stored
from sediment.actors.log.storage.snapshot import SnapshotState
from sediment.actors.log.storage.wal import GroupLog, Wal, WalWrite, file_number
from sediment.runtime.common_calls import UnknownRequest
from sediment.runtime.errors import ReceiveTimeout
from sediment.runtime.messages import Call
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process

_logger = log.get_logger("sediment.log.wal")
MAX_BATCH = 8192  # Ra's WAL max batch


@dataclass(frozen=True)
class WalWriteReq:
    group: str
    entries: tuple[Stored, ...]
    writer: Pid
    prev_index: int | None = None  # set: a sparse write (snapshot install)
    tag: Any = None  # echoed in the answer: writes the raft core did not ask for


@dataclass(frozen=True)
class WalWritten:
    group: str
    index: int
    term: int
    tag: Any = None


@dataclass(frozen=True)
class WalRead:
    """Answer a key read (`reply_to` is the caller's From) with the value at `index`."""

    group: str
    index: int
    reply_to: Any


@dataclass(frozen=True, slots=True)
class RecoverGroup:
    """A call: every entry the WAL holds for `group` (a list of stored entries)."""

    group: str


@dataclass(frozen=True, slots=True)
class ReadStored:
    """A call: the stored entry of `group` at `index`, or None."""

    group: str
    index: int


@dataclass(frozen=True)
class WalRejected:
    """The write left a gap: resend from `from_index`."""

    group: str
    from_index: int
    tag: Any = None


async def wal_server(ctx: Process, directory: str, max_size: int) -> None:
    """Process entry: recover the WAL directory, then serve batched writes.

    Recovered files are handed to the segment writer at once; a file closed later (it
    passed `max_size`) is handed over when it closes. A file is deleted only when the
    segment writer reports it flushed.
    """
    states: dict[str, SnapshotState] = {}
    wal, recovery = Wal.open(directory, max_size, states, fp=ctx.failpoint_sync)
    memtable: dict[str, GroupLog] = {}
    for group, entries in recovery.groups.items():
        glog = memtable.setdefault(group, GroupLog())
        for entry in entries:
            glog.add(entry)
    if recovery.truncated:
        _logger.warning("wal recovered with a torn tail cut", cut=recovery.truncated)
    node = ctx.self().node
    for name in recovery.files:
        await _hand_over(ctx, node, os.path.join(directory, name))
    while True:
        msg = await ctx.receive()
        if isinstance(msg, Call):
            ctx.reply(msg.from_, _answer(memtable, msg.request))
        elif isinstance(msg, WalWriteReq):
            batch = [msg, *await _drain(ctx)]
            rolled = _write(ctx, wal, memtable, batch)
            if rolled is not None:
                await _hand_over(ctx, node, os.path.join(directory, rolled))
        elif isinstance(msg, WalFlushed):
            wal.delete_files_upto(msg.number, fp=ctx.failpoint_sync)
            for group, last in msg.last_indexes.items():
                _trim(memtable.get(group), last)
        elif isinstance(msg, WalRead):
            stored = _stored(memtable, msg.group, msg.index)
            ctx.reply(msg.reply_to, Found(kv_machine.put_value(from_stored(stored).command))
                      if stored is not None else Failed("not_found"))
        elif isinstance(msg, SnapshotStateChanged):
            states[msg.group] = msg.state
            _trim(memtable.get(msg.group), msg.state.smallest_live_index - 1)


async def _hand_over(ctx: Process, node: str, path: str) -> None:
    writer = await ctx.whereis(segwriter_name(node))
    number = file_number(os.path.basename(path))
    if writer is not None and number is not None:
        ctx.send(writer, FlushWal(path, number))


def _trim(glog: GroupLog | None, upto: int) -> None:
    """Forget entries at or below `upto`: they are in segments (or no longer needed)."""
    if glog is None or not glog.indexes or glog.indexes[0] > upto:
        return
    k = bisect.bisect_right(glog.indexes, upto)
    del glog.entries[:k]
    del glog.indexes[:k]


def _answer(memtable: dict[str, GroupLog], request: Any) -> Any:
    """`RecoverGroup`: every entry held; `ReadStored`: one or None."""
    if isinstance(request, RecoverGroup):
        glog = memtable.get(request.group)
        return list(glog.entries) if glog is not None else []
    if isinstance(request, ReadStored):
        return _stored(memtable, request.group, request.index)
    return UnknownRequest.of(request)


def _stored(memtable: dict[str, GroupLog], group: str, index: int) -> Stored | None:
    glog = memtable.get(group)
    if glog is None:
        return None
    k = bisect.bisect_left(glog.indexes, index)
    found = k < len(glog.indexes) and glog.indexes[k] == index
    return glog.entries[k] if found else None


async def _drain(ctx: Process) -> list[WalWriteReq]:
    """Every write already waiting: they share the batch's one fsync."""
    more: list[WalWriteReq] = []
    while len(more) < MAX_BATCH:
        try:
            more.append(await ctx.receive(WalWriteReq, timeout=0))
        except ReceiveTimeout:
            break
    return more


def _write(ctx: Process, wal: Wal, memtable: dict[str, GroupLog],
           batch: list[WalWriteReq]) -> str | None:
    writes = [WalWrite(req.group, entry, req.prev_index if i == 0 else
                       (req.entries[i - 1].index if req.prev_index is not None else None))
              for req in batch for i, entry in enumerate(req.entries)]
    result = wal.append(writes, fp=ctx.failpoint_sync)
    for req in batch:
        glog = memtable.setdefault(req.group, GroupLog())
        if req.group in result.rejected:
            ctx.send(req.writer, WalRejected(req.group, result.rejected[req.group], req.tag))
            continue
        for i, entry in enumerate(req.entries):
            prev = req.prev_index if i == 0 else (
                req.entries[i - 1].index if req.prev_index is not None else None)
            glog.add(entry, prev)
        if req.entries:
            last = req.entries[-1]
            ctx.send(req.writer, WalWritten(req.group, last.index, last.term, req.tag))
    return result.rolled
