"""One raft group as its processes are started: its id, the logical nodes of its
members, where they keep data, and the knobs of its log (timeouts, snapshots, segments)
and of its state machine. Passed to every member's processes (`server.py`,
`cluster.py`), so it pickles."""

from __future__ import annotations

import os
from dataclasses import dataclass

from sediment.actors.log.raft.state import RaftConfig
from sediment.actors.log.shell.hosted import MachineFactory, ra_kv


@dataclass(frozen=True)
class GroupSpec:
    """One raft group: its id, the logical nodes of its members, where they keep data."""

    group: str
    nodes: tuple[str, ...]
    data_dir: str
    election_timeout: tuple[float, float] = (1.0, 2.0)  # etcd's 1 s, randomized up to 2x
    heartbeat_interval: float = 0.1
    wal_max_size: int = 64 * 1024 * 1024
    snapshot_every: int = 4096  # Ra's min_snapshot_interval
    max_retained: int = 50_000  # entries kept past a snapshot for slow followers
    segment_max_entries: int = 4096  # Ra's segment_max_entries
    num_minors: int = 8  # a major compaction every N minor ones
    machine: MachineFactory = ra_kv  # opens this member's state machine (hosted.py)

    def raft_config(self) -> RaftConfig:
        return RaftConfig(peers=self.nodes, election_timeout=self.election_timeout,
                          heartbeat_interval=self.heartbeat_interval, group=self.group)

    def node_dir(self, node: str) -> str:
        return os.path.join(self.data_dir, node)

    def group_dir(self, node: str) -> str:
        return os.path.join(self.node_dir(node), "groups", self.group)

    def wal_dir(self, node: str) -> str:
        return os.path.join(self.node_dir(node), "wal")


__all__ = ["GroupSpec"]
