"""The schema of a table partition member's SQLite file (`partition.db`,
`actors/tables/partition_machine.py`).

Tables: `meta` (name -> encoded value: the applied index and the partition's state),
`versions` (committed row versions), `intents` (write intents of open transactions),
`txs` (transaction states). Steps are forward only (`migrate.py`); the first is what
every release before versioning created (a no-op on such a file).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sediment.actors.schemas.migrate import FileKind

if TYPE_CHECKING:
    from sqlite_utils import Database


def _tables(db: Database) -> None:
    db.create_table("meta", {"name": str, "value": bytes}, pk="name", if_not_exists=True)
    db.create_table("versions", {"table_id": int, "key": bytes, "seq": int, "commit_ts": int,
                                 "schema_version": int, "row": bytes, "tx_id": str},
                    if_not_exists=True)
    db.create_table("intents", {"table_id": int, "key": bytes, "tx_id": str,
                                "commit_zone": int, "commit_partition": int,
                                "begin_ts": int, "schema_version": int,
                                "catalog_version": int, "row": bytes},
                    if_not_exists=True)
    db.create_table("txs", {"tx_id": str, "status": str, "commit_ts": int, "enlisted": bytes},
                    pk="tx_id", if_not_exists=True)


PARTITION_FILE = FileKind("partition", (("partition_tables", _tables),))

__all__ = ["PARTITION_FILE"]
