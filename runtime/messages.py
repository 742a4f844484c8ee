"""Messages a process can find in its mailbox, and the signals processes exchange.

User-visible: `Exit` (a trapped exit signal, Erlang's {'EXIT', Pid, Reason}), `Down`
(a monitor fired), `Call` and `Cast` (gen_server requests). Signals are what backends
carry between processes; the receiving process turns them into mailbox messages or
state changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .pid import Pid, Ref


@dataclass(frozen=True, slots=True)
class Exit:
    """{'EXIT', pid, reason}: a trapped exit signal."""

    pid: Pid
    reason: Any


@dataclass(frozen=True, slots=True)
class Down:
    """{'DOWN', ref, process, pid, reason}: a monitored process ended."""

    ref: Ref
    pid: Pid
    reason: Any


@dataclass(frozen=True, slots=True)
class CallRef:
    """Erlang's From: where the reply to a call goes."""

    pid: Pid
    ref: Ref


@dataclass(frozen=True, slots=True)
class Call:
    """A synchronous request; answer it with `ctx.reply(from_, value)`."""

    from_: CallRef
    request: Any


@dataclass(frozen=True, slots=True)
class Cast:
    """An asynchronous request."""

    request: Any


# --- signals between processes (not seen by process code) -------------------------


@dataclass(frozen=True, slots=True)
class MessageSignal:
    payload: Any


@dataclass(frozen=True, slots=True)
class ExitSignal:
    sender: Pid
    reason: Any
    from_link: bool


@dataclass(frozen=True, slots=True)
class LinkSignal:
    sender: Pid


@dataclass(frozen=True, slots=True)
class UnlinkSignal:
    sender: Pid


@dataclass(frozen=True, slots=True)
class DownSignal:
    ref: Ref
    pid: Pid
    reason: Any


@dataclass(frozen=True, slots=True)
class ReplySignal:
    ref: Ref
    value: Any
    failed: bool = False  # value is an exception to raise in the caller


@dataclass(frozen=True, slots=True)
class FailpointSignal:
    """Arm (action set) or release (action None) a failpoint on the receiver."""

    name: str
    action: Any


@dataclass(frozen=True, slots=True)
class SuspendSignal:
    """Stop (True) or continue (False) the receiver, as SIGSTOP/SIGCONT would."""

    suspend: bool


@dataclass(frozen=True, slots=True)
class WatchSignal:
    """`watcher` links to (ref None) or monitors (ref) the receiver, or waits for its reply
    to call `ref` (kind "call"). Travels in the watcher's ordered stream, so a message
    sent after it cannot end the receiver before the watch is in place."""

    watcher: Pid
    ref: Ref | None
    kind: str


@dataclass(frozen=True, slots=True)
class UnwatchSignal:
    """Remove what a `WatchSignal` set up."""

    watcher: Pid
    ref: Ref | None
    kind: str


@dataclass(frozen=True, slots=True)
class KillSignal:
    """End the receiver at once with reason `killed` (a process sharing its host)."""


Signal = (
    MessageSignal
    | ExitSignal
    | LinkSignal
    | UnlinkSignal
    | DownSignal
    | ReplySignal
    | FailpointSignal
    | SuspendSignal
    | WatchSignal
    | UnwatchSignal
    | KillSignal
)
