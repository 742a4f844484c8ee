"""The reference state machine: a KV in the style of Ra's `ra_kv`.

The state maps each key to the index of its latest put, nothing else: values stay in
the raft log, a get returns that index and the shell reads the value from the log. So
the snapshot holds no values, `live_indexes` is every key's latest put, and an
overwrite or delete leaves a hole below it: exactly what major compaction reclaims.

Commands: ("put", key, value) -> the put's index; ("get", key) -> index of the latest
put or None (a read through the log); ("delete", key) -> the index it removed or None.
Anything else returns ("error", reason) and changes nothing, deterministically.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sediment.actors.log.raft.types import Entry


@dataclass(frozen=True)
class KvState:
    """key -> index of its latest put. Treat `keys` as immutable: `apply` copies it."""

    keys: Mapping[str, int] = field(default_factory=dict)


def initial() -> KvState:
    return KvState()


def apply(state: KvState, entry: Entry) -> tuple[KvState, Any]:
    cmd = entry.command
    if cmd is None:
        return state, None
    if not isinstance(cmd, tuple) or not cmd or not isinstance(cmd[0], str):
        return state, ("error", "malformed command")
    op, args = cmd[0], cmd[1:]
    if op == "put" and len(args) == 2 and isinstance(args[0], str):
        keys = dict(state.keys)
        keys[args[0]] = entry.index
        return KvState(keys), entry.index
    if op == "get" and len(args) == 1 and isinstance(args[0], str):
        return state, state.keys.get(args[0])
    if op == "delete" and len(args) == 1 and isinstance(args[0], str):
        if args[0] not in state.keys:
            return state, None
        keys = dict(state.keys)
        return KvState(keys), keys.pop(args[0])
    return state, ("error", f"unknown command {op!r}/{len(args)}")


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

__all__ = ["KV", "KvMachine", "KvState", "apply", "initial", "live_indexes", "restore",
           "snapshot"]
