"""The call every long-lived process answers, and the answer to a call it does not know.

`Status()` asks a process for its view (each answers in its own shape: mostly a dict,
a typed answer where its protocol has one). `UnknownRequest` is what a process answers
to a request it has no clause for, so a caller can tell a wrong question from an answer.
Both are defined once here; every shell imports them rather than spelling a tuple.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_SHOWN = 200  # characters of the request kept: an answer stays small whatever was asked


@dataclass(frozen=True, slots=True)
class Status:
    """Asks a process for its view."""


@dataclass(frozen=True, slots=True)
class UnknownRequest:
    """The answer to a request the process has no clause for; `request` is its repr, cut."""

    request: str

    @classmethod
    def of(cls, request: Any) -> UnknownRequest:
        """The answer to `request`, which is kept as a short repr."""
        return cls(repr(request)[:_SHOWN])


__all__ = ["Status", "UnknownRequest"]
