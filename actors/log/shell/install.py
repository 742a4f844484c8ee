"""Snapshot install, both sides, for the raft server shell (Ra's install phases).

Leader: each `SendSnapshot` step the core asks for is built from the snapshot on disk:
"init", then "pre" batches of the live entries above what the follower has, then the
chunks. Follower: the live entries become sparse WAL writes (durable before the core
acks them), the chunks are staged in a snapshot writer, and `RestoreMachine` commits
the staged snapshot (its rename is the commit point) and loads the machine from it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from sediment.actors.log import kv_machine
from sediment.actors.log.raft import protocol as rp
from sediment.actors.log.raft import types as rt
from sediment.actors.log.raft.state import RaftState
from sediment.actors.log.raft.types import Entry
from sediment.actors.log.shell.codec import from_stored, to_stored
from sediment.actors.log.shell.log_worker import snapshot_dir
from sediment.actors.log.shell.segment_writer import SnapshotStateChanged, segment_dir
from sediment.actors.log.shell.wal_server import WalRejected, WalWriteReq, WalWritten
from sediment.actors.log.storage import snapshot
from sediment.actors.log.storage.segment import SegmentReader

if TYPE_CHECKING:
    from sediment.actors.log.shell.server import _Shell

INSTALL_CHUNK = 256 * 1024
INSTALL_LIVE_BATCH = 64


async def snapshot_message(shell: _Shell, state: RaftState,
                           eff: rp.SendSnapshot) -> rt.InstallSnapshot | None:
    """Build one install step from the snapshot on disk (it must be the one asked for);
    None, with SnapshotSendFailed queued for the core, when that snapshot is gone."""
    gdir = shell.spec.group_dir(state.me)
    info = snapshot.latest(snapshot_dir(gdir))
    if info is None or info.index != eff.snapshot_index:
        shell.pending.append(rp.SnapshotSendFailed(eff.to, eff.snapshot_index))
        return None
    base = dict(group=shell.spec.group, term=eff.term, leader=state.me,
                snapshot_index=eff.snapshot_index, snapshot_term=eff.snapshot_term)
    if eff.step == "init":
        msg = rt.InstallSnapshot(phase="init", **base)  # type: ignore[arg-type]
    elif eff.step == "pre":
        live = [i for i in info.state.live_in(eff.live_from + 1, eff.snapshot_index)]
        batch = live[:INSTALL_LIVE_BATCH]
        entries = tuple([await _entry(shell, state, i) for i in batch])
        msg = rt.InstallSnapshot(phase="pre", live_entries=entries,  # type: ignore[arg-type]
                                 last=len(live) <= INSTALL_LIVE_BATCH, **base)
    else:
        chunks = shell.chunks.get(info.index)
        if chunks is None:
            chunks = list(snapshot.read_chunks(info, INSTALL_CHUNK)) or [b""]
            shell.chunks = {info.index: chunks}
        n = eff.chunk_no
        final = n >= len(chunks) - 1
        msg = rt.InstallSnapshot(phase="last" if final else "next",  # type: ignore[arg-type]
                                 chunk=chunks[min(n, len(chunks) - 1)], chunk_no=n,
                                 last=final, **base)
    return msg


async def _entry(shell: _Shell, state: RaftState, index: int) -> Entry:
    """A log entry wherever this member keeps it: memory, a segment, the WAL."""
    pos = index - state.snap_index - 1
    if 0 <= pos < len(state.entries):
        return state.entries[pos]
    ref = shell.refs.find(index)
    if ref is not None:
        path = os.path.join(segment_dir(shell.spec.group_dir(state.me)), ref.file)
        with SegmentReader.open(path) as reader:
            stored = reader.get(index)
        if stored is not None:
            return from_stored(stored)
    stored = await shell.ctx.call(shell.wal, ("read", shell.spec.group, index), timeout=30)
    if stored is None:
        raise RuntimeError(f"live entry {index} of {shell.spec.group} is missing")
    return from_stored(stored)


async def write_sparse(shell: _Shell, eff: rp.WriteSparse) -> None:
    """Live entries of an incoming snapshot: durable (sparse WAL writes) before acking."""
    if not eff.entries:
        return
    ctx = shell.ctx
    if shell.install is None or shell.install[0] != eff.snapshot_index:
        _abort_install(shell)
        shell.install_prev = 0
    ctx.send(shell.wal, WalWriteReq(shell.spec.group,
                                    tuple(to_stored(e) for e in eff.entries), ctx.self(),
                                    prev_index=shell.install_prev))
    last = eff.entries[-1].index
    await ctx.receive(lambda m: (isinstance(m, WalWritten) and m.index >= last)
                      or isinstance(m, WalRejected), timeout=60)
    shell.install_prev = last
    shell.install_live.extend(e.index for e in eff.entries)


def store_chunk(shell: _Shell, eff: rp.StoreSnapshotChunk) -> None:
    if shell.install is None or shell.install[0] != eff.snapshot_index:
        _abort_install(shell, keep_live=True)
        root = snapshot_dir(shell.spec.group_dir(shell.ctx.self().node))
        writer = snapshot.SnapshotWriter(root, eff.snapshot_index, eff.snapshot_term)
        shell.install = (eff.snapshot_index, eff.snapshot_term, writer)
    shell.install[2].write(eff.data)
    if eff.last:
        shell.pending.append(rp.SnapshotInstalled(eff.snapshot_index, eff.snapshot_term))


def restore(shell: _Shell, eff: rp.RestoreMachine) -> None:
    """Activate the staged snapshot: commit it (the commit point), load the machine."""
    if shell.install is None or shell.install[0] != eff.snapshot_index:
        raise RuntimeError(f"no staged snapshot {eff.snapshot_index} to restore")
    writer = shell.install[2]
    info = writer.commit(shell.install_live, fp=shell.ctx.failpoint_sync)
    shell.install, shell.install_live = None, []
    shell.installs += 1
    shell.machine = kv_machine.restore(snapshot.read_data(info))
    shell.snap_state = info.state
    shell.trim_to = (info.index, info.term)
    for pid in (shell.wal, shell.segwriter):
        shell.ctx.send(pid, SnapshotStateChanged(shell.spec.group, info.state))


def _abort_install(shell: _Shell, keep_live: bool = False) -> None:
    if shell.install is not None:
        shell.install[2].abort()
    shell.install = None
    if not keep_live:
        shell.install_live = []
