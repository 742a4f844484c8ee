"""Every SQLite file a node writes, its schema in one place per file kind.

`migrate.py` runs a kind's forward-only steps (sqlite-utils' version table);
`kv_file.py` is a KV member's `kv.sqlite`, `partition_file.py` a table partition's
`partition.db`. `FILES` maps a file name to its kind (what `sediment inspect` reads).
The raft log (`actors/log/storage/`), blocks and branches keep no SQLite files.
"""

from __future__ import annotations

from sediment.actors.schemas.kv_file import KV_FILE
from sediment.actors.schemas.migrate import (
    FileKind,
    SchemaError,
    SchemaTooNew,
    migrate,
    version_of,
)
from sediment.actors.schemas.partition_file import PARTITION_FILE

FILES: dict[str, FileKind] = {"kv.sqlite": KV_FILE, "partition.db": PARTITION_FILE}

__all__ = ["FILES", "KV_FILE", "PARTITION_FILE", "FileKind", "SchemaError", "SchemaTooNew",
           "migrate", "version_of"]
