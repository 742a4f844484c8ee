"""Starting the branch tier's processes: the delete sensor and the staging compactor
under one `rest_for_one` supervisor (the compactor depends on the sensor), registered
by name so writers and callers find them.

Placement: one pair per cluster, on the node given (default: the KV's first node).
The design puts them beside the KV's compaction coordinator, which moves with the
raft leadership (`actors/log/shell/while_leading.py`); following the leader is not
done yet: the pair stays where it was started, and its supervisor restarts it there.
"""

from __future__ import annotations

from typing import Any

from sediment.actors.branches.sensor import SensorConfig
from sediment.actors.branches.shell.compactor import CompactorConfig, compactor_process
from sediment.actors.branches.shell.names import COMPACTOR_NAME, SENSOR_NAME
from sediment.actors.branches.shell.sensor import SensorProcessConfig, sensor_process
from sediment.runtime.pid import Pid
from sediment.supervision import ChildSpec, Spawn, SupFlags, start_top

TOP_NAME = "branches"


def service_children(sensor: SensorConfig, compactor: CompactorConfig,
                     node: str) -> list[ChildSpec]:
    return [
        ChildSpec("sensor", (Spawn(sensor_process, node=node, name=SENSOR_NAME,
                                   label=SENSOR_NAME), (SensorProcessConfig(sensor),))),
        ChildSpec("compactor", (Spawn(compactor_process, node=node, name=COMPACTOR_NAME,
                                      label=COMPACTOR_NAME), (compactor,)), shutdown=30.0),
    ]


def start_branch_services(rt: Any, sensor: SensorConfig, compactor: CompactorConfig,
                          node: str | None = None) -> Pid:
    """Start the sensor and the compactor; the supervisor's pid."""
    where = node or compactor.kv_nodes[0]
    flags = SupFlags(strategy="rest_for_one", intensity=20, period=10)
    return start_top(rt, flags, service_children(sensor, compactor, where), name=TOP_NAME,
                     node=where)


__all__ = ["TOP_NAME", "service_children", "start_branch_services"]
