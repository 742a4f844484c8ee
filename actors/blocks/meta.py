"""Block metadata, deterministic block and job names, and the level-0 flush policy.

Kept free of pyarrow so the planner, scheduler and metastore (pure cores) import only
this. A block is immutable: its metadata is fixed when it is written and is what the
index stores; the Parquet file embeds the same fields (all but its own size) so a reader
can check that a file is the block it was asked for.

Names are functions of their inputs, never of a clock or a random source, so every
replica and every retry computes the same ones:
- a level-0 block: shard + the revision range it holds (a retried flush of the same
  range gets the same id, and the index treats the re-add as a no-op);
- a job: a digest of its source block ids + shard + level (Pyroscope's `nameJob`);
- a job's output block: the job digest + the fencing token of the attempt, so a stale
  worker whose lease was taken over writes a different file from the current owner and
  can never overwrite the block the index points at.
`parse_block_id` and `parse_file_name` read these names back, so the block store's
garbage collection (`orphans.py`) can tell from a file's name alone which command could
still make it live.
"""

from __future__ import annotations

import hashlib
import math
import re
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
_CHECKSUM = re.compile(r"^([0-9a-f]{32})?$")


@dataclass(frozen=True, slots=True)
class BlockMeta:
    """One immutable block of committed history of one shard.

    `min_revision..max_revision` and `min_key..max_key` bound its rows (an empty block,
    possible only as a merge output whose rows were all compacted away, has 0/0 and
    b""/b""). `compaction_revision` is the history compaction applied when it was
    written: reads below it may miss rows. `created_at` is an input (the raft entry or
    the worker's report), never read from a clock here. `size_bytes` and `checksum`
    (blake2b-128 of the whole file, hex) are known once the file is written; a reader
    checks both, since Parquet's page checksums leave the footer uncovered."""

    id: str
    shard: int
    level: int
    min_revision: int
    max_revision: int
    min_key: bytes
    max_key: bytes
    row_count: int
    size_bytes: int
    created_at: float
    compaction_revision: int = 0
    checksum: str = ""

    def overlaps_revisions(self, low: int, high: int | None) -> bool:
        """Whether the block may hold a row with low <= revision <= high (None: no top)."""
        if self.row_count == 0:
            return False
        return self.max_revision >= low and (high is None or self.min_revision <= high)

    def may_hold_key(self, key: bytes) -> bool:
        return self.row_count > 0 and self.min_key <= key <= self.max_key


def check_meta(meta: object) -> str | None:
    """Why `meta` is not valid block metadata, or None (fields are checked at run time:
    metadata arrives in commands from other processes)."""
    if not isinstance(meta, BlockMeta):
        return f"not a BlockMeta: {type(meta).__name__}"
    if not isinstance(meta.id, str) or not _ID.match(meta.id):
        return f"bad block id {meta.id!r}"
    if not isinstance(meta.checksum, str) or not _CHECKSUM.match(meta.checksum):
        return f"bad checksum {meta.checksum!r}"
    ints = ("shard", "level", "min_revision", "max_revision", "row_count", "size_bytes",
            "compaction_revision")
    for name in ints:
        value = getattr(meta, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            return f"{name} must be a non-negative int, got {value!r}"
    keys: tuple[object, object] = (meta.min_key, meta.max_key)
    if not all(isinstance(k, bytes) for k in keys):
        return "min_key and max_key must be bytes"
    created: object = meta.created_at
    if not isinstance(created, int | float) or not math.isfinite(created):
        return f"created_at must be a finite number, got {meta.created_at!r}"
    if meta.row_count == 0:
        if (meta.min_revision, meta.max_revision, meta.min_key, meta.max_key) != (0, 0, b"", b""):
            return "an empty block has revisions 0/0 and keys b''/b''"
        return None
    if not 1 <= meta.min_revision <= meta.max_revision:
        return f"revision range {meta.min_revision}..{meta.max_revision} is invalid"
    if not meta.min_key or meta.min_key > meta.max_key:
        return f"key range {meta.min_key!r}..{meta.max_key!r} is invalid"
    return None


def meta_to_json(meta: BlockMeta) -> dict[str, Any]:
    return {
        "id": meta.id,
        "shard": meta.shard,
        "level": meta.level,
        "min_revision": meta.min_revision,
        "max_revision": meta.max_revision,
        "min_key": meta.min_key.hex(),
        "max_key": meta.max_key.hex(),
        "row_count": meta.row_count,
        "size_bytes": meta.size_bytes,
        "created_at": meta.created_at,
        "compaction_revision": meta.compaction_revision,
        "checksum": meta.checksum,
    }


def meta_from_json(doc: Mapping[str, Any]) -> BlockMeta:
    """Inverse of `meta_to_json`; ValueError if a field is missing or malformed."""
    try:
        meta = BlockMeta(
            id=doc["id"],
            shard=doc["shard"],
            level=doc["level"],
            min_revision=doc["min_revision"],
            max_revision=doc["max_revision"],
            min_key=bytes.fromhex(doc["min_key"]),
            max_key=bytes.fromhex(doc["max_key"]),
            row_count=doc["row_count"],
            size_bytes=doc["size_bytes"],
            created_at=doc["created_at"],
            compaction_revision=doc["compaction_revision"],
            checksum=doc["checksum"],
        )
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"malformed block metadata: {err!r}") from err
    problem = check_meta(meta)
    if problem is not None:
        raise ValueError(problem)
    return meta


# ---- names -------------------------------------------------------------------


def level0_block_id(shard: int, min_revision: int, max_revision: int) -> str:
    """The id of the level-0 block of `shard` holding revisions min..max."""
    return f"S{shard}-L0-R{min_revision:020d}-{max_revision:020d}"


def job_digest(source_blocks: Sequence[str]) -> str:
    """16 hex digits naming a set of source blocks in their planned order."""
    h = hashlib.blake2b(digest_size=8)
    for block_id in source_blocks:
        h.update(block_id.encode())
        h.update(b"\0")
    return h.hexdigest()


def job_name(shard: int, level: int, source_blocks: Sequence[str]) -> str:
    """Pyroscope's job name shape: digest, shard, source level. Also the tiebreaker of
    the scheduler's priority order."""
    return f"{job_digest(source_blocks)}-S{shard}-L{level}"


def compacted_block_id(shard: int, level: int, source_blocks: Sequence[str], token: int) -> str:
    """The output block of the job compacting `source_blocks` (at source `level`) under
    fencing token `token`; its level is level + 1."""
    return f"S{shard}-L{level + 1}-{job_digest(source_blocks)}-T{token}"


def block_relpath(shard: int, block_id: str) -> str:
    """Where a block lives under the block store root."""
    return f"shard-{shard}/{block_id}.parquet"


@dataclass(frozen=True, slots=True)
class Level0Name:
    """What a level-0 block id says: its shard and revision range."""

    shard: int
    min_revision: int
    max_revision: int


@dataclass(frozen=True, slots=True)
class OutputName:
    """What a job output's id says: its shard and level, the job digest and the token of
    the attempt that wrote it."""

    shard: int
    level: int
    digest: str
    token: int

    @property
    def job(self) -> str:
        """The name of the job (source level = level - 1) whose attempt this is."""
        return f"{self.digest}-S{self.shard}-L{self.level - 1}"


_LEVEL0_ID = re.compile(r"^S([0-9]+)-L0-R([0-9]{20})-([0-9]{20})$")
_OUTPUT_ID = re.compile(r"^S([0-9]+)-L([0-9]+)-([0-9a-f]{16})-T([0-9]+)$")


def parse_block_id(block_id: str) -> Level0Name | OutputName | None:
    """The level-0 or job-output name `block_id` is, or None (any other id). Only the
    exact spelling `level0_block_id` / `compacted_block_id` give is recognised."""
    if (m := _LEVEL0_ID.match(block_id)) is not None:
        name0 = Level0Name(int(m[1]), int(m[2]), int(m[3]))
        if level0_block_id(name0.shard, name0.min_revision, name0.max_revision) == block_id:
            return name0
        return None
    if (m := _OUTPUT_ID.match(block_id)) is not None:
        out = OutputName(int(m[1]), int(m[2]), m[3], int(m[4]))
        if out.level >= 1 and f"S{out.shard}-L{out.level}-{out.digest}-T{out.token}" == block_id:
            return out
    return None


FileKind = Literal["block", "temp", "scratch"]
BLOCK_SUFFIX: Final = ".parquet"
TEMP_SUFFIX: Final = ".tmp"  # a block writer's temporary file (`block._install`)
SCRATCH_SUFFIX: Final = ".spark"  # a Spark merge's scratch directory (`merge_job`)


def parse_file_name(name: str) -> tuple[str, FileKind] | None:
    """(block id, kind) of an entry of a shard directory, or None if it is not one of
    ours: `<id>.parquet` (a block), `.<id>.<random>.tmp` (a writer's temporary file),
    `.<id>.<random>.spark` (a Spark merge's scratch directory)."""
    if not name.startswith("."):
        if name.endswith(BLOCK_SUFFIX):
            block_id = name[: -len(BLOCK_SUFFIX)]
            return (block_id, "block") if _ID.match(block_id) else None
        return None
    kinds: tuple[tuple[str, FileKind], ...] = ((TEMP_SUFFIX, "temp"), (SCRATCH_SUFFIX, "scratch"))
    for suffix, kind in kinds:
        if name.endswith(suffix):
            block_id, dot, rest = name[1: -len(suffix)].rpartition(".")
            if dot and rest and _ID.match(block_id):
                return block_id, kind
    return None


def shard_for_key(key: bytes, shards: int) -> int:
    """The shard a key's history goes to: a stable hash (crc32), so a key's rows are in
    one shard and a key read consults that shard's blocks only."""
    if shards <= 0:
        raise ValueError("shards must be positive")
    return zlib.crc32(key) % shards


# ---- level-0 flush policy ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class FlushPolicy:
    """When a shard's committed history leaves the hot store as a level-0 block: at
    `max_rows` rows, `max_bytes` bytes, or when its oldest unflushed row is older than
    `max_age` seconds (0 disables a threshold)."""

    max_rows: int = 10_000
    max_bytes: int = 8 * 1024 * 1024
    max_age: float = 30.0

    def __post_init__(self) -> None:
        if min(self.max_rows, self.max_bytes) < 0 or self.max_age < 0:
            raise ValueError(f"flush thresholds must not be negative: {self}")


def flush_due(policy: FlushPolicy, rows: int, size_bytes: int, oldest_at: float | None,
              now: float) -> bool:
    """Whether a shard's pending rows should be flushed now (times are the caller's)."""
    if rows <= 0:
        return False
    if policy.max_rows and rows >= policy.max_rows:
        return True
    if policy.max_bytes and size_bytes >= policy.max_bytes:
        return True
    return bool(policy.max_age) and oldest_at is not None and now - oldest_at >= policy.max_age


__all__ = [
    "BLOCK_SUFFIX",
    "SCRATCH_SUFFIX",
    "TEMP_SUFFIX",
    "BlockMeta",
    "FileKind",
    "FlushPolicy",
    "Level0Name",
    "OutputName",
    "block_relpath",
    "check_meta",
    "compacted_block_id",
    "flush_due",
    "job_digest",
    "job_name",
    "level0_block_id",
    "meta_from_json",
    "meta_to_json",
    "parse_block_id",
    "parse_file_name",
    "shard_for_key",
]
