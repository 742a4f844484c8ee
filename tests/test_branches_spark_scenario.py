"""The Spark pieces of the branch scenarios (`scenarios/branch_tier.py`) on `sim`: the
warm-up merge goes through the real bridge process (Spark stood in for by
`LocalSpark`), and the trigger `spark_merge_running` polls the bridge until it runs a
merge, missing at its deadline when none runs. The fault role `spark_executor` kills a
RayDP actor: only on Ray (`test_scenario_branches.py::
test_a_spark_executor_killed_mid_merge_on_ray`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from test_branches_merging import LocalSpark

from sediment.actors.branches.shell.merging import SparkPolicy
from sediment.actors.spark.session import SparkSettings
from sediment.actors.spark.shell.bridge import BRIDGE_NAME, BridgeStatus, run_inline, spark_bridge
from sediment.runtime import api
from sediment.runtime.common_calls import Status
from sediment.runtime.messages import Call
from sediment.runtime.process import Process
from sediment.scenarios import branch_tier as bt
from sediment.scenarios.schema_branches import BranchesSpec, SparkSpec


def test_the_warm_up_merges_on_the_bridge_and_an_idle_bridge_is_no_trigger(
        tmp_path: Path) -> None:
    spark = LocalSpark()

    async def wait(ctx: Process) -> Any:
        return await bt.wait_for_spark_merge(ctx, ctx.now() + 1.0, 0.1)

    with api.start("sim", seed=1, nodes=("n1",)) as rt:
        rt.spawn(spark_bridge, SparkSettings(), lambda _s: spark, lambda: None, 2, run_inline)
        status = rt.run(bt._warm_spark, str(tmp_path), timeout=120)
        assert (status.completed, status.failed) == (1, 0) and len(spark.jobs) == 1
        hit, _, seen = rt.run(wait, timeout=60)
    assert not hit and seen == "the Spark bridge ran no merge"


async def busy_after_two_looks(ctx: Process) -> None:
    """A stand-in bridge: idle for two Status calls, then running a merge."""
    await ctx.register(BRIDGE_NAME)
    looks = 0
    while True:
        msg = await ctx.receive()
        if isinstance(msg, Call) and isinstance(msg.request, Status):
            looks += 1
            ctx.reply(msg.from_, BridgeStatus("running", "merge-1" if looks > 2 else None,
                                              0, 1, 0, 0))


def test_the_trigger_fires_once_the_bridge_runs_a_merge() -> None:
    async def wait(ctx: Process) -> Any:
        return await bt.wait_for_spark_merge(ctx, ctx.now() + 5.0, 0.1)

    with api.start("sim", seed=1, nodes=("n1",)) as rt:
        rt.spawn(busy_after_two_looks)
        hit, _, seen = rt.run(wait, timeout=60)
    assert hit and seen == "the Spark bridge runs merge-1 (completed 1, failed 0)"


def test_the_compactors_policy_is_the_files_spark() -> None:
    assert bt.spark_policy(BranchesSpec()).threshold == SparkPolicy().threshold
    policy = bt.spark_policy(BranchesSpec(spark=SparkSpec(threshold=0, timeout=7.0)))
    assert (policy.threshold, policy.timeout) == (0, 7.0)
