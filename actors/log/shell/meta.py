"""The raft hard state (term, vote) of one group member, durable before it is used.

Raft requires the term and the vote to be on disk before any message that depends on
them leaves the node. One small file per group, replaced atomically (write, fsync,
rename, fsync the directory).
"""

from __future__ import annotations

import json
import os

from sediment.actors.log.raft.types import HardState
from sediment.actors.log.storage.failpoints import Failpoint, no_fp
from sediment.actors.log.storage.fsutil import fsync_dir, makedirs_durable, write_file_durable

META_FILE = "meta.json"


class MetaStore:
    def __init__(self, directory: str) -> None:
        makedirs_durable(directory)
        self.path = os.path.join(directory, META_FILE)

    def load(self) -> HardState:
        try:
            with open(self.path, encoding="utf-8") as fh:
                data = json.load(fh)
        except FileNotFoundError:
            return HardState()
        return HardState(int(data["term"]), data["voted_for"])

    def save(self, state: HardState, fp: Failpoint = no_fp) -> None:
        body = json.dumps({"term": state.term, "voted_for": state.voted_for}).encode()
        tmp = self.path + ".tmp"
        fp("meta.before_write")
        write_file_durable(tmp, body, sync_dir=False)
        os.replace(tmp, self.path)  # atomic: the old or the new hard state, never half
        fsync_dir(os.path.dirname(self.path))
        fp("meta.after_write")
