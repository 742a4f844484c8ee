"""The requests a scenario's clients send, drawn from the seed (etcd robustness traffic).

Pure: `RequestGenerator(seed, client, traffic)` yields the same sequence of requests for
the same seed and client whatever the cluster answers, so a run's traffic is known from
its scenario alone (and a `sim` run replays exactly). Every written value is unique
(`<client>.<n>` padded to the value size): the checkers recognise a write by its value.

Kinds follow the scenario's mix: put, delete (one key), txn (etcd's CompareAndSet: if the
key still holds the value this client last wrote to it, put a new one, else read it),
range (every traffic key) and get (one key). `compact_target` picks a Compact revision
in [last, head + ahead], as etcd's robustness traffic does, so that both ErrCompacted and
ErrFutureRev happen.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from sediment.actors.kv.types import Compare, DeleteRange, Put, Range, Txn
from sediment.scenarios.history import OpKind, Request
from sediment.scenarios.schema import MIX_OPS, Mix, Traffic

KEY_PREFIX = b"k/"
KEYSPACE_END = b"k0"  # [KEY_PREFIX, KEYSPACE_END) holds every traffic key ("/" + 1 = "0")
PAD = b"."


def key_names(keys: int) -> tuple[bytes, ...]:
    """The traffic keys, `k/0`.. (zero-padded so they sort as they count)."""
    if keys < 1:
        raise ValueError(f"keys must be >= 1, got {keys}")
    width = len(str(keys - 1))
    return tuple(KEY_PREFIX + str(i).zfill(width).encode() for i in range(keys))


def value_of(client: int, n: int, size: int) -> bytes:
    """The n-th value client writes: unique, at least `size` bytes."""
    core = b"%d.%d" % (client, n)
    return core + PAD * max(0, size - len(core))


def mix_weights(mix: Mix) -> tuple[tuple[str, ...], tuple[float, ...]]:
    """(kinds, weights) of the kinds with a weight above 0, in MIX_OPS order."""
    pairs = [(k, float(getattr(mix, k))) for k in MIX_OPS if getattr(mix, k) > 0]
    if not pairs:
        raise ValueError("the mix needs a kind with a weight above 0")
    return tuple(k for k, _ in pairs), tuple(w for _, w in pairs)


class RequestGenerator:
    """The request sequence of one client (see the module doc)."""

    def __init__(self, seed: int, client: int, traffic: Traffic) -> None:
        self.client = client
        self.keys = key_names(traffic.keys)
        self.value_size = traffic.value_size
        self.kinds, self.weights = mix_weights(traffic.mix)
        self.rng = random.Random(f"sediment-traffic-{seed}-{client}")
        self.written = 0
        self.last_value: dict[bytes, bytes] = {}  # key -> the last value this client wrote

    def _value(self, key: bytes) -> bytes:
        self.written += 1
        value = value_of(self.client, self.written, self.value_size)
        self.last_value[key] = value
        return value

    def next(self) -> tuple[OpKind, Request]:
        kind = self.rng.choices(self.kinds, self.weights)[0]
        key = self.rng.choice(self.keys)
        if kind == "put":
            return "put", Put(key, self._value(key), prev_kv=self.rng.random() < 0.3)
        if kind == "delete":
            return "delete", DeleteRange(key, prev_kv=self.rng.random() < 0.5)
        if kind == "txn":
            expected = self.last_value.get(key, b"")
            return "txn", Txn((Compare(key, "value", "=", expected),),
                              (Put(key, self._value(key), prev_kv=True),), (Range(key),))
        if kind == "range":
            return "range", Range(KEY_PREFIX, KEYSPACE_END)
        return "get", Range(key)


def compact_target(rng: random.Random, last: int, head: int, ahead: int) -> int:
    """A Compact revision in [max(last, 1), head + ahead] (etcd's robustness traffic)."""
    lo = max(last, 1)
    return rng.randint(lo, max(lo, head + ahead))


def written_values(requests: Sequence[Request]) -> set[tuple[bytes, bytes]]:
    """(key, value) of every put the requests could make."""
    out: set[tuple[bytes, bytes]] = set()
    for r in requests:
        puts = [r] if isinstance(r, Put) else [
            o for o in (*r.success, *r.failure) if isinstance(o, Put)] if isinstance(r, Txn) else []
        out |= {(p.key, p.value) for p in puts}
    return out


__all__ = [
    "KEYSPACE_END",
    "KEY_PREFIX",
    "RequestGenerator",
    "compact_target",
    "key_names",
    "mix_weights",
    "value_of",
    "written_values",
]
