"""A raft configuration in a snapshot's metadata (the `machine` map of its meta file).

The raft core needs the configuration at a snapshot's index to restart from it and to
send it with an install; the snapshot library stores JSON metadata beside the data, so
the configuration goes there. A snapshot without it (written before configurations were
recorded) is from a group that never changed: the bootstrap configuration.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sediment.actors.log.raft.types import Membership

KEY = "raft_membership"


def to_meta(conf: Membership | None) -> dict[str, Any]:
    """The metadata entry for `conf` (None, the bootstrap configuration: nothing)."""
    if conf is None:
        return {}
    return {KEY: {"voters": list(conf.voters), "learners": list(conf.learners)}}


def from_meta(doc: Mapping[str, Any]) -> Membership | None:
    """The configuration recorded in a snapshot's meta document (`SnapshotInfo.meta`)."""
    machine = doc.get("machine")
    found = machine.get(KEY) if isinstance(machine, Mapping) else None
    if not isinstance(found, Mapping):
        return None
    return Membership(tuple(found["voters"]), tuple(found.get("learners", ())))


__all__ = ["KEY", "from_meta", "to_meta"]
