"""Snapshot install, both sides, for the raft server shell (Ra's install phases).

Leader: each `SendSnapshot` step the core asks for is built from the snapshot on disk:
"init", then "pre" batches of the live entries above what the follower has, then the
chunks. Follower: the live entries become sparse WAL writes (durable before the core
acks them), the chunks are staged in a snapshot writer, and `RestoreMachine` commits
the staged snapshot (its rename is the commit point) and loads the machine from it.

The final chunk carries the raft configuration at the snapshot's index, read from the
snapshot's metadata; the follower records it in the snapshot it commits.

Failpoint `install.leader.before_last_chunk`: the leader is about to send the step that
ends an install (the follower has staged the live entries, and the chunks before it).
"""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass, field, replace
from typing import Protocol

from sediment.actors.log.raft import protocol as rp
from sediment.actors.log.raft import types as rt
from sediment.actors.log.raft.state import RaftConfig, RaftState
from sediment.actors.log.raft.types import Entry
from sediment.actors.log.shell.codec import from_stored, to_stored
from sediment.actors.log.shell.conf_meta import from_meta, to_meta
from sediment.actors.log.shell.hosted import HostedMachine
from sediment.actors.log.shell.log_worker import snapshot_dir
from sediment.actors.log.shell.reads import local_entry
from sediment.actors.log.shell.segment_writer import SnapshotStateChanged, segment_dir
from sediment.actors.log.shell.wal_server import (
    ReadStored,
    RecoverGroup,
    WalRejected,
    WalWriteReq,
    WalWritten,
)
from sediment.actors.log.storage import snapshot
from sediment.actors.log.storage.fsutil import write_file_durable
from sediment.actors.log.storage.records import Entry as Stored
from sediment.actors.log.storage.segment import SegmentReader
from sediment.actors.log.storage.segrefs import SegRefs
from sediment.actors.log.storage.snapshot import SnapshotState
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process

LIVE_FILE = "live_entries"  # inside an installed snapshot's directory
INSTALL_CHUNK = 256 * 1024
INSTALL_LIVE_BATCH = 64
LEADER_BEFORE_LAST_CHUNK = "install.leader.before_last_chunk"


@dataclass
class Staging:
    """A member's installs: the incoming snapshot being staged (follower side) and the
    chunks of the snapshot it sends (leader side)."""

    writer: snapshot.SnapshotWriter | None = None  # the staged snapshot's writer
    index: int = 0  # the incoming snapshot being staged
    entries: dict[int, Entry] = field(default_factory=dict)  # its staged live entries
    live: tuple[int, ...] = ()  # its whole live set
    installed: int = 0  # snapshots installed from a leader
    chunks: dict[int, list[bytes]] = field(default_factory=dict)  # outgoing, by snapshot


class GroupPlace(Protocol):
    """Where a group's member keeps its files (the server's GroupSpec)."""

    @property
    def group(self) -> str: ...

    def group_dir(self, node: str) -> str: ...

    def raft_config(self) -> RaftConfig: ...


class _Shell(Protocol):
    """What an install reads and moves of its raft server (the server's shell): its
    process, files and log processes, the machine and snapshot state it replaces."""

    ctx: Process
    wal: Pid
    segwriter: Pid
    refs: SegRefs
    machine: HostedMachine
    snap_state: SnapshotState
    trim_to: tuple[int, int]
    staging: Staging

    @property
    def spec(self) -> GroupPlace: ...


async def snapshot_message(shell: _Shell, state: RaftState,
                           eff: rp.SendSnapshot) -> rt.InstallSnapshot | rp.SnapshotSendFailed:
    """Build one install step from the snapshot on disk (it must be the one asked for);
    SnapshotSendFailed, the event for the core, when that snapshot is gone."""
    gdir = shell.spec.group_dir(state.me)
    info = snapshot.latest(snapshot_dir(gdir))
    if info is None or info.index != eff.snapshot_index:
        return rp.SnapshotSendFailed(eff.to, eff.snapshot_index)
    init = rt.InstallSnapshot(group=shell.spec.group, term=eff.term, leader=state.me,
                              snapshot_index=eff.snapshot_index,
                              snapshot_term=eff.snapshot_term, phase="init")
    if eff.step == "init":
        msg = init
    elif eff.step == "pre":
        live = [i for i in info.state.live_in(eff.live_from + 1, eff.snapshot_index)]
        batch = live[:INSTALL_LIVE_BATCH]
        entries = tuple([await _entry(shell, state, i) for i in batch])
        msg = replace(init, phase="pre", live_entries=entries,
                      last=len(live) <= INSTALL_LIVE_BATCH)
    else:
        chunks = shell.staging.chunks.get(info.index)
        if chunks is None:
            chunks = list(snapshot.read_chunks(info, INSTALL_CHUNK)) or [b""]
            shell.staging.chunks = {info.index: chunks}
        n = eff.chunk_no
        final = n >= len(chunks) - 1
        conf = None
        if final:
            await shell.ctx.failpoint(LEADER_BEFORE_LAST_CHUNK)
            conf = from_meta(info.meta) or shell.spec.raft_config().bootstrap
        msg = replace(init, phase="last" if final else "next",
                      chunk=chunks[min(n, len(chunks) - 1)], chunk_no=n, last=final,
                      live_indexes=info.state.live_indexes if final else (), membership=conf)
    return msg


async def _entry(shell: _Shell, state: RaftState, index: int) -> Entry:
    """A log entry wherever this member keeps it: memory, a segment, the WAL."""
    entry = local_entry(state, shell.refs, shell.spec.group_dir(state.me), index)
    if entry is not None:
        return entry
    stored = await shell.ctx.call(shell.wal, ReadStored(shell.spec.group, index), timeout=30)
    if stored is None:
        raise RuntimeError(f"live entry {index} of {shell.spec.group} is missing")
    return from_stored(stored)


async def write_sparse(shell: _Shell, eff: rp.WriteSparse) -> None:
    """Stage live entries of an incoming snapshot durably (not in the log yet: they join
    it only when the snapshot is activated)."""
    if shell.staging.index != eff.snapshot_index:
        _abort_install(shell)
        shell.staging.index = eff.snapshot_index
    for entry in eff.entries:  # keyed by index: a restarted install sends them again
        shell.staging.entries[entry.index] = entry
    path = _staging_file(shell)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_file_durable(path, pickle.dumps([to_stored(e) for e in _staged(shell)]))


def _staged(shell: _Shell) -> list[Entry]:
    return [shell.staging.entries[i] for i in sorted(shell.staging.entries)]


def store_chunk(shell: _Shell, eff: rp.StoreSnapshotChunk) -> rp.SnapshotInstalled | None:
    """Stage chunk `chunk_no`. Chunk 0 of a snapshot already being staged starts it
    over: an install restarts from its first chunk (a new leader sending the snapshot
    of the same index after the last one died mid-install, or a lost reply); appended
    to the chunks staged before, it made a corrupt snapshot. The live entries stay
    (keyed by index, they are the same committed entries). The last chunk gives the
    event that tells the core the snapshot is staged."""
    if shell.staging.index != eff.snapshot_index:
        _abort_install(shell)
        shell.staging.index = eff.snapshot_index
    if eff.chunk_no == 0 and shell.staging.writer is not None:
        shell.staging.writer.abort()
        shell.staging.writer = None
    if shell.staging.writer is None:
        if eff.chunk_no != 0:
            raise RuntimeError(f"chunk {eff.chunk_no} of snapshot {eff.snapshot_index} "
                               "came before its chunk 0")
        root = snapshot_dir(shell.spec.group_dir(shell.ctx.self().node))
        shell.staging.writer = snapshot.SnapshotWriter(root, eff.snapshot_index, eff.snapshot_term)
    shell.staging.writer.write(eff.data)
    if eff.last:
        shell.staging.live = eff.live_indexes
        return rp.SnapshotInstalled(eff.snapshot_index, eff.snapshot_term, eff.membership)
    return None


async def restore(shell: _Shell, state: RaftState, eff: rp.RestoreMachine) -> None:
    """Activate the staged snapshot in one step: its live entries are written into the
    snapshot's own directory, so the rename that commits the snapshot commits them too.
    Then they join the log (sparse WAL writes) and the machine loads."""
    writer = shell.staging.writer
    if writer is None or shell.staging.index != eff.snapshot_index:
        raise RuntimeError(f"no staged snapshot {eff.snapshot_index} to restore")
    entries = _staged(shell)
    by_index = {e.index: e for e in entries}
    live = tuple(sorted(set(shell.staging.live) | set(by_index)))
    # Live entries the leader did not send are committed here already: read them before
    # the new snapshot state lets the WAL and the segments drop anything.
    by_index.update(await _own_entries(shell, state, [i for i in live if i not in by_index]))
    write_file_durable(os.path.join(writer.tmp, LIVE_FILE),
                       pickle.dumps([to_stored(e) for e in entries]), sync_dir=False)
    info = writer.commit(live, to_meta(eff.membership), fp=shell.ctx.failpoint_sync)
    staging = _staging_file(shell)
    staged = shell.staging
    staged.writer, staged.entries, staged.index, staged.live = None, {}, 0, ()
    if os.path.exists(staging):
        os.unlink(staging)
    shell.ctx.failpoint_sync("install.after_activate")
    shell.staging.installed += 1
    shell.machine.restore(snapshot.read_data(info), info.index, by_index.get)
    shell.snap_state = info.state
    shell.trim_to = (info.index, info.term)
    for pid in (shell.wal, shell.segwriter):
        shell.ctx.send(pid, SnapshotStateChanged(shell.spec.group, info.state))
    keep = [] if eff.discard_log else [e for e in state.entries if e.index > info.index]
    await _land(shell, [to_stored(e) for e in entries], [to_stored(e) for e in keep],
                _kept_below(info.state.live_indexes, entries))


def _kept_below(live: tuple[int, ...], sent: list[Entry] | list[Stored]) -> int:
    """Where the sparse write of the sent entries cuts this member's log: after its own
    highest live entry below them (committed here, never sent again), so the cut drops
    only what may be stale above it."""
    first = sent[0].index if sent else None
    return max((i for i in live if first is None or i < first), default=0)


async def _own_entries(shell: _Shell, state: RaftState, indexes: list[int]) -> dict[int, Entry]:
    """These entries from this member's own log (segments, then one read of the WAL's
    memtable); a missing one means the snapshot cannot be restored here."""
    gdir = shell.spec.group_dir(state.me)
    found: dict[int, Entry] = {}
    for i in indexes:
        entry = local_entry(state, shell.refs, gdir, i)
        if entry is not None:
            found[i] = entry
    missing = [i for i in indexes if i not in found]
    if missing:
        held = await shell.ctx.call(shell.wal, RecoverGroup(shell.spec.group), timeout=60)
        by_index = {s.index: s for s in held}
        for i in missing:
            if i not in by_index:
                raise RuntimeError(f"live entry {i} of {shell.spec.group} is in no log here")
            found[i] = from_stored(by_index[i])
    return found


async def land_if_missing(shell: _Shell, info: snapshot.SnapshotInfo, memtable: list[Stored],
                          tail: list[Entry]) -> None:
    """At start: an installed snapshot whose live entries never reached the log (a crash
    right after the activation) puts them there now."""
    path = os.path.join(info.path, LIVE_FILE)
    if not os.path.exists(path):
        return
    with open(path, "rb") as fh:
        entries: list[Stored] = pickle.load(fh)
    if not entries:
        return
    last = entries[-1]
    held = any(s.index == last.index and s.term == last.term for s in memtable)
    ref = shell.refs.find(last.index)
    if not held and ref is not None:
        seg = os.path.join(segment_dir(shell.spec.group_dir(shell.ctx.self().node)), ref.file)
        with SegmentReader.open(seg) as reader:
            found = reader.get(last.index)
        held = found is not None and found.term == last.term
    if not held:
        await _land(shell, entries, [to_stored(e) for e in tail],
                    _kept_below(info.state.live_indexes, entries))


async def _land(shell: _Shell, live: list[Stored], keep: list[Stored], prev: int) -> None:
    """Sparse-write the live entries after `prev` (a sparse write ends the log after its
    prev, so this member's own entries up to `prev` stay), then what the member keeps
    above the snapshot again; wait until both are durable."""
    ctx, group = shell.ctx, shell.spec.group
    tag = ("install", ctx.now())
    batches: list[tuple[tuple[Stored, ...], int | None]] = [(tuple(live), prev)] if live else []
    if keep:
        batches.append((tuple(keep), None))
    for stored, after in batches:
        ctx.send(shell.wal, WalWriteReq(group, stored, ctx.self(), prev_index=after, tag=tag))
    for _ in batches:
        done = await ctx.receive(
            lambda m: isinstance(m, WalWritten | WalRejected) and m.tag == tag, timeout=60)
        if isinstance(done, WalRejected):  # restart: land_if_missing lands them again
            raise RuntimeError(f"the WAL refused the install's entries of {group} "
                               f"(a gap at {done.from_index})")


def _staging_file(shell: _Shell) -> str:
    gdir = shell.spec.group_dir(shell.ctx.self().node)
    return os.path.join(gdir, "install-staging", f"{shell.staging.index}.live")


def _abort_install(shell: _Shell) -> None:
    if shell.staging.writer is not None:
        shell.staging.writer.abort()
    staged = shell.staging
    staged.writer, staged.entries, staged.live = None, {}, ()
    staging = _staging_file(shell)
    if os.path.exists(staging):
        os.unlink(staging)
