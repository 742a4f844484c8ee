"""Driving the compaction coordinator's pure core in tests: feed events, pick effects."""

from __future__ import annotations

from typing import Any

from sediment.actors.kv import coordinator_core as co
from sediment.actors.kv.coordinator_core import CoordinatorState

NODES = ("a", "b", "c")
Fx = list[co.Effect]


def feed(s: CoordinatorState, *events: co.Event) -> tuple[CoordinatorState, Fx]:
    """Step through `events`; the state after them and every effect, in order."""
    out: Fx = []
    for ev in events:
        s, fx = co.step(s, ev)
        out += fx
    return s, out


def of(fx: Fx, kind: type) -> list[Any]:
    return [e for e in fx if isinstance(e, kind)]
