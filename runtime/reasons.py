"""Exit reasons, as in Erlang.

Reasons are plain values: the atoms below as strings, `Shutdown(term)` for
`{shutdown, Term}`, `Error` for an uncaught exception, or any picklable user value.
"""

from __future__ import annotations

import pickle
import traceback
from dataclasses import dataclass, field
from typing import Any

NORMAL = "normal"
SHUTDOWN = "shutdown"
KILL = "kill"  # the untrappable exit *signal*; the receiver exits with KILLED
KILLED = "killed"
NOPROC = "noproc"
NOCONNECTION = "noconnection"


@dataclass(frozen=True)
class Shutdown:
    """`{shutdown, Term}`: a clean stop that carries a term."""

    term: Any


@dataclass(frozen=True)
class Error:
    """An uncaught exception ended the process.

    The exception object itself is kept only when it pickles, so the reason can always
    cross process boundaries; `kind` and `message` are always there.
    """

    kind: str
    message: str
    traceback: str = field(default="", compare=False, repr=False)
    exc: BaseException | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_exception(cls, exc: BaseException) -> Error:
        tb = "".join(traceback.format_exception(exc))
        kept: BaseException | None = exc
        try:
            pickle.loads(pickle.dumps(exc))
        except Exception:
            kept = None
        return cls(type(exc).__name__, str(exc), tb, kept)

    def __str__(self) -> str:
        return f"{{error, {self.kind}: {self.message}}}"


def kind_of(reason: Any) -> str:
    """A low-cardinality label for a reason (metrics, logs)."""
    if reason in (NORMAL, SHUTDOWN, KILLED, NOPROC, NOCONNECTION):
        return str(reason)
    if isinstance(reason, Shutdown):
        return SHUTDOWN
    if isinstance(reason, Error):
        return "error"
    return "other"


def is_clean_shutdown(reason: Any) -> bool:
    """normal, shutdown and {shutdown, _}: the reasons a transient child is not restarted for."""
    return reason in (NORMAL, SHUTDOWN) or isinstance(reason, Shutdown)
