"""The simulated network between logical nodes: delay, loss, partitions, node state; and
the other faults every process of a runtime applies alike (clock skew per node,
failpoints armed everywhere), because the Ray backend pushes all of them to every process
as one value (`NetRules`).

Pure and seeded: every decision comes from the `random.Random` it is given, so a seed
replays the same deliveries. Per (sender, receiver) pair delivery stays FIFO: a later
message never arrives before an earlier one (Erlang's only ordering guarantee); a lost
message is simply never delivered.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from ..errors import BadArgument
from ..failpoints import Failpoint

MAX_SKEW = 1e9  # seconds either way (about 30 years): only absurd values are refused


@dataclass
class LinkFaults:
    """Faults on messages from one node to another (or to every node: dst '*')."""

    delay_min: float = 0.0
    delay_max: float = 0.0
    drop: float = 0.0


@dataclass(frozen=True)
class NetRules:
    """A network's faults as a picklable value: cut node pairs and per-link faults."""

    partitions: frozenset[frozenset[str]] = frozenset()
    faults: tuple[tuple[tuple[str, str], tuple[float, float, float]], ...] = ()
    skew: tuple[tuple[str, float], ...] = ()  # node -> seconds added to its clock
    failpoints: tuple[tuple[str, Failpoint], ...] = ()  # armed on every process

    def empty(self) -> bool:
        return not self.partitions and not self.faults and not self.skew and not self.failpoints


@dataclass
class Network:
    rng: random.Random
    default_delay: tuple[float, float] = (0.0, 0.0)
    cross_node_delay: tuple[float, float] = (0.0005, 0.002)
    faults: dict[tuple[str, str], LinkFaults] = field(default_factory=dict)
    partitions: set[frozenset[str]] = field(default_factory=set)
    down: set[str] = field(default_factory=set)
    skew: dict[str, float] = field(default_factory=dict)  # node -> clock offset (seconds)
    failpoints: dict[str, Failpoint] = field(default_factory=dict)  # armed everywhere

    def set_faults(self, src: str, dst: str, *, delay: tuple[float, float] | None = None,
                   drop: float = 0.0) -> None:
        lo, hi = delay if delay is not None else (0.0, 0.0)
        if lo < 0 or hi < lo:
            raise BadArgument(f"delay must be (min, max) with 0 <= min <= max, got {delay}")
        if not 0.0 <= drop <= 1.0:
            raise BadArgument(f"drop must be a probability in [0, 1], got {drop}")
        self.faults[(src, dst)] = LinkFaults(lo, hi, drop)

    def clear_faults(self) -> None:
        self.faults.clear()

    def partition(self, side_a: list[str], side_b: list[str]) -> None:
        for a in side_a:
            for b in side_b:
                if a != b:
                    self.partitions.add(frozenset((a, b)))

    def heal(self) -> None:
        self.partitions.clear()

    def set_skew(self, node: str, seconds: float) -> None:
        """Shift `node`'s clock by `seconds` from now on (0 puts it back)."""
        if seconds != seconds or abs(seconds) > MAX_SKEW:
            raise BadArgument(f"clock skew must be within +-{MAX_SKEW:g} s, got {seconds}")
        if seconds:
            self.skew[node] = float(seconds)
        else:
            self.skew.pop(node, None)

    def arm_everywhere(self, name: str, fp: Failpoint) -> None:
        """Arm failpoint `name` on every process (those started later too)."""
        self.failpoints[name] = fp

    def release_everywhere(self, name: str) -> None:
        self.failpoints.pop(name, None)

    def rules(self) -> NetRules:
        """The faults as plain data, to hand to another process (the Ray backend)."""
        return NetRules(frozenset(self.partitions),
                        tuple((k, (f.delay_min, f.delay_max, f.drop))
                              for k, f in sorted(self.faults.items())),
                        tuple(sorted(self.skew.items())),
                        tuple(sorted(self.failpoints.items())))

    def load(self, rules: NetRules) -> None:
        """Replace the faults by `rules` (partitions and per-link faults)."""
        self.partitions = set(rules.partitions)
        self.faults = {k: LinkFaults(*v) for k, v in rules.faults}
        self.skew = dict(rules.skew)
        self.failpoints = dict(rules.failpoints)

    def connected(self, a: str, b: str) -> bool:
        if self.down and (a in self.down or b in self.down):
            return False
        return a == b or not self.partitions or frozenset((a, b)) not in self.partitions

    def route(self, src: str, dst: str) -> float | None:
        """Delay for one message from node src to node dst, or None if it is lost."""
        if not self.connected(src, dst):
            return None
        fault = None
        if self.faults:
            fault = self.faults.get((src, dst)) or self.faults.get((src, "*"))
        if fault is not None:
            if fault.drop and self.rng.random() < fault.drop:
                return None
            if fault.delay_max > 0:
                return self.rng.uniform(fault.delay_min, fault.delay_max)
            return 0.0
        lo, hi = self.default_delay if src == dst else self.cross_node_delay
        return self.rng.uniform(lo, hi) if hi > 0 else 0.0
