"""The value checks every part of a scenario file is read with (`ValueReader`).

Each check returns the value typed or fails with a `ScenarioError` at the value's place
in the file (`schema_yaml.Doc`). It also knows what the scenario declared so far (its
nodes, duration, and whether it runs the block or the branch tier), which the later
parts are checked against. `schema_parse.py` reads the scenario with it,
`schema_faults.py` the faults, `schema_blocks.py` and `schema_branches.py` their tiers.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn, TypeVar, cast

from sediment.scenarios.schema import MAX_DURATION_S, Path_
from sediment.scenarios.schema_branches import BRANCH_TRIGGERS, SPARK_NAMES
from sediment.scenarios.schema_yaml import Doc, did_you_mean, got

T = TypeVar("T")


class ValueReader:
    """Typed values out of plain data, failing at their place in the file."""

    def __init__(self, doc: Doc) -> None:
        self.doc = doc
        self.nodes: tuple[str, ...] = ()
        self.duration = MAX_DURATION_S
        self.blocks = False  # the scenario starts a block tier: its roles, triggers, checks
        self.branches = False  # the scenario runs the branch tier: its triggers
        self.spark = False  # ... with its merges on Spark: its Spark trigger and role

    def fail(self, path: Path_, message: str, *, key: bool = False) -> NoReturn:
        self.doc.fail(path, message, key=key)

    def mapping(
        self, v: object, path: Path_, known: Sequence[str], required: Sequence[str] = ()
    ) -> dict[str, Any]:
        if not isinstance(v, dict):
            self.fail(path, f"must be a mapping, got {got(v)}")
        for k in v:
            if not isinstance(k, str):
                self.fail(path, f"keys must be strings, got {got(k)}")
            if k not in known:
                self.fail((*path, k), f"unknown key{did_you_mean(k, known)}; known: "
                          f"{', '.join(known)}", key=True)
        for k in required:
            if k not in v:
                self.fail((*path, k), "is required")
        return cast(dict[str, Any], v)

    def integer(self, v: object, path: Path_, lo: int, hi: int) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            self.fail(path, f"must be an integer in [{lo}, {hi}], got {got(v)}")
        return v

    def number(
        self, v: object, path: Path_, lo: float, hi: float, *, open_lo: bool = False
    ) -> float:
        ok = (isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
              and (v > lo if open_lo else v >= lo) and v <= hi)
        if not ok:
            low = f"> {lo:g}" if open_lo else f">= {lo:g}"
            self.fail(path, f"must be a number {low} and <= {hi:g}, got {got(v)}")
        return float(cast(float, v))

    def boolean(self, v: object, path: Path_) -> bool:
        if not isinstance(v, bool):
            self.fail(path, f"must be true or false, got {got(v)}")
        return v

    def string(self, v: object, path: Path_, pattern: re.Pattern[str] | None = None,
               what: str = "a string") -> str:
        if not isinstance(v, str) or (pattern is not None and not pattern.fullmatch(v)):
            self.fail(path, f"must be {what}, got {got(v)}")
        return v

    def choice(self, v: object, path: Path_, choices: Sequence[str]) -> str:
        if not isinstance(v, str) or v not in choices:
            self.fail(path, f"must be one of {', '.join(choices)}, got {got(v)}"
                      f"{did_you_mean(v, choices)}")
        return v

    def items(self, v: object, path: Path_, most: int, *, empty: bool = True) -> list[Any]:
        if not isinstance(v, list):
            self.fail(path, f"must be a list, got {got(v)}")
        if not empty and not v:
            self.fail(path, "must not be empty")
        if len(v) > most:
            self.fail(path, f"at most {most} items, got {len(v)}")
        return v

    def distinct(self, values: list[T], path: Path_) -> tuple[T, ...]:
        for i, x in enumerate(values):
            if x in values[:i]:
                self.fail((*path, i), f"{got(x)} is listed twice")
        return tuple(values)

    def opt(self, m: Mapping[str, Any], key: str, path: Path_,
            read: Callable[[object, Path_], T], default: T) -> T:
        return read(m[key], (*path, key)) if key in m else default

    def time(self, v: object, path: Path_) -> float:
        return self.number(v, path, 0.0, self.duration)

    def needs_tier(self, v: object, path: Path_, tier: Sequence[str]) -> None:
        """A name of the block tier (a role, trigger, check) in a scenario without one."""
        if not self.blocks and isinstance(v, str) and v in tier:
            self.fail(path, f"{v!r} belongs to the block tier: it needs cluster.blocks")

    def needs_branches(self, v: object, path: Path_) -> None:
        """A trigger of the branch tier in a scenario without it."""
        if not self.branches and isinstance(v, str) and v in BRANCH_TRIGGERS:
            self.fail(path, f"{v!r} belongs to the branch tier: it needs cluster.branches")
        if not self.spark and isinstance(v, str) and v in SPARK_NAMES:
            self.fail(path, f"{v!r} needs the branch tier's merges on Spark: "
                      "cluster.branches.spark")

    def node_ref(self, v: object, path: Path_, roles: Sequence[str]) -> str:
        """A node the scenario declared, or one of `roles` (picked when a fault fires)."""
        allowed = (*self.nodes, *roles)
        if not isinstance(v, str) or v not in allowed:
            self.fail(path, f"must be one of {', '.join(allowed)}, got {got(v)}"
                      f"{did_you_mean(v, allowed)}")
        return v


__all__ = ["ValueReader"]
