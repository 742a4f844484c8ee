"""What the branch tier's flows need from the outside, and adapters for it.

The flows (`refs`, `staging`, `reads`, `commits`, `compactor`) are coroutines over two
ports, so one code path serves both callers:
- `KvPort`: etcd's Range and Txn on the replicated KV. `ClientKv` adapts the KV
  cluster's `Client` (public methods only) for the Python API; `EtcdKv` adapts the
  etcd v3 client (`sediment.connect`) for writers outside the runtime (the command line
  against a running `sediment start`); the processes use the
  in-runtime adapter in `shell/kv_process.py`; `StoreKv` adapts a bare `Store` (one
  SQLite file, no raft) for fast tests of the flows.
- `Env`: the clock, sleeping, fresh staging tokens, jitter for back-offs, and running
  blocking file work (range merges) off an event loop when there is one.

`run_sync` drives a flow to completion without an event loop: with a synchronous KV
port and `SyncEnv` nothing in a flow really suspends, so the coroutine finishes on its
first `send` (a flow that awaits something that needs a loop is a bug and raises).

Revisions: the flows compare a key's mod revision only with a value they read, and
pin snapshot reads at the header revision a read returned; they never assume how the
KV numbers revisions.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, TypeVar

from sediment.actors.kv.types import Range, RangeResult, Txn, TxnResult

T = TypeVar("T")


class KvPort(Protocol):
    async def range(self, request: Range) -> RangeResult: ...

    async def txn(self, request: Txn) -> TxnResult: ...


class Env(Protocol):
    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...

    def new_token(self) -> str: ...

    def jitter(self) -> float: ...

    async def blocking(self, fn: Callable[..., T], *args: Any) -> T: ...


class ClientKv:
    """A `KvPort` over the KV cluster's synchronous `Client` (sediment/wiring/client.py)."""

    def __init__(self, client: Any) -> None:
        self.client = client

    async def range(self, request: Range) -> RangeResult:
        return self.client.range(  # type: ignore[no-any-return]
            request.key, request.range_end, revision=request.revision, limit=request.limit,
            count_only=request.count_only, keys_only=request.keys_only)

    async def txn(self, request: Txn) -> TxnResult:
        return self.client.txn(request.compare, request.success,  # type: ignore[no-any-return]
                               request.failure)


class EtcdKv(ClientKv):
    """A `KvPort` over etcd's v3 gRPC API (`actors/etcd/client.py`: Sediment's etcd
    endpoints, or any etcd). Reads are linearizable (etcd's default); a txn's Ranges
    pinned at a revision travel as etcd RequestOps. Errors are the KV's typed ones
    (ErrCompacted makes a pinned read start over, as over the native client). Only the
    read's name differs from the native client's (`get`); the txn is the same call."""

    async def range(self, request: Range) -> RangeResult:
        return self.client.get(  # type: ignore[no-any-return]
            request.key, request.range_end, revision=request.revision, limit=request.limit,
            count_only=request.count_only, keys_only=request.keys_only)


class StoreKv:
    """A `KvPort` over one `Store` (tests of the flows without raft)."""

    def __init__(self, store: Any) -> None:
        self.store = store

    async def range(self, request: Range) -> RangeResult:
        return self.store.range(  # type: ignore[no-any-return]
            request.key, request.range_end, request.revision, request.limit,
            request.count_only, request.keys_only)

    async def txn(self, request: Txn) -> TxnResult:
        return self.store.txn(request.compare, request.success,  # type: ignore[no-any-return]
                              request.failure)


class SyncEnv:
    """An `Env` for flows driven by `run_sync`: `clock` and `sleeper` default to the
    wall clock (the Python API passes the runtime's, virtual on sim); tokens and
    jitter come from `seed` when given (deterministic tests), else from uuid4.

    Staging tokens must never repeat: seeded clients of one cluster must differ in
    `seed` or in `client` (the generator is seeded with both; processes mix in their
    pid instead, `shell/process_env.py`)."""

    def __init__(self, clock: Callable[[], float] = time.time,
                 sleeper: Callable[[float], None] = time.sleep, seed: int | None = None,
                 client: str = "driver") -> None:
        self._clock = clock
        self._sleeper = sleeper
        self._rng = random.Random(f"{seed}/{client}") if seed is not None else None

    def now(self) -> float:
        return self._clock()

    async def sleep(self, seconds: float) -> None:
        self._sleeper(seconds)

    def new_token(self) -> str:
        if self._rng is not None:
            return f"{self._rng.getrandbits(128):032x}"
        return uuid.uuid4().hex

    def jitter(self) -> float:
        return self._rng.random() if self._rng is not None else random.random()

    async def blocking(self, fn: Callable[..., T], *args: Any) -> T:
        return fn(*args)


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """The result of a coroutine that never really suspends."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError("a branch flow awaited something that needs an event loop")


__all__ = ["ClientKv", "Env", "EtcdKv", "KvPort", "StoreKv", "SyncEnv", "run_sync"]
