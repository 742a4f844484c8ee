"""Typed errors of the supervision layer.

Bad configuration is rejected at the boundary with one sentence naming the field, so a
misconfigured tree fails when it is built instead of at its first crash.
"""

from __future__ import annotations

from sediment.runtime.errors import BadArgument, RuntimeErrorBase


class InvalidChildSpec(BadArgument):
    """A child spec (or a list of them) is malformed or contradicts the supervisor flags."""


class InvalidSupFlags(BadArgument):
    """Supervisor flags are malformed (strategy, intensity, period, auto_shutdown, backoff)."""


class SupervisorProtocolError(RuntimeErrorBase):
    """The shell broke the driving contract of the pure core (a bug in the shell, not input)."""
