"""What the raft-hosted KV machine needs of its store for snapshots and checks: the
revisions and raft indexes still needed (live), the rows without values, etcd's HashKV,
and replacing every table at once (a snapshot restore).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sediment.actors.kv.errors import (
    ErrCompacted,
    ErrFutureRev,
)
from sediment.actors.kv.store_base import _LATER, _ROW_COLS, StoreBase


class SnapshotRows(StoreBase):
    """Live revisions and indexes, skeleton rows, hash, and restore."""

    def live_revisions(self) -> list[int]:
        """Revisions whose data is still needed, sorted: every revision above the compact
        revision, plus, at or below it, each key's last change if it is a put (the value
        a read at the compact revision, or at head, returns). Compacted rows and
        tombstones at or below the compact revision are not needed. This is "each key's
        latest put + everything above the compact revision", made exact for keys deleted
        after the compact revision."""
        rows = self._db.execute(
            "SELECT DISTINCT revision FROM records WHERE revision > :rev "
            "UNION SELECT r.revision FROM records r WHERE r.revision <= :rev AND r.deleted = 0 "
            f"AND NOT EXISTS (SELECT 1 FROM records n WHERE n.key = r.key AND {_LATER} "
            "AND n.revision <= :rev) ORDER BY 1",
            {"rev": self._compact_main},
        ).fetchall()
        return [r[0] for r in rows]

    def live_indexes(self) -> list[int]:
        """The raft indexes of the entries behind `live_revisions` (writes applied with
        an `applied` index; others are not in any log), sorted."""
        live = self.live_revisions()
        index = self.entry_indexes()
        return sorted(index[r] for r in live if r in index)

    def entry_indexes(self) -> dict[int, int]:
        """revision -> the raft index of the entry that wrote it."""
        return dict(self._db.execute("SELECT revision, raft_index FROM entries"))

    def entries(self) -> list[tuple[int, int, str | None]]:
        """(revision, raft index, txn path or None) of every write applied from the log."""
        return list(self._db.execute(
            "SELECT revision, raft_index, path FROM entries ORDER BY revision"))

    def rows(self) -> list[tuple[Any, ...]]:
        """Every record row (for tests and debugging), in change order: (revision, key,
        value, create_revision, mod_revision, version, deleted, compacted_at)."""
        return self._db.execute(
            "SELECT revision, key, value, create_revision, mod_revision, version, deleted,"
            " compacted_at FROM records ORDER BY revision, sub"
        ).fetchall()

    def skeleton(self) -> list[tuple[Any, ...]]:
        """Every record row without its value, by key then change: (revision, sub, key,
        create_revision, mod_revision, version, deleted, compacted_at, lease). A snapshot
        of the raft-hosted machine holds this; values stay in the log."""
        return self._db.execute(
            "SELECT revision, sub, key, create_revision, mod_revision, version, deleted,"
            " compacted_at, lease FROM records ORDER BY key, revision, sub"
        ).fetchall()

    def kept_values(self) -> list[tuple[int, int, bytes]]:
        """(revision, sub, value) of every row not compacted whose value an
        `ignore_value` put kept from the key's previous version, by revision."""
        return self._db.execute(
            "SELECT k.revision, k.sub, r.value FROM kept_values k JOIN records r"
            " ON r.revision = k.revision AND r.sub = k.sub"
            " WHERE r.value IS NOT NULL ORDER BY k.revision, k.sub").fetchall()

    def hash_kv(self, revision: int) -> tuple[int, int, int]:
        """etcd's HashKV: (a CRC-32 of every record at or below `revision`, 0: head, with
        its key, value, revisions and lease; the compact revision; the head). Members that
        applied the same entries answer the same hash once their compaction passes end."""
        import zlib

        at = revision if revision > 0 else self.head
        if at > self.head:
            raise ErrFutureRev()
        if 0 < revision < self.compact_revision:
            raise ErrCompacted(self.compact_revision)
        digest = 0
        for row in self._db.execute(
                "SELECT revision, sub, key, value, create_revision, version, deleted, lease "
                "FROM records WHERE revision <= ? ORDER BY revision, sub", (at,)):
            digest = zlib.crc32(repr(row).encode(), digest)
        return digest, self.compact_revision, self.head

    def replace_all(
        self,
        rows: Iterable[Sequence[Any]],
        compactions: Iterable[tuple[int, bool]],
        meta: Mapping[str, int],
        entries: Iterable[tuple[int, int, str | None]] = (),
        leases: Iterable[tuple[int, int, int]] = (),
        kept: Iterable[tuple[int, int]] = (),
    ) -> None:
        """Replace every table in one transaction (a snapshot restore): nothing changes if
        `rows` ((revision, sub, key, value, create_revision, mod_revision, version,
        deleted, compacted_at, lease); may be a generator) raises. `leases`: (id, ttl,
        remaining) of every lease; `kept`: (revision, sub) of the rows whose value an
        ignore_value put kept."""
        with self.transaction():
            for table in ("records", "compactions", "meta", "entries", "leases",
                          "kept_values"):
                self._db.execute(f"DELETE FROM {table}")
            self._db.executemany(
                f"INSERT INTO records ({_ROW_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows
            )
            self._db.executemany("INSERT INTO leases (id, ttl, remaining) VALUES (?, ?, ?)",
                                 leases)
            self._db.executemany(
                "INSERT INTO compactions (revision, finished) VALUES (?, ?)", compactions
            )
            for name, value in sorted(meta.items()):
                self._set_meta(name, value)
            self._db.executemany(
                "INSERT INTO entries (revision, raft_index, path) VALUES (?, ?, ?)", entries)
            self._db.executemany("INSERT INTO kept_values (revision, sub) VALUES (?, ?)", kept)
        self._load()

    def compactions(self) -> list[tuple[int, bool]]:
        return [
            (r, bool(f))
            for r, f in self._db.execute("SELECT revision, finished FROM compactions ORDER BY 1")
        ]
