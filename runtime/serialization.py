"""Checking that a message can cross a process boundary, cheaply.

A message that cannot be serialized must be refused at `send` with a typed error and
nothing sent. Plain data (numbers, strings, pids, and tuples/lists of them) is accepted
without serializing it; anything else is tried with pickle, then cloudpickle (which also
handles closures and lambdas, as Ray does).
"""

from __future__ import annotations

import pickle
from typing import Any

from .errors import UnpicklableMessage
from .pid import Pid, Ref

_PLAIN = (int, float, str, bytes, bool, type(None), Pid, Ref)


def check_serializable(value: Any, depth: int = 0) -> None:
    """Raise UnpicklableMessage if `value` cannot be sent to another process."""
    if isinstance(value, _PLAIN):
        return
    if depth < 3 and type(value) in (tuple, list):
        for item in value:
            check_serializable(item, depth + 1)
        return
    try:
        pickle.dumps(value, protocol=5)
        return
    except Exception:  # noqa: BLE001 - cloudpickle may still manage it
        pass
    from ray import cloudpickle  # only reached for values plain pickle refuses

    try:
        cloudpickle.dumps(value)  # type: ignore[no-untyped-call]  # ray ships it untyped
    except Exception as exc:  # noqa: BLE001
        raise UnpicklableMessage(
            f"message cannot be serialized: {type(exc).__name__}: {exc}") from None


def encode(value: Any) -> bytes:
    """`value` as bytes for another host, or UnpicklableMessage (nothing sent).

    The C pickler serializes plain data several times faster than Ray's cloudpickle
    (whose per-object Python hook runs for every object of a message); closures and
    lambdas, which only cloudpickle handles, take that path. A signal is serialized once,
    here at the send, so the refusal is immediate and Ray only moves bytes.
    """
    try:
        return pickle.dumps(value, protocol=5)
    except Exception:  # noqa: BLE001 - cloudpickle may still manage it
        pass
    from ray import cloudpickle

    try:
        blob: bytes = cloudpickle.dumps(value)  # type: ignore[no-untyped-call]
    except Exception as exc:  # noqa: BLE001
        raise UnpicklableMessage(
            f"message cannot be serialized: {type(exc).__name__}: {exc}") from None
    return blob


def decode(blob: bytes) -> Any:
    """The value `encode` made (cloudpickle's output loads with pickle too)."""
    return pickle.loads(blob)
