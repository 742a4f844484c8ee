"""A seeded client workload for the tables cluster scenarios: transactions on random
nodes (some left open a while), DDL that adds versions, read-only reads; calls to a
node that is down count as abandoned (their outcome is whatever recovery decides)."""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sediment.actors.catalog.errors import CatalogError
from sediment.actors.catalog.low_watermark import LowWatermarkConfig
from sediment.actors.tables.errors import ReadBelowLowWatermark, UnknownTransaction
from sediment.actors.tables.shell.node_protocol import TxAlive
from sediment.runtime.errors import CallError
from sediment.scenarios.checkers.catalog_compaction import atomic_visibility, compaction_safety
from sediment.wiring.tables import TablesCluster, Transaction

COLUMNS = [("k", "int", False), ("v", "int")]


def seeds(default: int) -> list[int]:
    """`SEDIMENT_CATALOG_SEEDS=200` runs the scenarios over more seeds."""
    return list(range(int(os.environ.get("SEDIMENT_CATALOG_SEEDS", default))))


def setup(c: TablesCluster) -> None:
    c.create_zone("Z", partitions=4, replicas=2)
    c.create_table("T", "Z", COLUMNS, ["k"])


@dataclass
class Workload:
    c: TablesCluster
    rng: random.Random
    open: list[Transaction] = field(default_factory=list)
    ddl_count: int = 0
    committed: int = 0

    def step(self) -> None:
        c, rng = self.c, self.rng
        r = rng.random()
        try:
            if r < 0.2 and len(self.open) < 3:
                self.open.append(c.begin(rng.choice(c.nodes)))
            elif r < 0.5 and self.open:
                tx = rng.choice(self.open)
                with contextlib.suppress(CatalogError):  # a conflict: it aborts at its end
                    tx.insert("T", {"k": rng.randrange(8), "v": rng.randrange(100)})
            elif r < 0.65 and self.open:
                tx = self.open.pop(rng.randrange(len(self.open)))
                if rng.random() < 0.8:
                    self.committed += tx.commit()
                else:
                    tx.rollback()
            elif r < 0.75:
                self.ddl_count += 1
                c.add_column("T", (f"c{self.ddl_count}_{rng.randrange(1000)}", "int"))
            elif r < 0.85:
                self.read()
            else:
                c.rt.sleep(rng.uniform(0.05, 0.3))
        except (CallError, UnknownTransaction):
            # the node is down or restarted: its open transactions are abandoned to
            # recovery (their outcome stays unknown in the history)
            self.open = [t for t in self.open if self._alive(t)]

    def _alive(self, tx: Transaction) -> bool:
        try:
            return bool(self.c.call(tx.node, TxAlive(tx.id)))
        except CallError:
            return False

    def read(self) -> None:
        """A read-only read below every open transaction's begin time (one above would
        wait for them, and only this driver ends them: docs/catalog.md rule 5)."""
        c, rng = self.c, self.rng
        ts = min((t.begin_ts for t in self.open), default=None)
        with contextlib.suppress(ReadBelowLowWatermark):
            c.get("T", (rng.randrange(8),), ts=None if ts is None else ts.subtract_physical(1),
                  node=rng.choice(c.nodes))

    def run(self, steps: int) -> None:
        for _ in range(steps):
            self.step()

    def finish(self) -> None:
        """End every open transaction (commit), whatever its node's state."""
        for tx in self.open:
            with contextlib.suppress(CallError, CatalogError):
                tx.commit()
        self.open = []


def assert_checks_pass(c: TablesCluster) -> None:
    c.poll()
    history = c.recorder.history()
    if any(t.outcome == "committed" and t.writes for t in history.txs):
        # the partitions' replay floors were recorded, so the replay rule was checked
        assert any(p.kind == "replay" for p in history.pins), "no replay pins recorded"
    for check in (compaction_safety, atomic_visibility):
        result = check(history)
        assert result.ok, result.report()


# ---- a small cluster for index tests ------------------------------------------------

INDEX_LWM = LowWatermarkConfig(data_availability_ms=30_000, update_interval_ms=300,
                               max_clock_skew_ms=10)
AB_COLUMNS: list[tuple[str, ...]] = [("k", "int", False), ("a", "int"), ("b", "str")]


@contextlib.contextmanager
def sim_tables(tmp_path: Path, seed: int, columns: Sequence[Sequence[Any]] = AB_COLUMNS,
               ) -> Iterator[TablesCluster]:
    """Three nodes on sim; zone Z (4 partitions, 2 replicas) and its table T."""
    with TablesCluster.start(nodes=3, backend="sim", data_dir=str(tmp_path), seed=seed,
                             lwm=INDEX_LWM) as c:
        c.create_zone("Z", partitions=4, replicas=2)
        c.create_table("T", "Z", columns, ["k"])
        yield c


def upsert_ab(c: TablesCluster, node: str, *rows: tuple[int, int | None, str | None]) -> None:
    """Commit rows (k, a, b) of T in one transaction."""
    tx = c.begin(node)
    for k, a, b in rows:
        tx.insert("T", {"k": k, "a": a, "b": b})
    assert tx.commit()


def ks(rows: list[dict[str, Any]]) -> list[int]:
    """The rows' keys, in the order given."""
    return [r["k"] for r in rows]


__all__ = ["AB_COLUMNS", "COLUMNS", "INDEX_LWM", "Workload", "assert_checks_pass", "ks",
           "seeds", "setup", "sim_tables", "upsert_ab"]
