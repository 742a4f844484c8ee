"""Helpers for the branch tier's tests: a tier over one KV Store (no raft), and a
stepper that runs several flows concurrently, interleaved at every KV request.

`SteppedKv` suspends a flow before each KV request; `Flows` advances the flow a test
picks by one request, or kills it (the request it was about to make never happens,
as when its process dies). The KV underneath is the real `Store`, so every race the
interleavings produce is a real SetIf race.
"""

from __future__ import annotations

import tempfile
from collections.abc import Coroutine, Generator
from dataclasses import dataclass, field
from typing import Any

from sediment.actors.branches.api import Branches
from sediment.actors.branches.apply import SplitRule
from sediment.actors.branches.history import History
from sediment.actors.branches.metarange import MetaRangeStore
from sediment.actors.branches.ports import KvPort, StoreKv, SyncEnv
from sediment.actors.branches.tier import Tier, TierConfig
from sediment.actors.kv.store import Store
from sediment.actors.kv.types import Range, RangeResult, Txn, TxnResult

SMALL_RANGES = SplitRule(min_entries=2, max_entries=8, raggedness=3)


class _Pause:
    def __await__(self) -> Generator[str, None, None]:
        yield "kv"


class SteppedKv:
    """A KvPort that pauses before every request."""

    def __init__(self, kv: KvPort) -> None:
        self.kv = kv

    async def range(self, request: Range) -> RangeResult:
        await _Pause()
        return await self.kv.range(request)

    async def txn(self, request: Txn) -> TxnResult:
        await _Pause()
        return await self.kv.txn(request)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@dataclass
class Lake:
    """One KV store, a block store directory, a clock, a history; `api` runs flows
    to completion, `stepped` is a tier whose flows pause at each KV request."""

    root: str
    store: Store
    clock: Clock
    history: History
    api: Branches
    stepped: Tier

    def close(self) -> None:
        self.store.close()


def make_lake(rule: SplitRule = SMALL_RANGES, config: TierConfig | None = None,
              seed: int = 0, root: str | None = None) -> Lake:
    root = root or tempfile.mkdtemp(prefix="sediment-branches-")
    store = Store(f"{root}/kv.db", synchronous="OFF")
    clock = Clock()
    history = History()
    blocks = MetaRangeStore(f"{root}/blocks", rule)
    env = SyncEnv(clock=clock, sleeper=clock.advance, seed=seed)
    config = config or TierConfig(compaction_interval=60.0)
    api = Branches.over(StoreKv(store), env, blocks, config, history)
    stepped = Tier(SteppedKv(StoreKv(store)), env, blocks, config, history)
    return Lake(root, store, clock, history, api, stepped)


@dataclass
class Flow:
    label: str
    coro: Coroutine[Any, Any, Any]
    done: bool = False
    result: Any = None
    error: BaseException | None = None


@dataclass
class Flows:
    """Concurrent flows, advanced one KV request at a time."""

    running: list[Flow] = field(default_factory=list)
    finished: list[Flow] = field(default_factory=list)

    def start(self, label: str, coro: Coroutine[Any, Any, Any]) -> Flow:
        flow = Flow(label, coro)
        self.running.append(flow)
        self.step(flow)  # run to its first request
        return flow

    def step(self, flow: Flow) -> None:
        try:
            flow.coro.send(None)
        except StopIteration as stop:
            flow.done, flow.result = True, stop.value
        except Exception as err:  # the flow's own typed error
            flow.done, flow.error = True, err
        if flow.done:
            self.running.remove(flow)
            self.finished.append(flow)

    def kill(self, flow: Flow) -> None:
        flow.coro.close()
        self.running.remove(flow)

    def drain(self, max_steps: int = 100_000) -> None:
        for _ in range(max_steps):
            if not self.running:
                return
            self.step(self.running[0])
        raise AssertionError("flows did not finish")


__all__ = ["SMALL_RANGES", "Clock", "Flow", "Flows", "Lake", "SteppedKv", "make_lake"]
