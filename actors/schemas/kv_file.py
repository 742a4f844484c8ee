"""The schema of a KV member's SQLite file (`kv.sqlite`, `actors/kv/store.py`).

Tables (what each row means is in `store.py`'s docstring):
- `records`: one row per change of a key, etcd's (revision, sub) numbering;
- `compactions`: every scheduled compaction revision and whether its pass finished;
- `meta`: `head`, and `applied` (the raft index the file has applied);
- `entries`: the raft entry (and txn path) behind each revision;
- `leases`: every granted lease (id, ttl, remaining);
- `auth`: the auth store's state, one JSON row (`actors/kv/auth_machine.py`);
- `kept_values`: the (revision, sub) of every row whose value an `ignore_value` put kept
  from the key's previous version (its log entry holds no value, so a snapshot carries
  the value itself: `actors/kv/snapshot_encoding.py`).

Steps (forward only, `migrate.py`): the first three are what every release before
versioning created (each a no-op on a file that already has it), in the order the
tables appeared: `records` gained `lease` after it shipped, `auth` came next, then
`kept_values` (a file of an earlier release has none recorded: its ignore_value rows
still restore as their entries say, b"").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sediment.actors.schemas.migrate import FileKind

if TYPE_CHECKING:
    from sqlite_utils import Database


def _tables(db: Database) -> None:
    db.create_table(
        "records",
        {"revision": int, "sub": int, "key": bytes, "value": bytes, "create_revision": int,
         "mod_revision": int, "version": int, "deleted": int, "compacted_at": int,
         "lease": int},
        pk=("key", "revision", "sub"),
        not_null={"revision", "sub", "key", "create_revision", "mod_revision", "version",
                  "deleted", "lease"},
        defaults={"sub": 0, "deleted": 0, "lease": 0},
        if_not_exists=True,
    )
    db.table("records").create_index(["revision", "sub"], index_name="records_by_revision",
                               if_not_exists=True)
    db.create_table("compactions", {"revision": int, "finished": int}, pk="revision",
                    not_null={"finished"}, defaults={"finished": 0}, if_not_exists=True)
    db.create_table("meta", {"name": str, "value": int}, pk="name", not_null={"value"},
                    if_not_exists=True)
    db.create_table("entries", {"revision": int, "raft_index": int, "path": str},
                    pk="revision", not_null={"raft_index"}, if_not_exists=True)
    db.create_table("leases", {"id": int, "ttl": int, "remaining": int}, pk="id",
                    not_null={"ttl", "remaining"}, defaults={"remaining": 0},
                    if_not_exists=True)


def _records_lease(db: Database) -> None:
    """Files written before leases have `records` without its `lease` column."""
    if "lease" not in db.table("records").columns_dict:
        db.execute("ALTER TABLE records ADD COLUMN lease INTEGER NOT NULL DEFAULT 0")


def _auth(db: Database) -> None:
    db.create_table("auth", {"id": int, "doc": str}, pk="id", if_not_exists=True)


def _kept_values(db: Database) -> None:
    db.create_table("kept_values", {"revision": int, "sub": int}, pk=("revision", "sub"),
                    not_null={"revision", "sub"}, if_not_exists=True)


KV_FILE = FileKind("kv", (
    ("kv_tables", _tables),
    ("kv_records_lease", _records_lease),
    ("kv_auth", _auth),
    ("kv_kept_values", _kept_values),
))

__all__ = ["KV_FILE"]
