"""A failpoint armed by process name while that process is restarting (its name free
between its death and its restart's registration) is armed on the restarted process: the
nemesis waits, bounded, for the name (`scenarios/nemesis.py`, `Injector._arm`), and the
fault's record says how long it waited, or that it gave up. On sim, where a restart
seldom lands in that gap, the gap is made here: the process registers its name a while
after it starts."""

from __future__ import annotations

import random
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from runtime_helpers import late_registering

from sediment.runtime import api
from sediment.scenarios import nemesis
from sediment.scenarios.schema import ArmFailpoint, Fault, ProcessTarget

NAME = "late-worker"
POINT = "demo.step"


@pytest.fixture
def sim() -> Iterator[Any]:
    runtime = api.start("sim", seed=3, nodes=("n1",))
    yield runtime
    runtime.shutdown()


def injector(rt: Any) -> nemesis.Injector:
    # the injector's cluster: a runtime and no KV nodes (a named target needs no more)
    cluster = SimpleNamespace(rt=rt, nodes=(), leader=lambda: None, top=None)
    return nemesis.Injector(cluster, random.Random(0), lambda: {})


def arm(rt: Any) -> dict[str, Any]:
    fault = Fault(at=0.0, action=ArmFailpoint(ProcessTarget(name=NAME), POINT, "crash"))
    return injector(rt).apply(0, fault)


def test_a_failpoint_armed_while_its_process_restarts_waits_for_the_name(sim: Any) -> None:
    pid = sim.spawn(late_registering, NAME, POINT, 3.0, node="n1")
    assert sim.whereis(NAME) is None  # the gap: the process runs, its name is free
    detail = arm(sim)
    assert "missed" not in detail, detail
    assert detail["process"] == str(pid) and detail["point"] == POINT
    assert 2.9 <= detail["waited_for_name"] <= nemesis.ARM_NAME_WAIT
    sim.send(pid, "go")  # the armed failpoint fires: the process crashes there
    for _ in range(100):
        if not sim.is_alive(pid):
            break
        sim.sleep(0.1)
    assert not sim.is_alive(pid)


def test_a_name_registered_already_is_armed_at_once_and_the_record_is_unchanged(
        sim: Any) -> None:
    pid = sim.spawn(late_registering, NAME, POINT, 0.0, node="n1")
    sim.sleep(0.1)
    before = sim.now()
    detail = arm(sim)
    assert sim.now() == before  # no wait: a run where the name is there stays the same
    assert detail == {"node": "n1", "process": str(pid), "point": POINT, "then": "crash"}


def test_a_name_that_never_comes_back_is_recorded_as_given_up(sim: Any) -> None:
    sim.spawn(late_registering, NAME, POINT, nemesis.ARM_NAME_WAIT + 5, node="n1")
    detail = arm(sim)
    assert "process" not in detail
    assert detail["missed"] == (f"no process registered as {NAME!r} within "
                                f"{nemesis.ARM_NAME_WAIT:g} s")
