"""`when: {failpoint_fired: j}`: a fault armed once an earlier fault's failpoint fired,
on the process's restart, not on the process that failpoint is taking down
(`branch-compactor-killed-at-each-step` on Ray armed step 3's failpoint on the compactor
step 2's crash then killed, so step 3's never fired).

The schema reads, refuses and round-trips the form; the injector, told which process the
earlier failpoint fired in (`avoid`), waits for the name to be registered by another
process before it arms."""

from __future__ import annotations

import random
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from runtime_helpers import late_registering

from sediment.runtime import api
from sediment.runtime.process import Process
from sediment.scenarios import nemesis, schema
from sediment.scenarios.schema import ArmFailpoint, Fault, ProcessTarget, When

NAME, POINT = "restarting-worker", "demo.step"

DOC = """
name: fired
duration: 6
cluster: {{nodes: 3, branches: {{}}}}
faults:
  - {{at: 1, failpoint: {{name: branches-compactor, point: branches.compactor.after_step2}}}}
  - {{at: 1.5, {second}, failpoint: {{name: branches-compactor,
                                     point: branches.compactor.after_step3}}}}
"""


def test_the_form_reads_and_round_trips() -> None:
    s = schema.loads(DOC.format(second="when: {failpoint_fired: 0, within: 3}"), "f.yaml")
    assert s.faults[1].when == When("failpoint_fired", 3.0, fired=0)
    assert schema.load_dict(s.to_dict()) == s
    bare = schema.loads(DOC.format(second="when: {failpoint_fired: 0}"), "f.yaml")
    assert bare.faults[1].when == When("failpoint_fired", None, fired=0)
    assert schema.load_dict(bare.to_dict()) == bare


@pytest.mark.parametrize("second, message", [
    ("when: {failpoint_fired: 1}", "must name an earlier fault that arms a failpoint, got 1"),
    ("when: {failpoint_fired: 0, within: 9}", "the window must end by duration"),
    ("when: {failpoint_fired: x}", "failpoint_fired"),
    ("when: {failpoint_fired: 0, trigger: notice}", "unknown key"),
])
def test_bad_forms_are_refused(second: str, message: str) -> None:
    with pytest.raises(schema.ScenarioError) as err:
        schema.loads(DOC.format(second=second), "f.yaml")
    assert message in str(err.value)


@pytest.fixture
def sim() -> Iterator[Any]:
    runtime = api.start("sim", seed=5, nodes=("n1",))
    yield runtime
    runtime.shutdown()


def _arm(rt: Any, avoid: Any) -> dict[str, Any]:
    cluster = SimpleNamespace(rt=rt, nodes=(), leader=lambda: None, top=None)
    injector = nemesis.Injector(cluster, random.Random(0), lambda: {})
    fault = Fault(at=0.0, action=ArmFailpoint(ProcessTarget(name=NAME), POINT, "crash"))
    return injector.apply(0, fault, avoid=avoid)


def test_the_failpoint_lands_on_the_restart_not_on_the_dying_process(sim: Any) -> None:
    dying = sim.spawn(late_registering, NAME, POINT, 0.0, node="n1")
    sim.sleep(0.1)
    assert sim.whereis(NAME) == dying  # the fired-in process still holds the name

    async def restart(ctx: Process) -> None:  # it dies 1 s on; its restart registers
        await ctx.sleep(1.0)
        sim_kill(dying)

    sim_kill = sim.kill
    sim.spawn(restart, node="n1")
    later = sim.spawn(late_registering, NAME, POINT, 2.0, node="n1")
    detail = _arm(sim, dying)
    assert detail["process"] == str(later), detail
    assert detail["waited_for_name"] >= 1.9
    unchanged = _arm(sim, None)  # without `avoid`: the holder now, at once
    assert unchanged["process"] == str(later) and "waited_for_name" not in unchanged
