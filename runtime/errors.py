"""Typed errors raised at the runtime's boundary.

Every bad input or failed interaction surfaces as one of these, never as a raw Ray or
pickle exception, so callers can tell "the target is gone" from "it was slow".
"""

from __future__ import annotations

from typing import Any


class RuntimeErrorBase(Exception):
    """Base of every error the runtime raises on purpose."""


class BadArgument(RuntimeErrorBase, ValueError):
    """An argument is malformed (wrong type, negative timeout, unknown node...)."""


class UnpicklableMessage(BadArgument):
    """A message cannot be serialized; nothing was sent."""


class NameTaken(RuntimeErrorBase):
    """`register` of a name that another live process already holds."""

    def __init__(self, name: str, holder: Any) -> None:
        super().__init__(f"name {name!r} is already registered to {holder}")
        self.name = name
        self.holder = holder

    def __reduce__(self) -> Any:
        return (type(self), (self.name, self.holder))


class NotRegistered(RuntimeErrorBase):
    """No live process is registered under this name."""


class CallError(RuntimeErrorBase):
    """A `call` did not get a reply."""


class CallTimeout(CallError):
    """No reply within the timeout; a late reply is dropped."""


class NoProc(CallError):
    """The target does not exist (never did, or already exited)."""


class CallExit(CallError):
    """The target exited while the call was pending."""

    def __init__(self, target: Any, reason: Any) -> None:
        super().__init__(f"{target} exited during the call: {reason}")
        self.target = target
        self.reason = reason

    def __reduce__(self) -> Any:
        return (type(self), (self.target, self.reason))


class ReceiveTimeout(RuntimeErrorBase):
    """`receive` saw no matching message before its timeout."""


class MailboxOverflow(RuntimeErrorBase):
    """The mailbox hit its bound; the receiving process fails with this reason."""


class ProcessExit(BaseException):
    """Raised inside a process to end it with `reason` (what `exit(self(), reason)` does).

    A BaseException so that `except Exception` in process code does not swallow it.
    """

    def __init__(self, reason: Any) -> None:
        super().__init__(reason)
        self.reason = reason


class ProcessCrashed(BaseException):
    """Unwinds synchronous code of a process that a crash failpoint just ended (sim)."""


class FailpointError(RuntimeErrorBase):
    """Raised by an armed failpoint whose action is `raise`."""
