"""Checkers of a recorded run (`scenarios/history.py`), one module each.

Every checker returns a `CheckResult` (ok / violation / unknown, with minimal evidence).
`run` applies the checks a scenario names (`schema.CHECKS`) to one history.
"""

from __future__ import annotations

from collections.abc import Sequence

from sediment.actors.kv.types import Event, RangeResult
from sediment.scenarios.checkers import (
    compaction_safety,
    linearizability,
    lost_writes,
    revisions,
    watch_guarantees,
)
from sediment.scenarios.checkers.result import CheckResult
from sediment.scenarios.checkers.wgl import DEFAULT_BUDGET
from sediment.scenarios.history import History

NAMES: tuple[str, ...] = (
    linearizability.NAME,
    watch_guarantees.NAME,
    lost_writes.NAME,
    compaction_safety.NAME,
    revisions.NAME,
)


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
) -> list[CheckResult]:
    """Run the named checks in order. `start`: the store when the run began; `final`:
    the state read after recovery (default: the history's last full read); `truth`,
    `head`: the committed history for the watch checks (default: rebuilt);
    `local_watches`: watches are served from one node's state (see revisions.check)."""
    unknown_names = [n for n in names if n not in NAMES]
    if unknown_names:
        raise ValueError(f"unknown checks {unknown_names}; known: {list(NAMES)}")
    out = []
    for name in names:
        if name == linearizability.NAME:
            out.append(linearizability.check(history, start=start, budget=budget))
        elif name == watch_guarantees.NAME:
            out.append(watch_guarantees.check(history, truth, head))
        elif name == lost_writes.NAME:
            out.append(lost_writes.check(history, final))
        elif name == compaction_safety.NAME:
            out.append(compaction_safety.check(history))
        else:
            out.append(revisions.check(history, local_watches))
    return out


__all__ = ["NAMES", "CheckResult", "run"]
