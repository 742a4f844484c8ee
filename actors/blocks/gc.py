"""The block store side of garbage collection: list the entries of the shard
directories that are ours, and remove those the metastore judged garbage
(`orphans.py` decides; this module only touches files).

Entries that `meta.parse_file_name` does not recognise, and directories that are not
`shard-<n>`, are never listed, so never removed.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable
from typing import Final

from sediment.actors.blocks.meta import parse_file_name
from sediment.actors.blocks.orphans import StoreFile
from sediment.actors.log.storage.fsutil import fsync_dir

_SHARD_DIR: Final = re.compile(r"^shard-(0|[1-9][0-9]*)$")


def list_store(root: str) -> list[StoreFile]:
    """Our entries under `root`, by (shard, name); a missing root has none."""
    found: list[StoreFile] = []
    if not os.path.isdir(root):
        return found
    for shard_dir in os.listdir(root):
        m = _SHARD_DIR.match(shard_dir)
        directory = os.path.join(root, shard_dir)
        if m is None or not os.path.isdir(directory):
            continue
        for name in os.listdir(directory):
            parsed = parse_file_name(name)
            if parsed is not None:
                found.append(StoreFile(int(m[1]), parsed[0], parsed[1], name))
    found.sort(key=lambda f: (f.shard, f.name))
    return found


def remove(root: str, files: Iterable[StoreFile]) -> list[StoreFile]:
    """Delete `files` (a scratch directory with its contents); those actually removed
    (one already gone is not). Each touched directory is fsynced once."""
    removed: list[StoreFile] = []
    touched: set[str] = set()
    for f in files:
        directory = os.path.join(root, f"shard-{f.shard}")
        path = os.path.join(directory, f.name)
        try:
            if f.kind == "scratch":
                if not os.path.isdir(path):
                    continue
                shutil.rmtree(path)
            else:
                os.unlink(path)
        except FileNotFoundError:
            continue
        removed.append(f)
        touched.add(directory)
    for directory in sorted(touched):
        fsync_dir(directory)
    return removed


__all__ = ["list_store", "remove"]
