"""What an exit signal does to its receiver: OTP's rules as one pure function.

Source: Erlang reference manual, "Receiving Exit Signals" (runtime_anchors.md §1.6).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .reasons import KILL, KILLED, NORMAL


@dataclass(frozen=True, slots=True)
class Drop:
    """The signal has no effect."""


@dataclass(frozen=True, slots=True)
class Terminate:
    """The receiver exits with `reason`."""

    reason: Any


@dataclass(frozen=True, slots=True)
class ToMessage:
    """The signal becomes an `Exit(sender, reason)` message in the receiver's mailbox."""


Action = Drop | Terminate | ToMessage
DROP = Drop()
TO_MESSAGE = ToMessage()


def on_exit_signal(
    *, reason: Any, from_link: bool, link_active: bool, trap_exit: bool, from_self: bool
) -> Action:
    """Decide the effect of an exit signal.

    - A link signal on a link that is no longer active is dropped.
    - A non-link `kill` cannot be trapped: the receiver exits with `killed`.
    - A trapping receiver gets a message (a linked `kill` included).
    - `normal` is dropped unless the receiver sent it to itself.
    - Anything else kills the receiver with the same reason (a linked `kill` stays `kill`).
    """
    if from_link and not link_active:
        return DROP
    if reason == KILL and not from_link:
        return Terminate(KILLED)
    if trap_exit:
        return TO_MESSAGE
    if reason == NORMAL:
        return Terminate(NORMAL) if from_self else DROP
    return Terminate(reason)
