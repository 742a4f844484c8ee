"""On sim, the cluster's one low watermark (docs/catalog.md §9 "Low watermark"): with the
nodes' clocks 0, 300 and 600 ms apart, every node holds the value the metastore
committed (all three equal to it at some moment, none ever above it: a node advancing
its own would run ahead of the others), no node's value moves backwards, a new
metastore leader goes on from the committed value after the old one is killed, and a
node restarted with its own file gone takes the committed value from the metastore."""

from __future__ import annotations

import os
from pathlib import Path

from sediment.actors.catalog.hlc import HybridTimestamp
from sediment.wiring.tables import TEST_LWM, TablesCluster


def _lwms(c: TablesCluster) -> dict[str, HybridTimestamp | None]:
    out = {}
    for n in c.nodes:
        status = c.node_status(n)
        out[n] = None if status is None else status["lwm"]
    return out


def test_every_node_follows_the_committed_watermark(tmp_path: Path) -> None:
    offsets = {"n1": 0, "n2": 300, "n3": 600}
    with TablesCluster.start(3, backend="sim", seed=4, data_dir=str(tmp_path),
                             clock_offsets_ms=offsets, lwm=TEST_LWM) as c:
        c.rt.sleep(2.0)
        last: dict[str, HybridTimestamp] = {}
        all_equal = 0
        for _ in range(60):
            seen = _lwms(c)
            committed = c.cluster_lwm()
            assert committed is not None
            for node, value in seen.items():
                assert value is not None and value <= committed, (node, value, committed)
                assert node not in last or last[node] <= value  # never backwards
                last[node] = value
            if len(set(seen.values())) == 1 and seen["n1"] == committed:
                all_equal += 1
            c.rt.sleep(0.05)
        assert all_equal > 0

        before = c.cluster_lwm()
        assert before is not None
        leader = c.leader()
        assert leader is not None
        c.kill_node(leader)
        c.rt.sleep(4.0)
        after = c.cluster_lwm()
        assert after is not None and after > before  # the next leader advanced it
        assert c.leader() is not None

        quiet = next(n for n in c.nodes if n != c.leader())
        c.stop_node(quiet)
        at_stop = c.cluster_lwm()
        assert at_stop is not None
        os.remove(os.path.join(str(tmp_path), quiet, "low_watermark.json"))
        c.rt.sleep(1.0)
        c.restart_node(quiet)
        status = c.node_status(quiet)
        assert status is not None and status["lwm"] is not None
        assert status["lwm"] >= at_stop  # from the metastore, its own file gone
