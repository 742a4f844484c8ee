"""What a node's block processes need to know: one picklable value in their child specs.

The planning and scheduling config (`MetastoreConfig`) is the metastore machine's; the
service reads its cleanup delay from it, so the leader's sweep and the jobs' cleanup
agree. Every wait and retry here is bounded: timeouts for calls, a number of attempts
with a capped exponential backoff for finding the leader, a limit on waiting polls.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from sediment.actors.blocks.service import MetastoreConfig
from sediment.actors.blocks.shell.executor import Executor, PyarrowExecutor
from sediment.actors.blocks.worker import WorkerConfig


@dataclass(frozen=True)
class BlocksConfig:
    """`nodes`: the metastore group's members (where workers look for the leader);
    `root`: the block store directory every node reads and writes."""

    nodes: tuple[str, ...]
    root: str
    metastore: MetastoreConfig = field(default_factory=MetastoreConfig)
    worker: WorkerConfig = field(default_factory=WorkerConfig)
    workers_per_node: int = 2
    executor: Executor = field(default_factory=PyarrowExecutor)
    tick_interval: float = 0.5  # how often a worker steps its core with the time
    poll_timeout: float = 30.0  # a worker's call to the service (two raft proposals)
    propose_timeout: float = 10.0  # the service's call to its raft member
    lookup_timeout: float = 2.0  # asking a member who leads
    locate_attempts: int = 6  # rounds of looking for the leader's service per poll
    locate_backoff: tuple[float, float] = (0.05, 2.0)  # first and largest pause between rounds
    metadata_timeout: float = 10.0  # a worker's query for its job's source blocks
    max_pending_polls: int = 64  # polls the service keeps waiting; more are told "busy"
    cleanup_interval: float = 30.0  # the leader's sweep of tombstoned and orphan files
    orphan_batch: int = 256  # block store entries one sweep examines for garbage
    recent: int = 64  # outcomes a worker (and deletions the service) keeps for its status

    def __post_init__(self) -> None:
        problem = _problem(self)
        if problem is not None:
            raise ValueError(f"invalid BlocksConfig: {problem}")


def _positive(value: object) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value) and value > 0)


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _problem(config: BlocksConfig) -> str | None:
    """Why `config` is unusable, or None. Its fields are checked as values of any type:
    a config arrives from callers and crosses process boundaries."""
    nodes: object = config.nodes
    if not isinstance(nodes, tuple) or not nodes or not all(
            isinstance(n, str) and n for n in nodes):
        return f"nodes must be a non-empty tuple of node names, got {nodes!r}"
    if len(set(nodes)) != len(nodes):
        return f"nodes must be distinct, got {nodes!r}"
    root: object = config.root
    if not isinstance(root, str) or not root:
        return f"root must be a directory path, got {root!r}"
    parts: dict[str, tuple[object, type]] = {
        "metastore": (config.metastore, MetastoreConfig),
        "worker": (config.worker, WorkerConfig),
    }
    for name, (value, kind) in parts.items():
        if not isinstance(value, kind):
            return f"{name} must be a {kind.__name__}, got {type(value).__name__}"
    executor: object = config.executor
    if not callable(executor):
        return f"executor must be an async callable, got {executor!r}"
    for name in ("tick_interval", "poll_timeout", "propose_timeout", "lookup_timeout",
                 "metadata_timeout", "cleanup_interval"):
        if not _positive(getattr(config, name)):
            return f"{name} must be a positive number of seconds, got {getattr(config, name)!r}"
    for name in ("workers_per_node", "locate_attempts", "max_pending_polls", "recent",
                 "orphan_batch"):
        if not _count(getattr(config, name)):
            return f"{name} must be a positive int, got {getattr(config, name)!r}"
    if config.orphan_batch > config.metastore.max_orphan_candidates:
        return (f"orphan_batch {config.orphan_batch} is above the metastore's "
                f"max_orphan_candidates {config.metastore.max_orphan_candidates}")
    backoff = config.locate_backoff
    if not (isinstance(backoff, tuple) and len(backoff) == 2 and all(map(_positive, backoff))
            and backoff[0] <= backoff[1]):
        return f"locate_backoff must be (first, largest) seconds, got {backoff!r}"
    return None


__all__ = ["BlocksConfig"]
