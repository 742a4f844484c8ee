"""Shared fixtures: one Ray cluster per test session, a fresh runtime per test.

`rt` is parametrized over both backends; tests that take it run on `sim` (seeded,
virtual time) and on `ray` (real actors). The Ray session is a multi-raylet
`ray.cluster_utils.Cluster` (three Ray nodes on this machine), so logical nodes really
land on distinct Ray nodes. Ray-backed tests carry the `ray` marker: `-m "not ray"`
runs only the fast ones.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
RAY_NODES = 3


def _prepare_ray_env() -> None:
    # Ray workers must import test modules (process functions are pickled by reference).
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    paths = [str(ROOT), str(ROOT / "tests"), *extra]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "error")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    """Three raylets on this machine, started once per session."""
    _prepare_ray_env()
    import logging

    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    for _ in range(RAY_NODES - 1):
        cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, namespace="sediment", logging_level=logging.ERROR,
             log_to_driver=False)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


LEFT_BEHIND_CLASSES = ("HostActor", "Registry")  # a Sediment runtime's (detached) actors


@pytest.fixture(scope="module", autouse=True)
def _no_runtime_left_running() -> Iterator[None]:
    """After each module of a Ray pass: a runtime's actors still alive were left behind
    by a test (they are detached, so a driver that never called `shutdown` leaves them):
    killed, with a warning. One `sediment start` killed mid-test once left 66 hosts
    running (~10 GB, a share of both cores) under every later Ray test."""
    yield
    if "ray" not in sys.modules:
        return
    import ray

    if not ray.is_initialized():
        return
    import warnings

    from ray.util.state import list_actors

    left = [a for a in list_actors(filters=[("state", "=", "ALIVE")], limit=10_000)
            if a.class_name in LEFT_BEHIND_CLASSES and a.name]
    for a in left:
        with contextlib.suppress(ValueError):  # gone meanwhile
            ray.kill(ray.get_actor(a.name, namespace=a.ray_namespace))
    if left:
        warnings.warn(f"{len(left)} runtime actors left running after the module "
                      f"(killed): {sorted(a.name for a in left)[:5]} ...", stacklevel=1)


BACKENDS = ("sim", "ray")
SHARED_HOST = "main"  # the host every process joins on its node in the "-hosted" runtimes


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests taking `rt` run on each backend; a module's RT_BACKENDS may add the
    "-hosted" placements (every process of a node in one shared host). A module with an
    `rt` fixture of its own, or a test marked with a parametrize of `rt`, does it itself."""
    marked = any("rt" in str(m.args[0]).replace(" ", "").split(",")
                 for m in metafunc.definition.iter_markers("parametrize") if m.args)
    if "rt" in metafunc.fixturenames and not hasattr(metafunc.module, "rt") and not marked:
        metafunc.parametrize("rt", getattr(metafunc.module, "RT_BACKENDS", BACKENDS),
                             indirect=True)


@pytest.fixture
def rt(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A runtime with nodes n1..n3 (or a test's `rt_nodes` marker) on each backend; torn
    down after the test. "ray-hosted"
    and "sim-hosted": processes spawned without a host share one host per node."""
    from sediment.runtime import api

    backend, _, placement = str(request.param).partition("-")
    default_host = SHARED_HOST if placement == "hosted" else None
    marker = request.node.get_closest_marker("rt_nodes")
    nodes = tuple(marker.args) if marker else ("n1", "n2", "n3")
    if backend == "ray":
        request.getfixturevalue("ray_cluster")
        # No warm pool here: a fresh cluster per test would pay for idle actors it
        # never uses. The pool has its own test.
        runtime = api.start("ray", nodes=nodes, reap_delay=1.0, warm_pool=0,
                            default_host=default_host)
    else:
        runtime = api.start("sim", seed=request.node.nodeid.__len__(), nodes=nodes,
                            default_host=default_host)
    yield runtime
    runtime.shutdown()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that runs on Ray, so `-m "not ray"` skips them."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        uses_ray = "ray_cluster" in getattr(item, "fixturenames", ())
        if callspec is not None and str(callspec.params.get("rt", "")).startswith("ray"):
            uses_ray = True
        if uses_ray:
            item.add_marker(pytest.mark.ray)
