"""Every committed row is in exactly one live block, or still hot, or legitimately merged
away (the block tier's promise, seed 003 with the flusher's cursor).

From the committed raft log (`truth`) and what the runner read of the tier after
recovery (`TierState`), a violation is any of:
- duplicate: one (revision, key) in two live blocks (or twice in one): a flush or a
  merge result accepted twice, or a stale attempt's output beside its replacement;
- stray: a block row the log never committed, or with another value (a delete is a
  row without value);
- lost: a committed row in no live block although (a) it is at or below the flush
  cursor ("every committed revision at or below it is in the index"), or (b) the hot
  store no longer holds it above its compaction revision. Not lost: a row a merge
  dropped legitimately, i.e. at or below the blocks' compaction floor with a later row
  of its key also at or below it (`merge.compact_table` keeps each key's latest);
- unreadable: a live block whose file is missing or corrupt (its rows are lost too);
- hold broken: a KV member's compaction above the flush cursor, at the end or in a
  sample taken during the run (the compact revision read first, the committed cursor
  after it, so a sample above is a definite violation);
- hot store wrong: the hot store's rows above its compaction revision differ from the
  log's.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from sediment.actors.kv.types import Event
from sediment.scenarios.checkers.result import CheckResult, passed, unknown, violated
from sediment.scenarios.checkers.tier_state import TierState, show, truth_rows

NAME = "blocks_exactly_once"
MAX_DETAILS = 10


def _superseded(truth: dict[tuple[int, bytes], bytes | None], floor: int) -> set[tuple[int,
                                                                                      bytes]]:
    """Rows a merge at compaction revision `floor` may drop: at or below it, with a later
    row of the same key also at or below it."""
    latest: dict[bytes, int] = {}
    for rev, key in sorted(truth):
        if rev <= floor:
            latest[key] = rev
    return {(rev, key) for rev, key in truth if rev <= floor and latest[key] != rev}


def _duplicates_and_strays(tier: TierState,
                           truth: dict[tuple[int, bytes], bytes | None]) -> list[str]:
    out = []
    where: dict[tuple[int, bytes], list[str]] = defaultdict(list)
    for r in tier.rows:
        where[(r.revision, r.key)].append(r.block)
        if (r.revision, r.key) not in truth:
            out.append(f"stray: block {r.block} holds {show(r.key)}@{r.revision}, which the "
                       "log never committed")
        elif truth[(r.revision, r.key)] != r.value:
            out.append(f"stray: block {r.block} holds {show(r.key)}@{r.revision} = "
                       f"{r.value!r:.40}, the log committed {truth[(r.revision, r.key)]!r:.40}")
    for (rev, key), blocks in sorted(where.items()):
        if len(blocks) > 1:
            out.append(f"duplicate: {show(key)}@{rev} is in {len(blocks)} live blocks: "
                       f"{', '.join(sorted(blocks))}")
    return out


def _lost(tier: TierState, truth: dict[tuple[int, bytes], bytes | None]) -> list[str]:
    held = {(r.revision, r.key) for r in tier.rows}
    hot = {(rev, key) for rev, key, _ in tier.hot}
    dropped = _superseded(truth, tier.floor)
    out = []
    for rev, key in sorted(truth):
        if (rev, key) in held or (rev, key) in dropped:
            continue
        if rev <= tier.cursor:
            out.append(f"lost: {show(key)}@{rev} is in no live block, though the flush "
                       f"cursor says every revision through {tier.cursor} is")
        elif rev <= tier.hot_from or (rev, key) not in hot:
            out.append(f"lost: {show(key)}@{rev} is in no live block and not in the hot "
                       f"store (compacted through {tier.hot_from})")
    return out


def _hold(tier: TierState) -> list[str]:
    out = [f"hold: KV member {node} compacted through {k}, above the flush cursor "
           f"{tier.cursor}" for node, k in sorted(tier.kv_compacts.items()) if k > tier.cursor]
    out += [f"hold: at {s.t:.3f} s a KV member had compacted through {s.kv_compact}, above "
            f"the committed flush cursor {s.cursor} read after it"
            for s in tier.samples if s.kv_compact > s.cursor]
    return out


def _hot_store(tier: TierState, truth: dict[tuple[int, bytes], bytes | None]) -> list[str]:
    want = {(rev, key): v for (rev, key), v in truth.items()
            if tier.hot_from < rev <= tier.head}
    got = {(rev, key): v for rev, key, v in tier.hot}
    out = []
    for rk in sorted(want.keys() | got.keys()):
        if rk not in got:
            out.append(f"hot store: {show(rk[1])}@{rk[0]} is missing above its compaction "
                       f"({tier.hot_from})")
        elif rk not in want:
            out.append(f"hot store: {show(rk[1])}@{rk[0]} was never committed")
        elif got[rk] != want[rk]:
            out.append(f"hot store: {show(rk[1])}@{rk[0]} = {got[rk]!r:.40}, the log "
                       f"committed {want[rk]!r:.40}")
    return out


def check(truth: Sequence[Event], tier: TierState | None) -> CheckResult:
    if tier is None:
        return unknown(NAME, "the run collected no block tier state")
    if not tier.complete:
        return unknown(NAME, "the live block index could not be read after recovery",
                       *tier.notes)
    rows = truth_rows(truth)
    # a broken hold first: it is the cause of the rows it lost
    found = [*_hold(tier), *(f"unreadable: live block {u}" for u in tier.unreadable),
             *_duplicates_and_strays(tier, rows), *_lost(tier, rows), *_hot_store(tier, rows)]
    summary = (f"{len(rows)} committed rows, {len(tier.rows)} rows in {tier.blocks} live "
               f"blocks (levels {dict(sorted(tier.levels.items()))}), cursor {tier.cursor}, "
               f"blocks floor {tier.floor}, KV compacted through {tier.hot_from}, "
               f"{len(tier.samples)} hold samples, jobs {dict(sorted(tier.outcomes.items()))}")
    if not found:
        return passed(NAME, summary, *tier.notes)
    details = [*found[1:MAX_DETAILS], summary]
    if len(found) > MAX_DETAILS:
        details.insert(-1, f"... {len(found) - MAX_DETAILS} more")
    return violated(NAME, found[0], details=details)


__all__ = ["NAME", "check"]
