"""Garbage in the block store: which files no index entry references and no command can
ever make live, decided from the replicated metastore state (pure).

A file is judged by its name alone (`meta.parse_block_id`), against the state at one
raft entry `entry`:
- `live` / `tombstoned`: the index lists the block (tombstoned blocks wait for their
  cleanup delay, `compaction_service`); never garbage.
- a level-0 block whose first revision is at or below its shard's flush watermark and
  that is not live: `orphan`. `AddBlocks` refuses exactly these (it adds a level-0
  block only above the watermark, and only under the name its shard and revisions
  give), and the watermark never goes down, so no command, in flight or later, can add
  it. A shard's rows at or below the KV's flushed-through cursor are at or below that
  shard's watermark, so this covers a crashed or fenced flusher's files once the cursor
  passes them. Above the watermark: `in_flight` (an AddBlocks may still commit it).
- a job output of attempt token T: `orphan` when its job is still scheduled under a
  newer token (the scheduler refuses reports with T < the job's token, and a job's
  token only grows), or when no such job is scheduled and T < `entry` (the job
  completed with another output or was evicted; a job created later is assigned at a
  later entry, so with a token above T). Otherwise `in_flight`: the current attempt.
- anything else (a name not ours, a shard directory that is not the name's shard):
  `unknown`, never deleted.

Why no clock and no race: every condition above is stable, once true at an entry it
stays true at every later one, so the verdict cannot be overtaken by a command still in
the log. The one fact that is not stable, that a block is not (yet) live, is safe only
if the state already includes the command that created the file's attempt; so the
decision that deletes is taken at a raft entry committed after the files were listed
(`FindOrphans` through the log, never a replica's local state, which may lag behind a
new leader's): the attempt that wrote a listed file was assigned, or its flush read,
before the listing, hence before that entry. A replica's local verdicts only pick
candidates.

A block that was live, was replaced and whose tombstone a job then took for cleanup is
also `orphan` here; that tombstone was handed out only after its cleanup delay, so no
reader still counts on the file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from sediment.actors.blocks.index import IndexState
from sediment.actors.blocks.jobs import JobState
from sediment.actors.blocks.meta import FileKind, Level0Name, OutputName, parse_block_id

Verdict = Literal["live", "tombstoned", "in_flight", "orphan", "unknown"]
Candidate = tuple[int, str]  # (shard directory, block id)


@dataclass(frozen=True, slots=True)
class StoreFile:
    """An entry of a shard directory that `meta.parse_file_name` recognises."""

    shard: int
    block_id: str
    kind: FileKind
    name: str

    @property
    def candidate(self) -> Candidate:
        return (self.shard, self.block_id)


def verdicts(index: IndexState, jobs: Mapping[str, JobState], entry: int | None,
             candidates: Sequence[Candidate]) -> tuple[Verdict, ...]:
    """The verdict on each candidate at raft entry `entry` (None: no entry, a local
    pre-selection that may call more things orphans than a committed entry would)."""
    tombstoned = {(t.shard, b) for t in index.tombstones.values() for b in t.blocks}
    return tuple(_verdict(index, jobs, entry, tombstoned, shard, block_id)
                 for shard, block_id in candidates)


def _verdict(index: IndexState, jobs: Mapping[str, JobState], entry: int | None,
             tombstoned: set[Candidate], shard: int, block_id: str) -> Verdict:
    if index.get(shard, block_id) is not None:
        return "live"
    if (shard, block_id) in tombstoned:
        return "tombstoned"
    name = parse_block_id(block_id)
    if name is None or name.shard != shard:
        return "unknown"
    if isinstance(name, Level0Name):
        flushed = index.flushed.get(shard, 0)
        return "orphan" if name.min_revision <= flushed else "in_flight"
    return _output(name, jobs, entry)


def _output(name: OutputName, jobs: Mapping[str, JobState], entry: int | None) -> Verdict:
    job = jobs.get(name.job)
    if job is not None:
        return "orphan" if name.token < job.token else "in_flight"
    if entry is None or name.token < entry:
        return "orphan"
    return "in_flight"


def deletable(kind: FileKind, verdict: Verdict) -> bool:
    """Whether a file of `kind` under a block with `verdict` may go. A block file only
    as an orphan. A temporary file or scratch directory also when its block is already
    live or tombstoned: the write it belonged to either failed or will find the block
    installed (a write never replaces a block file) and keep that."""
    if kind == "block":
        return verdict == "orphan"
    return verdict in ("orphan", "live", "tombstoned")


def next_batch(files: Sequence[StoreFile], after: tuple[int, str] | None,
               limit: int) -> tuple[list[StoreFile], tuple[int, str] | None]:
    """Up to `limit` files (sorted by (shard, name)) after the position `after`, and the
    position to go on from next time (None: start over), so passes bounded by `limit`
    still visit every file in turn."""
    ordered = sorted(files, key=lambda f: (f.shard, f.name))
    rest = [f for f in ordered if after is None or (f.shard, f.name) > after]
    batch = rest[:max(limit, 0)]
    if len(rest) <= len(batch) or not batch:
        return batch, None
    return batch, (batch[-1].shard, batch[-1].name)


__all__ = ["Candidate", "StoreFile", "Verdict", "deletable", "next_batch", "verdicts"]
