"""Leases in the store (etcd's lessor state, the part every member replicates).

A lease is a row (id, granted TTL, checkpointed remaining TTL); a key is attached to a
lease by the lease number of its latest record row (`records.lease`), so reads at any
revision show the lease the key had then, as etcd's MVCC does. Revoking deletes every
key attached to the lease now, in one revision, and drops the lease in the same SQLite
transaction. When a lease expires is not the store's business: the leader decides it
with its clock and proposes the revoke (`actors/etcd/lessor.py`), as etcd does.

Grant and checkpoint write no revision; they commit `applied` with their change, so an
entry replayed after a restart is not applied twice.
"""

from __future__ import annotations

from sediment.actors.kv import store_txn
from sediment.actors.kv.errors import ErrLeaseExist, ErrLeaseNotFound
from sediment.actors.kv.store import ALL_KEYS, Store
from sediment.actors.kv.types import (
    DeleteRange,
    LeaseGrantResult,
    LeaseInfo,
    LeaseRevokeResult,
)

FIRST_KEY = b"\0"


def _exists(store: Store, lease: int) -> bool:
    return store._db.execute("SELECT 1 FROM leases WHERE id = ?", (lease,)).fetchone() is not None


def _in_txn(store: Store, sql: str, args: tuple[object, ...], applied: int | None) -> None:
    with store.transaction():
        store._db.execute(sql, args)
        if applied is not None:
            store._set_meta("applied", applied)


def grant(store: Store, lease: int, ttl: int, applied: int | None = None) -> LeaseGrantResult:
    if _exists(store, lease):
        raise ErrLeaseExist()
    _in_txn(store, "INSERT INTO leases (id, ttl, remaining) VALUES (?, ?, 0)", (lease, ttl),
            applied)
    return LeaseGrantResult(store.head, lease, ttl)


def attached(store: Store, lease: int) -> list[bytes]:
    """The keys attached to `lease` now (their latest row is a put with that lease)."""
    rows = store._live_rows(FIRST_KEY, ALL_KEYS, store.head)
    return [bytes(r[0]) for r in rows if r[8] == lease]


def revoke(store: Store, lease: int, applied: int | None = None) -> LeaseRevokeResult:
    if not _exists(store, lease):
        raise ErrLeaseNotFound()
    ops = [DeleteRange(key) for key in attached(store, lease)]

    def drop() -> None:
        store._db.execute("DELETE FROM leases WHERE id = ?", (lease,))

    _, header = store_txn.write(store, ops, applied, also=drop)
    return LeaseRevokeResult(header)


def checkpoint(store: Store, items: tuple[tuple[int, int], ...],
               applied: int | None = None) -> None:
    """Record remaining TTLs; a lease that is gone is skipped (etcd's too)."""
    with store.transaction():
        for lease, remaining in items:
            store._db.execute("UPDATE leases SET remaining = ? WHERE id = ?",
                              (max(0, remaining), lease))
        if applied is not None:
            store._set_meta("applied", applied)


def leases(store: Store) -> list[LeaseInfo]:
    return [LeaseInfo(i, t, r) for i, t, r in
            store._db.execute("SELECT id, ttl, remaining FROM leases ORDER BY id")]


def lease(store: Store, lease: int, keys: bool = False) -> LeaseInfo:
    row = store._db.execute("SELECT id, ttl, remaining FROM leases WHERE id = ?",
                            (lease,)).fetchone()
    if row is None:
        raise ErrLeaseNotFound()
    return LeaseInfo(row[0], row[1], row[2], tuple(attached(store, lease)) if keys else ())


def rows(store: Store) -> list[tuple[int, int, int]]:
    """(id, ttl, remaining) of every lease, for snapshots."""
    return [(i, t, r) for i, t, r in
            store._db.execute("SELECT id, ttl, remaining FROM leases ORDER BY id")]


__all__ = ["attached", "checkpoint", "grant", "lease", "leases", "revoke", "rows"]
