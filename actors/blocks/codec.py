"""The metastore's snapshot: the whole replicated state as deterministic JSON bytes.

Self-contained (no live log entries needed): block metadata, tombstones, flush
watermarks and the flushed-through cursor, queues, jobs with their plans, the
compaction revision and the last plan index. Every collection is written in a sorted
order, so replicas that applied the same entries produce byte-identical snapshots,
which is also how tests compare replicas.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sediment.actors.blocks import index as ix
from sediment.actors.blocks import planner as pl
from sediment.actors.blocks import scheduler as sc
from sediment.actors.blocks.jobs import JobPlan, JobState, JobStatus, Tombstone
from sediment.actors.blocks.meta import meta_from_json, meta_to_json
from sediment.actors.blocks.service import MetastoreState

MAGIC = b"sediment-metastore/1\n"


class RestoreError(ValueError):
    """Bytes that are not a metastore snapshot this version can read."""


def _tomb(t: Tombstone) -> list[Any]:
    return [t.name, t.shard, list(t.blocks), t.added_at, t.index]


def _tomb_from(doc: Any) -> Tombstone:
    name, shard, blocks, added_at, index = doc
    return Tombstone(str(name), int(shard), tuple(str(b) for b in blocks), float(added_at),
                     int(index))


def _job(state: JobState, plan: JobPlan) -> dict[str, Any]:
    return {
        "name": state.name,
        "level": state.level,
        "status": int(state.status),
        "added_at": state.added_at,
        "token": state.token,
        "lease_expires_at": state.lease_expires_at,
        "failures": state.failures,
        "shard": plan.shard,
        "plan_level": plan.level,
        "sources": list(plan.source_blocks),
        "tombstones": [_tomb(t) for t in plan.tombstones],
    }


def _job_from(doc: Mapping[str, Any]) -> tuple[JobState, JobPlan]:
    state = JobState(str(doc["name"]), int(doc["level"]), JobStatus(doc["status"]),
                     float(doc["added_at"]), int(doc["token"]),
                     float(doc["lease_expires_at"]), int(doc["failures"]))
    plan = JobPlan(state.name, int(doc["shard"]), int(doc["plan_level"]),
                   tuple(str(s) for s in doc["sources"]),
                   tuple(_tomb_from(t) for t in doc["tombstones"]))
    return state, plan


def encode(state: MetastoreState, applied: int) -> bytes:
    """The snapshot of `state` at index `applied`."""
    blocks = [b for shard in state.index.shards.values() for b in shard.values()]
    blocks.sort(key=lambda b: (b.shard, b.id))
    queues = [
        [shard, level, [[b.id, b.index, b.appended_at, b.size_bytes] for b in queue]]
        for (shard, level), queue in sorted(state.planner.queues.items())
    ]
    jobs = state.scheduler.jobs
    doc = {
        "applied": applied,
        "compaction_revision": state.compaction_revision,
        "last_plan_index": state.last_plan_index,
        "blocks": [meta_to_json(b) for b in blocks],
        "live_shards": sorted(state.index.shards),
        "tombstones": [_tomb(state.index.tombstones[n]) for n in sorted(state.index.tombstones)],
        "flushed": sorted([s, r] for s, r in state.index.flushed.items()),
        "flushed_through": state.flushed_through,
        "queues": queues,
        "jobs": [_job(jobs[n], state.scheduler.plans[n]) for n in sorted(jobs)],
    }
    return MAGIC + json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


def decode(data: bytes) -> tuple[MetastoreState, int]:
    """(state, applied) from a snapshot; RestoreError if it is not one."""
    if not isinstance(data, bytes) or not data.startswith(MAGIC):
        raise RestoreError("not a metastore snapshot")
    try:
        doc = json.loads(data[len(MAGIC):])
        shards: dict[int, dict[str, Any]] = {int(s): {} for s in doc["live_shards"]}
        for raw in doc["blocks"]:
            meta = meta_from_json(raw)
            shards.setdefault(meta.shard, {})[meta.id] = meta
        tombstones = {t.name: t for t in (_tomb_from(r) for r in doc["tombstones"])}
        flushed = {int(s): int(r) for s, r in doc["flushed"]}
        queues = {
            (int(shard), int(level)): tuple(
                pl.QueuedBlock(str(i), int(n), float(t), int(z)) for i, n, t, z in blocks
            )
            for shard, level, blocks in doc["queues"]
        }
        pairs = [_job_from(j) for j in doc["jobs"]]
        state = MetastoreState(
            index=ix.IndexState(shards, tombstones, flushed),
            planner=pl.PlannerState(queues),
            scheduler=sc.SchedulerState({s.name: s for s, _ in pairs},
                                        {p.name: p for _, p in pairs}),
            compaction_revision=int(doc["compaction_revision"]),
            last_plan_index=int(doc["last_plan_index"]),
            # snapshots written before the flusher existed have no cursor: 0
            flushed_through=int(doc.get("flushed_through", 0)),
        )
        return state, int(doc["applied"])
    except (KeyError, TypeError, ValueError) as err:
        raise RestoreError(f"malformed metastore snapshot: {err!r}") from err


__all__ = ["MAGIC", "RestoreError", "decode", "encode"]
