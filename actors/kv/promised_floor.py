"""The admission floor a node has promised the coordinator, kept on disk across restarts.

A confirmed compaction notice is a promise: no watch at or below that revision will be
admitted on this node. The coordinator proposes the Compact as soon as every node has
confirmed, so the promise must outlive a crash of the node, like a raft vote: a node
that forgot it could admit a watch below a compaction already committed or in flight,
and that compaction would then cancel the watch it had just admitted. (Found by the sim
fault history, tests/test_kv_sim_faults.py seed 88: a node restarted between confirming
a notice and applying the Compact, came back with the floor of its last applied
compaction, admitted a watch below the promised revision, and the coordinator's
compaction canceled it.)

The file holds one revision, checksummed, replaced atomically (temporary file, fsync,
rename, fsync of the directory): after a crash it holds the old promise or the new one.
"""

from __future__ import annotations

import os
import struct

from sediment.actors.log.storage import fsutil

FILE = "kv-promised-floor"
_KIND = b"KVPF"
_REVISION = struct.Struct("<Q")


def path(node_dir: str) -> str:
    return os.path.join(node_dir, FILE)


def read(file: str) -> int:
    """The promised floor, 0 when nothing was ever promised. A file that fails its
    checksum raises FrameError: the promise is unknown, so starting would be unsafe."""
    try:
        with open(file, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return 0
    (revision,) = _REVISION.unpack(fsutil.unframe(_KIND, data))
    return int(revision)


def write(file: str, revision: int) -> None:
    """Durably replace the promise (before the confirmation that makes it leaves)."""
    if not isinstance(revision, int) or revision < 0:
        raise ValueError(f"a promised floor is a revision >= 0, got {revision!r}")
    directory = os.path.dirname(os.path.abspath(file))
    fsutil.makedirs_durable(directory)
    temporary = file + ".tmp"
    fsutil.write_file_durable(temporary, fsutil.frame(_KIND, _REVISION.pack(revision)),
                              sync_dir=False)
    os.replace(temporary, file)
    fsutil.fsync_dir(directory)


__all__ = ["FILE", "path", "read", "write"]
