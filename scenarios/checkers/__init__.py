"""Checkers of a recorded run (`scenarios/history.py`), one module each.

Every checker returns a `CheckResult` (ok / violation / unknown, with minimal evidence).
`run` applies the checks a scenario names (`schema.CHECKS`, and with a block tier
`schema_blocks.TIER_CHECKS`, which also need the tier's state) to one history.
"""

from __future__ import annotations

from collections.abc import Sequence

from sediment.actors.kv.types import Event, RangeResult
from sediment.scenarios.checkers import (
    blocks_exactly_once,
    compaction_safety,
    history_reads,
    linearizability,
    lost_writes,
    revisions,
    watch_guarantees,
)
from sediment.scenarios.checkers.result import CheckResult
from sediment.scenarios.checkers.tier_state import TierState
from sediment.scenarios.checkers.wgl import DEFAULT_BUDGET
from sediment.scenarios.history import History

NAMES: tuple[str, ...] = (
    linearizability.NAME,
    watch_guarantees.NAME,
    lost_writes.NAME,
    compaction_safety.NAME,
    revisions.NAME,
)
TIER_NAMES: tuple[str, ...] = (blocks_exactly_once.NAME, history_reads.NAME)


def run(
    history: History,
    names: Sequence[str] = NAMES,
    *,
    start: linearizability.Start | None = None,
    final: RangeResult | None = None,
    truth: Sequence[Event] | None = None,
    head: int | None = None,
    budget: int = DEFAULT_BUDGET,
    local_watches: bool = False,
    tier: TierState | None = None,
) -> list[CheckResult]:
    """Run the named checks in order. `start`: the store when the run began; `final`:
    the state read after recovery (default: the history's last full read); `truth`,
    `head`: the committed history for the watch checks (default: rebuilt);
    `local_watches`: watches are served from one node's state (see revisions.check);
    `tier`: the block tier's state after recovery (the tier checks judge it against
    `truth`, which they need)."""
    unknown_names = [n for n in names if n not in (*NAMES, *TIER_NAMES)]
    if unknown_names:
        raise ValueError(f"unknown checks {unknown_names}; known: {[*NAMES, *TIER_NAMES]}")
    out = []
    for name in names:
        if name in TIER_NAMES and truth is None:
            raise ValueError(f"{name} needs the committed history (truth)")
    for name in names:
        if name == linearizability.NAME:
            out.append(linearizability.check(history, start=start, budget=budget))
        elif name == watch_guarantees.NAME:
            out.append(watch_guarantees.check(history, truth, head))
        elif name == lost_writes.NAME:
            out.append(lost_writes.check(history, final))
        elif name == compaction_safety.NAME:
            out.append(compaction_safety.check(history))
        elif name == blocks_exactly_once.NAME:
            assert truth is not None
            out.append(blocks_exactly_once.check(truth, tier))
        elif name == history_reads.NAME:
            assert truth is not None
            out.append(history_reads.check(truth, tier))
        else:
            out.append(revisions.check(history, local_watches))
    return out


__all__ = ["NAMES", "TIER_NAMES", "CheckResult", "TierState", "run"]
