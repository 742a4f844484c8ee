"""A write pattern shared by the raft log tests (importable by Ray workers)."""

from __future__ import annotations

from typing import Any

from sediment.actors.log.kv_machine import KvPut
from sediment.actors.log.shell.cluster import propose
from sediment.actors.log.shell.group_spec import GroupSpec


def put_mixed(rt: Any, spec: GroupSpec, start: int, n: int, keys: dict[str, int],
              latest: dict[str, Any], cold_every: int = 3) -> None:
    """Cold keys written once among overwrites of one hot key, so segments have holes;
    `cold_every=0` writes only the hot key (whole segments die). Records each key's
    latest index in `keys` and value in `latest`."""
    for i in range(start, start + n):
        key = f"cold{i}" if cold_every and i % cold_every == 0 else "hot"
        keys[key] = propose(rt, spec, KvPut(key, i), timeout=90)[0]  # loaded CI box
        latest[key] = i
