"""The reference state machine: a KV in the style of Ra's `ra_kv`.

The state maps each key to the index of its latest put, nothing else: values stay in
the raft log, a get returns that index and the shell reads the value from the log. So
the snapshot holds no values, `live_indexes` is every key's latest put, and an
overwrite or delete leaves a hole below it: exactly what major compaction reclaims.

Commands: `KvPut(key, value)` -> the put's index; `KvGet(key)` -> index of the latest
put or None (a read through the log); `KvDelete(key)` -> the index it removed or None.
Anything else returns `KvRefused(reason)` and changes nothing, deterministically.

Commands are persisted: raft log entries (WAL, segments) hold them pickled, so these
classes' module and names are part of the on-disk format. A log the previous release
wrote holds the tuple form, ("put", key, value), ("get", key), ("delete", key);
`decode_command` reads it as the typed commands, so such a log still replays to the
same state (`tests/test_raft_core.py`, the old-form replay tests).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sediment.actors.log.raft.types import Entry


@dataclass(frozen=True)
class KvPut:
    """Set `key`'s latest put to this entry (the value stays in the log)."""

    key: str
    value: Any


@dataclass(frozen=True)
class KvGet:
    """A read through the log: the index of `key`'s latest put, or None."""

    key: str


@dataclass(frozen=True)
class KvDelete:
    """Forget `key`: the index of the put it removed, or None."""

    key: str


@dataclass(frozen=True)
class KvRefused:
    """The result of a command the machine does not know; nothing changed."""

    reason: str


KvCommand = KvPut | KvGet | KvDelete


def decode_command(cmd: object) -> KvCommand | KvRefused:
    """`cmd` as a typed command: the typed ones as they are, the previous release's
    tuples as their typed equivalents, anything else refused (with why)."""
    if isinstance(cmd, KvPut | KvGet | KvDelete):
        return cmd
    if not isinstance(cmd, tuple) or not cmd or not isinstance(cmd[0], str):
        return KvRefused("malformed command")
    op, args = cmd[0], cmd[1:]
    if args and isinstance(args[0], str):
        if op == "put" and len(args) == 2:
            return KvPut(args[0], args[1])
        if op == "get" and len(args) == 1:
            return KvGet(args[0])
        if op == "delete" and len(args) == 1:
            return KvDelete(args[0])
    return KvRefused(f"unknown command {op!r}/{len(args)}")


def put_value(command: object) -> Any:
    """The value a put entry's command carries (either form; None for any other)."""
    cmd = decode_command(command)
    return cmd.value if isinstance(cmd, KvPut) else None


@dataclass(frozen=True)
class KvState:
    """key -> index of its latest put. Treat `keys` as immutable: `apply` copies it."""

    keys: Mapping[str, int] = field(default_factory=dict)


def initial() -> KvState:
    return KvState()


def apply(state: KvState, entry: Entry) -> tuple[KvState, Any]:
    if entry.command is None:
        return state, None
    cmd = decode_command(entry.command)
    if isinstance(cmd, KvPut):
        keys = dict(state.keys)
        keys[cmd.key] = entry.index
        return KvState(keys), entry.index
    if isinstance(cmd, KvGet):
        return state, state.keys.get(cmd.key)
    if isinstance(cmd, KvDelete):
        if cmd.key not in state.keys:
            return state, None
        keys = dict(state.keys)
        return KvState(keys), keys.pop(cmd.key)
    return state, cmd


def snapshot(state: KvState) -> bytes:
    """Deterministic bytes: sorted keys, no values."""
    return json.dumps(sorted(state.keys.items()), separators=(",", ":")).encode()


def restore(data: bytes) -> KvState:
    pairs = json.loads(data.decode())
    return KvState({str(k): int(i) for k, i in pairs})


def live_indexes(state: KvState) -> list[int]:
    return sorted(state.keys.values())


class KvMachine:
    """`kv_machine` as a `StateMachine[KvState]` object."""

    def initial(self) -> KvState:
        return initial()

    def apply(self, state: KvState, entry: Entry) -> tuple[KvState, Any]:
        return apply(state, entry)

    def snapshot(self, state: KvState) -> bytes:
        return snapshot(state)

    def live_indexes(self, state: KvState) -> list[int]:
        return live_indexes(state)

    def restore(self, data: bytes) -> KvState:
        return restore(data)


KV = KvMachine()

__all__ = ["KV", "KvCommand", "KvDelete", "KvGet", "KvMachine", "KvPut", "KvRefused",
           "KvState", "apply", "decode_command", "initial", "live_indexes", "put_value",
           "restore", "snapshot"]
