"""Raft entries <-> stored records.

The core's entries carry any picklable command and a float timestamp (seconds); the
storage layer stores bytes and an integer timestamp. Microseconds keep the leader's
append time exact enough for leases.
"""

from __future__ import annotations

import pickle

from sediment.actors.log.raft.types import Entry
from sediment.actors.log.storage.records import Entry as Stored


def to_stored(entry: Entry) -> Stored:
    return Stored(entry.index, entry.term, int(entry.timestamp * 1_000_000),
                  pickle.dumps(entry.command, protocol=5))


def from_stored(stored: Stored) -> Entry:
    return Entry(stored.index, stored.term, stored.timestamp / 1_000_000,
                 pickle.loads(stored.payload))
