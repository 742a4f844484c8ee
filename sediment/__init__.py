"""Sediment: a distributed, compaction-aware store built as Erlang-style processes on Ray.

The public face:

    from sediment import Cluster              # the KV cluster, driven from Python
    from sediment import TablesCluster        # partitioned tables with a catalog (issue 17)
    from sediment.runtime import start, ...   # processes, for code that runs on the runtime

`Cluster.start(nodes=3, backend="sim" | "ray")` starts a KV cluster (etcd's MVCC
semantics, watches, watch-aware compaction) and `cluster.client()` talks to it; the
request errors a client raises (`KvError` and the etcd ones below) are here too.
`Cluster.start(..., etcd=EtcdWire())` serves etcd's v3 gRPC API on every node, and
`connect("127.0.0.1:2379")` is an etcd-style client over it (or over any etcd). These
names are imported on first use, so `import sediment` stays light (the command line
reads only the version).
"""

from __future__ import annotations

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

try:
    __version__ = version("sediment")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"

# name -> the module that defines it (one place to update when a module moves)
_PUBLIC = {
    "Cluster": "sediment.wiring.cluster",
    "TablesCluster": "sediment.wiring.tables",
    "EtcdWire": "sediment.actors.etcd.shell.server",
    "connect": "sediment.actors.etcd.client",
    "KvError": "sediment.actors.kv.errors",
    "ErrCompacted": "sediment.actors.kv.errors",
    "ErrFutureRev": "sediment.actors.kv.errors",
    "InvalidRequest": "sediment.actors.kv.errors",
}

if TYPE_CHECKING:
    from sediment.actors.etcd.client import connect
    from sediment.actors.etcd.shell.server import EtcdWire
    from sediment.actors.kv.errors import ErrCompacted, ErrFutureRev, InvalidRequest, KvError
    from sediment.wiring.cluster import Cluster
    from sediment.wiring.tables import TablesCluster


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'sediment' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])


__all__ = ["Cluster", "ErrCompacted", "ErrFutureRev", "EtcdWire", "InvalidRequest", "KvError",
           "TablesCluster", "__version__", "connect"]
