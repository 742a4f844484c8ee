"""What the etcd servers of a cluster ask each other (`server.py`).

- `Endpoint()` -> the server's client URL ("" before it listens).
- From a follower's server, forwarding a client's lease call to the leader's (the leader
  keeps the lessor's deadlines): `RenewLease(lease)` -> the TTL (0: no such lease);
  `LeaseTimeToLive(lease)` -> the seconds left or None. A server that does not lead any
  more answers `NotLeader(leader)`.
- Anything else -> `UnknownRequest`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Endpoint:
    """-> the server's client URL."""


@dataclass(frozen=True, slots=True)
class RenewLease:
    """A keep-alive forwarded to the leader -> the TTL, 0 for a lease that does not exist."""

    lease: int


@dataclass(frozen=True, slots=True)
class LeaseTimeToLive:
    """A TimeToLive forwarded to the leader -> the seconds left, or None."""

    lease: int


@dataclass(frozen=True, slots=True)
class NotLeader:
    """The asked server does not lead (any more); `leader`: the one it knows, if any."""

    leader: str | None


__all__ = ["Endpoint", "LeaseTimeToLive", "NotLeader", "RenewLease"]
