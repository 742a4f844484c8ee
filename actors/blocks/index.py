"""The metastore's block index: the live blocks of every shard and the tombstones of
blocks that compaction replaced.

A block is live from the command that adds it (a level-0 flush) or the plan that
completes the job producing it, until the plan that completes a job compacting it.
Replacing is one step: the sources leave the live set and the output enters it in the
same command, so a reader that takes the live set of a shard at any index sees every
committed row exactly once. The replaced files stay readable: their ids become a
tombstone, and the files are deleted only after the cleanup delay (by the worker of a
later job, see the planner), so queries that listed them just before have time to
finish.

Pure functions over an immutable state; a change copies the one shard it touches.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from sediment.actors.blocks.jobs import Tombstone
from sediment.actors.blocks.meta import BlockMeta


@dataclass(frozen=True, slots=True)
class IndexState:
    """shard -> block id -> metadata of its live blocks; job name -> tombstone; shard ->
    the highest revision flushed into a level-0 block (flushes of a shard come in
    revision order, so a retried or replayed flush of history already in the index is
    recognised even after its block was compacted away)."""

    shards: Mapping[int, Mapping[str, BlockMeta]] = field(default_factory=dict)
    tombstones: Mapping[str, Tombstone] = field(default_factory=dict)
    flushed: Mapping[int, int] = field(default_factory=dict)

    def get(self, shard: int, block_id: str) -> BlockMeta | None:
        return self.shards.get(shard, {}).get(block_id)

    def block_count(self) -> int:
        return sum(len(blocks) for blocks in self.shards.values())


def add_blocks(state: IndexState, blocks: Iterable[BlockMeta]) -> IndexState:
    """Level-0 `blocks` made live and the flush watermarks raised (the caller checked
    their ids are free and their revisions above the watermark)."""
    shards = dict(state.shards)
    flushed = dict(state.flushed)
    for block in blocks:
        live = dict(shards.get(block.shard, {}))
        live[block.id] = block
        shards[block.shard] = live
        flushed[block.shard] = max(flushed.get(block.shard, 0), block.max_revision)
    return IndexState(shards, state.tombstones, flushed)


def replace_blocks(state: IndexState, shard: int, sources: Sequence[str],
                   output: BlockMeta) -> IndexState:
    """`output` live in place of `sources` of `shard`, in one step."""
    gone = set(sources)
    live = {bid: meta for bid, meta in state.shards.get(shard, {}).items() if bid not in gone}
    live[output.id] = output
    shards = dict(state.shards)
    shards[shard] = live
    return IndexState(shards, state.tombstones, state.flushed)


def add_tombstone(state: IndexState, tombstone: Tombstone) -> IndexState:
    tombstones = dict(state.tombstones)
    tombstones[tombstone.name] = tombstone
    return IndexState(state.shards, tombstones, state.flushed)


def delete_tombstones(state: IndexState, names: Iterable[str]) -> IndexState:
    """Tombstones handed to a job for cleanup leave the index (Pyroscope)."""
    tombstones = dict(state.tombstones)
    for name in names:
        tombstones.pop(name, None)
    return IndexState(state.shards, tombstones, state.flushed)


def live_blocks(state: IndexState, shard: int | None = None, min_revision: int = 0,
                max_revision: int | None = None, key: bytes | None = None) -> tuple[BlockMeta, ...]:
    """Live blocks of one shard (None: all) that may hold rows in [min_revision,
    max_revision] (and of `key`, when given), by (shard, min_revision, id). Empty blocks
    are included only when no range or key is asked for."""
    shards = [shard] if shard is not None else sorted(state.shards)
    unbounded = min_revision <= 0 and max_revision is None and key is None
    out = []
    for s in shards:
        for block in state.shards.get(s, {}).values():
            wanted = block.overlaps_revisions(min_revision, max_revision) and (
                key is None or block.may_hold_key(key)
            )
            if unbounded or wanted:
                out.append(block)
    out.sort(key=lambda b: (b.shard, b.min_revision, b.id))
    return tuple(out)


__all__ = [
    "IndexState",
    "add_blocks",
    "add_tombstone",
    "delete_tombstones",
    "live_blocks",
    "replace_blocks",
]
