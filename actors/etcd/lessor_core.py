"""The leader's lease clock (etcd's lessor, the part only the leader runs). Pure: time is
an argument, nothing is read or written here.

The replicated state (which leases exist, their granted TTL, the remaining TTL last
checkpointed) lives in the KV machine (`actors/kv/lease_store.py`). The leader keeps
each lease's deadline in memory and decides expiry with its own clock; an expired lease
is revoked by a proposal, as etcd does. A new leader gives every lease `extend` seconds
(an election timeout) plus its remaining TTL: the checkpointed one, or the whole TTL if
none was checkpointed (etcd's Promote). Keep-alives renew in memory only; checkpoints
record the remaining TTLs through the log every interval, so a new leader or a restart
does not hand a lease its whole TTL again.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from sediment.actors.kv.types import LeaseInfo

REVOKE_RETRY = 3.0  # seconds before a revoke that did not land is proposed again


@dataclass
class Lessor:
    leading: bool = False
    deadline: dict[int, float] = field(default_factory=dict)
    ttl: dict[int, int] = field(default_factory=dict)
    revoking: dict[int, float] = field(default_factory=dict)  # id -> when it was proposed
    checkpointed: dict[int, int] = field(default_factory=dict)  # what the machine holds

    def promote(self, now: float, leases: Iterable[LeaseInfo], extend: float) -> None:
        self.leading = True
        self.deadline.clear()
        self.ttl.clear()
        self.revoking.clear()
        self.checkpointed.clear()
        self.reconcile(now, leases, extend)

    def demote(self) -> None:
        self.leading = False
        self.deadline.clear()
        self.ttl.clear()
        self.revoking.clear()
        self.checkpointed.clear()

    def reconcile(self, now: float, leases: Iterable[LeaseInfo], extend: float = 0.0) -> None:
        """Follow the machine: a lease it has that the lessor does not gets its deadline
        (remaining TTL, or the whole TTL, after `extend`); one it no longer has is gone."""
        known = set()
        for info in leases:
            known.add(info.id)
            self.ttl[info.id] = info.ttl
            self.checkpointed[info.id] = info.remaining
            if info.id not in self.deadline:
                left = info.remaining if info.remaining > 0 else info.ttl
                self.deadline[info.id] = now + extend + left
        for lease in [i for i in self.deadline if i not in known]:
            self._forget(lease)

    def granted(self, now: float, lease: int, ttl: int) -> None:
        self.ttl[lease] = ttl
        self.checkpointed[lease] = 0
        self.deadline[lease] = now + ttl

    def revoked(self, lease: int) -> None:
        self._forget(lease)

    def _forget(self, lease: int) -> None:
        for table in (self.deadline, self.ttl, self.revoking, self.checkpointed):
            table.pop(lease, None)

    def renew(self, now: float, lease: int) -> int | None:
        """A keep-alive: the lease's TTL (its deadline moves to now + TTL), or None if
        the lessor has no such lease or it has expired (its revoke is under way)."""
        if lease not in self.deadline or lease in self.revoking or self.deadline[lease] <= now:
            return None
        self.deadline[lease] = now + self.ttl[lease]
        return self.ttl[lease]

    def remaining(self, now: float, lease: int) -> int | None:
        """Whole seconds left (etcd truncates), None if unknown."""
        if lease not in self.deadline:
            return None
        return max(0, int(self.deadline[lease] - now))

    def expired(self, now: float) -> list[int]:
        """Leases whose deadline passed and whose revoke is not pending (or was proposed
        more than REVOKE_RETRY ago): propose a revoke for each."""
        out = []
        for lease, due in sorted(self.deadline.items()):
            if due <= now and now - self.revoking.get(lease, -math.inf) >= REVOKE_RETRY:
                self.revoking[lease] = now
                out.append(lease)
        return out

    def checkpoints(self, now: float) -> tuple[tuple[int, int], ...]:
        """(lease, remaining seconds) for every live lease whose remaining TTL differs
        from what the machine holds: record them through the log."""
        out = []
        for lease, due in sorted(self.deadline.items()):
            if lease in self.revoking:
                continue
            left = max(1, math.ceil(due - now))
            if left != self.checkpointed.get(lease):
                out.append((lease, left))
                self.checkpointed[lease] = left
        return tuple(out)


__all__ = ["REVOKE_RETRY", "Lessor"]
