"""The cluster's one low watermark, by table: only the metastore leader's node proposes
(now less the availability window and the skew), one proposal at a time, never below
the committed value; every node adopts the committed value, never backwards; and the
metastore machine keeps it only forward, across a snapshot."""

from __future__ import annotations

from typing import Any

import pytest

from sediment.actors.catalog import cluster_lwm as cl
from sediment.actors.catalog import low_watermark as lw
from sediment.actors.catalog.errors import InvalidCommand
from sediment.actors.catalog.hlc import hts
from sediment.actors.catalog.machine import Rejected
from sediment.actors.catalog.metastore_machine import (
    AdvanceLowWatermark,
    CatalogMetastore,
    LowWatermarkAdvanced,
    LowWatermarkQuery,
)
from sediment.actors.log.raft.types import Entry

CONFIG = lw.LowWatermarkConfig(data_availability_ms=1000, update_interval_ms=100,
                               max_clock_skew_ms=50)


def run(events: list[cl.Event],
        s: cl.ClusterLwmState | None = None) -> tuple[cl.ClusterLwmState, list[cl.Effect]]:
    s = s or cl.init(CONFIG)
    out: list[cl.Effect] = []
    for e in events:
        s, effects = cl.step(s, e)
        out.extend(effects)
    return s, out


CASES: list[tuple[str, list[cl.Event], list[cl.Effect], Any, Any]] = [
    ("a follower only reads the committed value",
     [cl.Tick(hts(5000), 5000, False)],
     [cl.ReadCommitted(), cl.SetTimer(5100)], None, None),
    ("the leader proposes now - (availability + skew)",
     [cl.Tick(hts(5000), 5000, True)],
     [cl.ReadCommitted(), cl.ProposeLwm(hts(3950)), cl.SetTimer(5100)], None, hts(3950)),
    ("one proposal in flight: the next tick only reads",
     [cl.Tick(hts(5000), 5000, True), cl.Tick(hts(5100), 5100, True)],
     [cl.ReadCommitted(), cl.ProposeLwm(hts(3950)), cl.SetTimer(5100),
      cl.ReadCommitted(), cl.SetTimer(5200)], None, hts(3950)),
    ("the answer is adopted and frees the next proposal",
     [cl.Tick(hts(5000), 5000, True), cl.ProposalDone(hts(3950)),
      cl.Tick(hts(5100), 5100, True)],
     [cl.ReadCommitted(), cl.ProposeLwm(hts(3950)), cl.SetTimer(5100), cl.Adopt(hts(3950)),
      cl.ReadCommitted(), cl.ProposeLwm(hts(4050)), cl.SetTimer(5200)],
     hts(3950), hts(4050)),
    ("a lost proposal is retried at the next tick",
     [cl.Tick(hts(5000), 5000, True), cl.ProposalDone(None), cl.Tick(hts(5100), 5100, True)],
     [cl.ReadCommitted(), cl.ProposeLwm(hts(3950)), cl.SetTimer(5100),
      cl.ReadCommitted(), cl.ProposeLwm(hts(4050)), cl.SetTimer(5200)], None, hts(4050)),
    ("a new leader whose clock lags proposes nothing at or below the committed value",
     [cl.Committed(hts(9000)), cl.Tick(hts(5000), 5000, True)],
     [cl.Adopt(hts(9000)), cl.ReadCommitted(), cl.SetTimer(5100)], hts(9000), None),
    ("a follower adopts each higher committed value once, never a lower one",
     [cl.Committed(hts(100)), cl.Committed(hts(100)), cl.Committed(hts(50)),
      cl.Committed(None), cl.Committed(hts(200))],
     [cl.Adopt(hts(100)), cl.Adopt(hts(200))], hts(200), None),
    ("a proposal answered with a higher value (another leader's) adopts that",
     [cl.Tick(hts(5000), 5000, True), cl.ProposalDone(hts(7000))],
     [cl.ReadCommitted(), cl.ProposeLwm(hts(3950)), cl.SetTimer(5100), cl.Adopt(hts(7000))],
     hts(7000), None),
]


@pytest.mark.parametrize("name,events,effects,committed,in_flight", CASES,
                         ids=[c[0] for c in CASES])
def test_cluster_lwm_step(name: str, events: list[cl.Event], effects: list[cl.Effect],
                          committed: Any, in_flight: Any) -> None:
    s, out = run(events)
    assert out == effects
    assert (s.committed, s.in_flight) == (committed, in_flight)


def test_adopted_values_feed_the_node_core_which_still_waits_above_read_locks() -> None:
    node, _ = lw.step(lw.init(CONFIG), lw.TryLock("ro", hts(150)))
    _, effects = run([cl.Committed(hts(100)), cl.Committed(hts(200))])
    seen = []
    for e in effects:
        assert isinstance(e, cl.Adopt)
        node, out = lw.step(node, lw.Propose(e.lwm))
        seen.extend(out)
    assert seen == [lw.Persist(hts(100)), lw.Changed(hts(100))]  # 200 waits for the lock
    node, out = lw.step(node, lw.Unlock("ro"))
    assert out == [lw.Persist(hts(200)), lw.Changed(hts(200))]


def _apply(m: CatalogMetastore, index: int, command: Any) -> Any:
    return m.apply(Entry(index=index, term=1, timestamp=0.0, command=command))


def test_the_metastore_keeps_the_watermark_only_forward_and_in_its_snapshot() -> None:
    m = CatalogMetastore()
    assert m.query(LowWatermarkQuery()) is None
    assert _apply(m, 1, AdvanceLowWatermark(hts(100))) == LowWatermarkAdvanced(hts(100), True)
    assert _apply(m, 2, AdvanceLowWatermark(hts(90))) == LowWatermarkAdvanced(hts(100), False)
    assert _apply(m, 3, AdvanceLowWatermark(hts(100))) == LowWatermarkAdvanced(hts(100), False)
    bad = _apply(m, 4, AdvanceLowWatermark(100))  # type: ignore[arg-type]
    assert isinstance(bad, Rejected) and isinstance(bad.error, InvalidCommand)
    assert m.query(LowWatermarkQuery()) == hts(100) and m.applied == 4
    data, _ = m.snapshot()
    again = CatalogMetastore()
    again.restore(data, 4, lambda i: None)
    assert again.query(LowWatermarkQuery()) == hts(100)
    assert _apply(again, 5, AdvanceLowWatermark(hts(300))) == LowWatermarkAdvanced(hts(300),
                                                                                  True)
