"""Safe time for read-only reads, per node (docs/catalog.md rule 5), pure.

A read-only read at `ts` must see every transaction committed at or below `ts`. A
commit is stamped from its coordinator's hybrid clock after every one of its intents
was written, and a node's clock never goes back. So once this node has heard a
timestamp `t` from node N (N read its clock at `t` and then sent it), every commit N
stamps later is above `t`, and every commit N stamped at or below `t` has its intents
in place already: a read at or below `t` either sees the commit or meets the intent
and resolves it. The node's safe time is the minimum, over the nodes that may
coordinate transactions (the topology), of the latest time heard from each, and its
own clock for itself. This replaces "now minus a millisecond", which is safe only
while the clocks agree.

- A node not heard from yet makes nothing safe (None): reads wait.
- A node that restarted (a new incarnation) starts over: its clock may now be behind
  what its earlier incarnation sent, so only what the new one sends counts.
- A node that left the topology coordinates nothing more; its pending intents are
  resolved by readers as before (`tx_state.resolve`).
- Messages from nodes outside the topology, or from an older incarnation than the one
  known, change nothing.

The shell (not wired yet, docs/catalog.md section 8) would send `(node, incarnation,
hlc now)` to every other table node on a short interval and with every reply, feed
`heard`, and ask `read_at` before each read-only read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeAlias

from sediment.actors.catalog.hlc import HybridTimestamp


@dataclass(frozen=True)
class SafeTime:
    me: str
    topology: frozenset[str]
    # node -> (incarnation, the latest time heard from it)
    heard: Mapping[str, tuple[float, HybridTimestamp]] = field(default_factory=dict)


def init(me: str, topology: frozenset[str]) -> SafeTime:
    return SafeTime(me, topology | {me})


def heard(s: SafeTime, node: str, incarnation: float, ts: HybridTimestamp) -> SafeTime:
    """`node` (in its `incarnation`) sent a message stamped `ts`."""
    if node == s.me or node not in s.topology:
        return s
    known = s.heard.get(node)
    if known is not None:
        if incarnation < known[0]:
            return s  # a late message of an earlier incarnation
        if incarnation == known[0] and ts <= known[1]:
            return s
    return SafeTime(s.me, s.topology, {**s.heard, node: (incarnation, ts)})


def topology_changed(s: SafeTime, topology: frozenset[str]) -> SafeTime:
    """The nodes that may coordinate transactions now; a node that left is forgotten
    (back later, it must be heard from again)."""
    nodes = topology | {s.me}
    return SafeTime(s.me, nodes, {n: v for n, v in s.heard.items() if n in nodes})


def safe_time(s: SafeTime, now: HybridTimestamp) -> HybridTimestamp | None:
    """The highest timestamp a read-only read may use now (None: not known yet)."""
    times = [now]
    for node in sorted(s.topology - {s.me}):
        known = s.heard.get(node)
        if known is None:
            return None
        times.append(known[1])
    return min(times)


@dataclass(frozen=True, slots=True)
class Serve:
    ts: HybridTimestamp


@dataclass(frozen=True, slots=True)
class Wait:
    """Not safe yet: ask again once more times are heard (bounded by the caller)."""

    safe: HybridTimestamp | None


ReadDecision: TypeAlias = Serve | Wait


def read_at(s: SafeTime, now: HybridTimestamp, requested: HybridTimestamp | None) -> ReadDecision:
    """A read at `requested` (None: as late as is safe now)."""
    safe = safe_time(s, now)
    if safe is None:
        return Wait(None)
    if requested is None:
        return Serve(safe)
    return Serve(requested) if requested <= safe else Wait(safe)


__all__ = ["ReadDecision", "SafeTime", "Serve", "Wait", "heard", "init", "read_at",
           "safe_time", "topology_changed"]
