"""What a scenario run is given and gives back: its time bounds per backend (`Timing`),
the progress it reports while it runs, and its result (`RunResult`: the checks, the
history, notes, timings; the verdict follows from the checks)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sediment.scenarios import observe
from sediment.scenarios.checkers.result import CheckResult
from sediment.scenarios.checkers.tier_state import TierState
from sediment.scenarios.history import History
from sediment.scenarios.schema import Scenario

Verdict = str  # "pass" | "fail" | "unknown"


@dataclass(frozen=True)
class Timing:
    """Bounds of a run, per backend: seconds of the runtime's clock."""

    op_timeout: float = 3.0
    sample_interval: float = 0.05
    tail_interval: float = 0.02
    trigger_interval: float = 0.001
    settle_timeout: float = 60.0
    drain_timeout: float = 30.0
    start_timeout: float = 120.0
    tick: float = 0.25  # the driver's longest sleep (progress updates)

    @classmethod
    def for_backend(cls, backend: str) -> Timing:
        if backend == "ray":
            return cls(op_timeout=5.0, sample_interval=0.25, tail_interval=0.25,
                       trigger_interval=0.005, settle_timeout=180.0, drain_timeout=120.0,
                       start_timeout=300.0, tick=0.5)
        return cls()


@dataclass(frozen=True)
class Progress:
    """What the runner reports while it runs (for a console bar)."""

    phase: str  # start, traffic, fault, recover, check, done
    t: float  # seconds of traffic so far
    duration: float
    ops: int = 0
    message: str = ""


ProgressFn = Callable[[Progress], None]


@dataclass
class RunResult:
    scenario: Scenario
    backend: str
    seed: int
    checks: list[CheckResult]
    history: History
    samples: tuple[observe.ClusterView, ...] = ()
    notes: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    data_dir: str = ""
    error: str | None = None  # the run itself failed (not a check)
    placement: dict[str, str] = field(default_factory=dict)  # node -> Ray node id (ray)
    tier: TierState | None = None  # what the tier checks judged (a block tier's run)

    @property
    def verdict(self) -> Verdict:
        if self.error is not None or any(c.status == "violation" for c in self.checks):
            return "fail"
        if any(c.status == "unknown" for c in self.checks):
            return "unknown"
        return "pass"

    @property
    def violations(self) -> list[CheckResult]:
        return [c for c in self.checks if c.status == "violation"]


__all__ = ["Progress", "ProgressFn", "RunResult", "Timing", "Verdict"]
