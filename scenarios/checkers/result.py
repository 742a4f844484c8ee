"""What every checker returns: a verdict and, for a violation, the minimal evidence.

`status` is "ok", "violation" or "unknown" (the checker could not decide: a search
budget ran out, the history lacks what the check needs). `ok` is True only for "ok": an
unknown is never a pass. A violation names the operations (or watches, compactions)
involved and says in one line what is wrong, so a failing scenario can be read without
re-running it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, TypeAlias

from sediment.scenarios.history import CompactionEvent, Op, WatchLog

Status = Literal["ok", "violation", "unknown"]
Evidence: TypeAlias = Op | WatchLog | CompactionEvent


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: Status
    explanation: str = ""
    evidence: tuple[Evidence, ...] = ()
    details: tuple[str, ...] = ()  # further violations or notes, one line each

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def report(self) -> str:
        """A few lines for a human: the verdict, the explanation, the evidence."""
        head = f"{self.name}: {self.status}" + (f": {self.explanation}" if self.explanation else "")
        lines = [head, *(f"  {describe(e)}" for e in self.evidence)]
        lines += [f"  note: {d}" for d in self.details]
        return "\n".join(lines)


def describe(e: Evidence) -> str:
    if isinstance(e, Op):
        return e.describe()
    if isinstance(e, WatchLog):
        end = f" ended {e.end_reason}" if e.end_reason else " open"
        return (f"watch {e.handle} (c{e.client}) from {e.start} opened at {e.open_t:.3f},"
                f" {len(e.responses)} responses,{end}")
    return (f"compaction to {e.revision} ({e.source}) in [{e.t_start:.3f}, {e.t_end:.3f}]")


def passed(name: str, *details: str) -> CheckResult:
    return CheckResult(name, "ok", details=tuple(details))


def unknown(name: str, why: str, *details: str) -> CheckResult:
    return CheckResult(name, "unknown", why, details=tuple(details))


def violated(
    name: str, explanation: str, evidence: Iterable[Evidence] = (), details: Iterable[str] = ()
) -> CheckResult:
    return CheckResult(name, "violation", explanation, tuple(evidence), tuple(details))


__all__ = ["CheckResult", "Evidence", "Status", "describe", "passed", "unknown", "violated"]
