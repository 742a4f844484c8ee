"""Pure pieces of the etcd server: its ids, and etcd's gRPC status for each KV error.

Ids: etcd derives a member's id from its peer URLs and the cluster's from the members;
Sediment has logical node names instead, so a member's id is a hash of its node name
and the cluster's a hash of every node name (stable across restarts, as etcd's are).
Errors: the store's typed errors carry etcd's description (`rpctypes.py`); the code is
looked up by that description, so a client matching descriptions (etcd's Go client does)
sees etcd's error. A Sediment error etcd has no description for is INVALID_ARGUMENT with
its own text (a bad request) or UNKNOWN.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from sediment.actors.kv import rpctypes
from sediment.actors.kv.errors import InvalidRequest, KvError

ETCD_VERSION = "3.4.23"  # the etcd API version Sediment serves (what Status reports)


def _id(text: str) -> int:
    """A positive 63-bit id (etcd's are uint64; clients print them in hex)."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 1


def member_id(node: str) -> int:
    return _id(f"sediment-member/{node}")


def cluster_id(nodes: Sequence[str]) -> int:
    return _id("sediment-cluster/" + ",".join(sorted(nodes)))


class EtcdStatus(Exception):
    """An etcd error raised by the server's own code: `name` in `rpctypes`' table."""

    def __init__(self, name: str, detail: str = "") -> None:
        super().__init__(rpctypes.message(name))
        self.name = name
        self.code = rpctypes.code(name)
        self.detail = detail


def status_of(err: BaseException) -> tuple[str, str]:
    """(grpc.StatusCode member name, description) for an error a handler raised."""
    if isinstance(err, EtcdStatus):
        return err.code, str(err)
    text = str(err)
    name = rpctypes.name_of(text)
    if name is not None:
        return rpctypes.code(name), text
    if isinstance(err, InvalidRequest):
        return "INVALID_ARGUMENT", text
    if isinstance(err, KvError):
        return "UNKNOWN", text
    return "UNKNOWN", f"{type(err).__name__}: {text}"[:500]


__all__ = ["ETCD_VERSION", "EtcdStatus", "cluster_id", "member_id", "status_of"]
