"""The block compaction service on real Ray, merges on Spark through RayDP.

The scenarios of `test_blocks_cluster.py` run on sim; here the product path runs for real:
a 3-node metastore group and worker pools as Ray actors, the Spark bridge holding one
Spark-on-Ray session, every L1/L2 block merged by Spark. Checked: reads answer what the
model answers and every row is in exactly one live block, also after a Spark executor is
killed in the middle of the merges and after a worker holding a lease and the metastore
leader are killed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import test_blocks_cluster as tbc

from sediment.actors.blocks.shell.cluster import BlocksCluster
from sediment.actors.spark.session import SparkSettings
from sediment.actors.spark.shell.bridge import BRIDGE_NAME, spark_bridge
from sediment.actors.spark.shell.executor import SparkBridgeExecutor
from sediment.runtime import api
from sediment.runtime.common_calls import Status

pytestmark = pytest.mark.slow


@pytest.fixture
def ray_rt(ray_cluster: Any) -> Iterator[Any]:
    """A runtime of its own per test: each test starts the tier's named processes."""
    runtime = api.start("ray", nodes=(tbc.CONTROL, *tbc.NODES), reap_delay=1.0, warm_pool=0)
    yield runtime
    runtime.shutdown()


@pytest.fixture
def bridge(ray_rt: Any) -> Iterator[Any]:
    """The Spark bridge on the control node; its session starts on the first merge."""
    pid = ray_rt.spawn(spark_bridge, SparkSettings(executor_memory="1g"), node=tbc.CONTROL)
    yield pid
    ray_rt.call(pid, ("stop",), timeout=120)


def _start(rt: Any, tmp_path: Path, executor: Any = None, workers: int = 1) -> BlocksCluster:
    return BlocksCluster.start(tbc.NODES, runtime=rt, data_dir=str(tmp_path),
                               workers_per_node=workers, planner=tbc.PLANNER,
                               scheduler=tbc.SCHEDULER, worker=tbc.WORKER, shards=tbc.SHARDS,
                               top_node=tbc.CONTROL, executor=executor,
                               tuning={"cleanup_interval": 5.0})


def _bridge_status(rt: Any) -> Any:
    return rt.call(BRIDGE_NAME, Status(), timeout=30)


def _executors() -> list[Any]:
    """RayDP's Spark executor actors that are alive."""
    from ray.util.state import list_actors

    return [a for a in list_actors(filters=[("state", "=", "ALIVE")], limit=10_000)
            if "Executor" in (a.class_name or "")]


@pytest.mark.timeout(1200)
def test_history_merged_on_spark_survives_an_executor_kill(
        ray_rt: Any, bridge: Any, tmp_path: Path) -> None:
    import ray

    cluster = _start(ray_rt, tmp_path, SparkBridgeExecutor(timeout=600.0))
    history = tbc.History(tbc.SEED, tbc.ALL_KEYS)
    for _ in range(3):
        cluster.client().add_level0(history.write(10))
    tbc.wait_for(cluster, lambda: _bridge_status(ray_rt).completed >= 1,
                 timeout=600)  # Spark is up and has merged
    executors = _executors()
    assert executors, "RayDP started no executor actor"
    done = _bridge_status(ray_rt).completed
    for _ in range(3):
        cluster.client().add_level0(history.write(10))
    tbc.wait_for(cluster, lambda: _bridge_status(ray_rt).running is not None
                 and _bridge_status(ray_rt).completed > done, timeout=300)  # mid-merge
    victim = executors[0]
    ray.kill(ray.get_actor(victim.name, namespace=victim.ray_namespace))
    # RayDP does not restart the executor: the bridge sees none left, cancels the merge,
    # the job fails and is reassigned, and the next merge runs on a new session
    tbc.wait_for(cluster, lambda: _bridge_status(ray_rt).failed >= 1, timeout=300)
    tbc.wait_for(cluster, lambda: tbc.compacted(cluster), timeout=900)
    assert sorted(tbc.live_rows(cluster), key=lambda r: r.revision) == history.rows
    tbc.assert_reads_match(cluster, history)
    tbc.assert_each_row_once(cluster, history)
    assert _bridge_status(ray_rt).completed >= 2 * tbc.SHARDS  # every L1/L2 block: Spark


def test_a_killed_lease_holder_and_a_late_report_on_ray(ray_rt: Any, tmp_path: Path) -> None:
    tbc.test_a_killed_worker_loses_its_job_and_a_late_stale_report_is_ignored(
        _start(ray_rt, tmp_path, workers=2))


def test_the_metastore_leader_killed_between_prepare_and_apply_on_ray(
        ray_rt: Any, tmp_path: Path) -> None:
    tbc.test_the_metastore_leader_killed_between_prepare_and_apply(
        _start(ray_rt, tmp_path, workers=2))
