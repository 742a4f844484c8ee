"""The JSON form of a history's records (`History.to_json` / `from_json`).

Dataclasses become {"$t": name, field: value, ...}, bytes {"$b": latin-1 text} (every
byte maps to one code point, so any key or value survives), mappings {"$m": [[k, v],
...]}. Tuples are restored from the field's annotation. Only the types listed here are
encoded or decoded: a saved history cannot name any other class.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from functools import cache
from typing import Any

from sediment.actors.kv.types import (
    Compact,
    CompactResult,
    Compare,
    DeleteRange,
    DeleteResult,
    Event,
    KeyValue,
    Put,
    PutResult,
    Range,
    RangeResult,
    Txn,
    TxnResult,
)
from sediment.scenarios.history_records import (
    CompactionEvent,
    Failure,
    FaultEvent,
    HistoryError,
    JsonValue,
    Op,
    WatchLog,
    WatchResponse,
)

_TYPES: dict[str, type] = {
    cls.__name__: cls
    for cls in (
        Put, DeleteRange, Range, Txn, Compact, Compare, KeyValue, Event, PutResult,
        DeleteResult, RangeResult, TxnResult, CompactResult, Failure, Op, WatchResponse,
        WatchLog, FaultEvent, CompactionEvent,
    )
}


def encode(x: object) -> JsonValue:
    if isinstance(x, bytes):
        return {"$b": x.decode("latin-1")}
    if x is None or isinstance(x, bool | int | str):
        return x
    if isinstance(x, float):
        if not math.isfinite(x):
            raise HistoryError(f"cannot encode {x}")
        return x
    if is_dataclass(x) and not isinstance(x, type):
        name = type(x).__name__
        if _TYPES.get(name) is not type(x):
            raise HistoryError(f"cannot encode a {name}")
        out: dict[str, JsonValue] = {"$t": name}
        for f in fields(x):
            out[f.name] = encode(getattr(x, f.name))
        return out
    if isinstance(x, list | tuple):
        return [encode(v) for v in x]
    if isinstance(x, Mapping):
        return {"$m": [[encode(k), encode(v)] for k, v in x.items()]}
    raise HistoryError(f"cannot encode {type(x).__name__}")


@cache
def _tuple_fields(cls: type) -> frozenset[str]:
    hints = typing.get_type_hints(cls)
    return frozenset(n for n, h in hints.items() if typing.get_origin(h) is tuple)


def decode(x: JsonValue) -> Any:
    if isinstance(x, list):
        return [decode(v) for v in x]
    if not isinstance(x, dict):
        return x
    if "$b" in x:
        return str(x["$b"]).encode("latin-1")
    if "$m" in x:
        return {decode(k): decode(v) for k, v in x["$m"]}
    cls = _TYPES.get(x.get("$t", ""))
    if cls is None:
        raise HistoryError(f"unknown record type {x.get('$t')!r}")
    tuples = _tuple_fields(cls)
    kwargs = {}
    for k, v in x.items():
        if k == "$t":
            continue
        value = decode(v)
        kwargs[k] = tuple(value) if k in tuples and isinstance(value, list) else value
    return cls(**kwargs)


def expect(x: object, cls: type[Any]) -> Any:
    """`x` when it is a `cls` (a decoded record of the expected type), else HistoryError."""
    if not isinstance(x, cls):
        raise HistoryError(f"expected {cls.__name__}, got {type(x).__name__}")
    return x


__all__ = ["decode", "encode", "expect"]
