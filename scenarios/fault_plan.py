"""A scenario's fault timeline, pure: which faults start and end when, and whether this
runtime can inject them at all.

`plan(scenario)`: every fault's start and, for a ranged fault, its end (`until`), in
time order (an end before a start at the same time, so two faults that meet never
overlap). `check_supported` rejects what the runtime cannot do, before anything starts.
The nemesis (`nemesis.py`) applies the steps to a running cluster.
"""

from __future__ import annotations

from dataclasses import dataclass

from sediment.scenarios.schema import Delay, Scenario

UNSUPPORTED: dict[type, str] = {}


class UnsupportedScenario(ValueError):
    """The scenario asks for a fault this runtime cannot inject."""


def check_supported(scenario: Scenario) -> None:
    """Raise UnsupportedScenario naming every fault that cannot run."""
    problems = []
    for i, f in enumerate(scenario.faults):
        why = UNSUPPORTED.get(type(f.action))
        if why is None and isinstance(f.action, Delay) and f.action.probability < 1.0:
            why = "delay.probability below 1: the runtime delays every message of a link"
        if why is not None:
            problems.append(f"faults[{i}] (at {f.at:g}): {why}")
    if problems:
        raise UnsupportedScenario(f"{scenario.name}: not supported on this runtime: "
                                  + "; ".join(problems))


@dataclass(frozen=True, order=True)
class Step:
    """Fault `fault` of the scenario starts (undo False) or ends (undo True) at `t`."""

    t: float
    undo_first: int  # 0 for an end: ends sort before starts at the same time
    fault: int
    undo: bool


def plan(scenario: Scenario) -> list[Step]:
    steps = []
    for i, f in enumerate(scenario.faults):
        steps.append(Step(f.at, 1, i, False))
        if f.until is not None:
            steps.append(Step(f.until, 0, i, True))
    return sorted(steps)


__all__ = ["UNSUPPORTED", "Step", "UnsupportedScenario", "check_supported", "plan"]
