"""Encoding the KV machine's snapshot, on the raft host's loop or off it.

A snapshot holds every record row without its value (`machine.py` says what and why);
its size grows with the number of rows, and encoding 60,000 of them takes about a
second. On the raft host's event loop that second is a second without heartbeats: a
leader silent for longer than the election timeout is stepped down by CheckQuorum
(found under `etcdctl check perf --load=m`, `benchmarks/README.md`). So the machine
pins the state it snapshots in a read transaction of a second SQLite connection
(`PinnedReader`, WAL mode: the loop keeps writing beside it) and the encoding runs in a
thread. The JSON is built piece by piece (`encode`): one `json.dumps` over megabytes
holds the GIL, and the loop with it, for its whole length.

The bytes are those `json.dumps(doc, separators=(",", ":"), sort_keys=True)` gives
(`tests/test_kv_snapshot_encoding.py`): every member encodes the same state to the
same bytes, and snapshots written before this module read the same.
"""

from __future__ import annotations

import bisect
import json
import threading
from collections.abc import Callable, Sequence
from typing import Any

from sediment.actors.kv import lease_store
from sediment.actors.kv.store import Store

SNAPSHOT_MAGIC = b"netsy-snapshot/2\n"
PIECE = 2000  # list items per json.dumps call: short GIL holds
READER_WAIT = 30.0  # seconds a restore or close waits for a snapshot being read

SnapshotJob = Callable[[], tuple[bytes, list[int]]]


def encode(store: Store, applied: int, auth_json: str | None) -> bytes:
    """The snapshot of `store` (read as it is now), labelled `applied`."""
    compactions = [rev for rev, _ in store.compactions()]
    rows = logical_rows(store.skeleton(), compactions)
    keys = sorted({bytes(r[2]) for r in rows})
    number = {k: i for i, k in enumerate(keys)}
    fields: dict[str, str] = {  # each value already JSON; sorted by name as sort_keys does
        "applied": json.dumps(applied),
        "auth": json.dumps(auth_json),
        "compactions": _list(compactions),
        "entries": _list([[r, i, p] for r, i, p in store.entries()]),
        "head": json.dumps(store.head),
        "keys": _list([k.hex() for k in keys]),
        "leases": _list([list(row) for row in lease_store.rows(store)]),
        "rows": _list([[r[0], r[1], number[bytes(r[2])], *r[3:]] for r in rows]),
    }
    live = {(r[0], r[1]) for r in rows if not r[6] and r[7] is None}
    kept = [[rev, sub, bytes(value).hex()] for rev, sub, value in store.kept_values()
            if (rev, sub) in live]
    if kept:  # values no log entry holds (ignore_value puts); absent, the bytes are as before
        fields["kept"] = _list(kept)
    body = ",".join(f"{json.dumps(name)}:{fields[name]}" for name in sorted(fields))
    return SNAPSHOT_MAGIC + ("{" + body + "}").encode()


def _list(items: Sequence[Any]) -> str:
    """`json.dumps(items, separators=(",", ":"))`, PIECE items per call."""
    pieces = (json.dumps(items[i:i + PIECE], separators=(",", ":"))[1:-1]
              for i in range(0, len(items), PIECE))
    return "[" + ",".join(pieces) + "]"


def logical_rows(skeleton: list[tuple[Any, ...]], compactions: list[int]) -> list[tuple[Any, ...]]:
    """Rows by (revision, sub) with `compacted_at` as if every compaction had finished
    before the next: the first compaction at or above the revision where the row became
    compactable (a tombstone: its own; a put: the next change of its key)."""
    out = []
    for i, (rev, sub, key, create, mod, version, deleted, _, lease) in enumerate(skeleton):
        nxt = skeleton[i + 1] if i + 1 < len(skeleton) else None
        same_key = nxt is not None and nxt[2] == key
        threshold = rev if deleted else (nxt[0] if same_key and nxt is not None else None)
        out.append((rev, sub, bytes(key), create, mod, version, deleted,
                    _first_at_or_above(compactions, threshold), lease))
    out.sort(key=lambda r: (r[0], r[1]))
    return out


def _first_at_or_above(sorted_revs: list[int], threshold: int | None) -> int | None:
    if threshold is None:
        return None
    i = bisect.bisect_left(sorted_revs, threshold)
    return sorted_revs[i] if i < len(sorted_revs) else None


class PinnedReader:
    """A second connection to the machine's file that reads one state while the first
    goes on writing. `pin` (on the writer's thread, right after the state to snapshot
    was committed) opens a read transaction; the job it returns encodes that state from
    any thread, once, and ends the transaction. One pinned state at a time: `wait`
    blocks until the current one is read (a FULL checkpoint cannot finish beside it)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._store: Store | None = None
        self._reading = threading.Lock()

    def pin(self, applied: int, auth_json: str | None) -> SnapshotJob:
        if not self._reading.acquire(timeout=READER_WAIT):
            raise TimeoutError("the previous snapshot is still being read")
        try:
            store = self._open()
            store.begin_read()
        except BaseException:
            self._reading.release()
            raise

        def job() -> tuple[bytes, list[int]]:
            try:
                return encode(store, applied, auth_json), store.live_indexes()
            finally:
                store.end_read()
                self._reading.release()

        return job

    def wait(self) -> None:
        """Until no pinned state is being read (or READER_WAIT passed: go on regardless,
        a checkpoint that cannot finish then fails loudly)."""
        if self._reading.acquire(timeout=READER_WAIT):
            self._reading.release()

    def close(self) -> None:
        self.wait()
        if self._store is not None:
            self._store.close()
            self._store = None

    def _open(self) -> Store:
        if self._store is None:
            self._store = Store(self.path, synchronous="NORMAL", any_thread=True)
        return self._store


__all__ = ["PIECE", "SNAPSHOT_MAGIC", "PinnedReader", "SnapshotJob", "encode", "logical_rows"]
