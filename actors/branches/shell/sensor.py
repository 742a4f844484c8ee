"""The delete sensor as a process: one per cluster, registered as `SENSOR_NAME`.

Writers report each staged delete with a plain message (`sensor.CountDelete`, sent and
forgotten: a writer never waits on the sensor, and a report to a sensor that is down
is dropped, as lakeFS drops callbacks when its channel is full). The pure core counts
and queues triggers in a bounded queue; on a new trigger the sensor nudges the
compactor (`Work()`), which takes triggers one at a time by calling `Take()`
(`protocol.py`). Status() answers the
counters' sizes and what was queued, dropped and taken. Metric
`branch_sensor_triggers{reason, fate}`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sediment import log
from sediment.actors.branches import metrics
from sediment.actors.branches import sensor as sn
from sediment.actors.branches.shell.names import COMPACTOR_NAME
from sediment.actors.branches.shell.protocol import Work
from sediment.runtime.common_calls import Status, UnknownRequest
from sediment.runtime.core_driver import CoreDriver
from sediment.runtime.messages import Call
from sediment.runtime.process import Process

_logger = log.get_logger("sediment.branches.sensor")


@dataclass(frozen=True)
class SensorProcessConfig:
    sensor: sn.SensorConfig
    compactor: str = COMPACTOR_NAME


SensorDriver = CoreDriver[sn.SensorState, sn.Event, sn.Effect]


async def sensor_process(ctx: Process, config: SensorProcessConfig) -> None:
    """Process entry: the core on the driver; a take is stepped at once and answered
    with the trigger its `Taken` effect carries."""
    driver: SensorDriver = CoreDriver(ctx, sn.step, sn.initial(config.sensor))
    driver.on(sn.Queued, lambda effect: _queued(ctx, config, effect))
    driver.on(sn.Dropped, _dropped)
    driver.ignore(sn.Taken)  # answered by the take's caller below
    taken = 0

    async def to_events(msg: Any) -> list[sn.Event]:
        nonlocal taken
        if isinstance(msg, sn.CountDelete):
            return [msg]
        if isinstance(msg, Call) and isinstance(msg.request, sn.Take):
            (answer,) = await driver.step(sn.Take())
            assert isinstance(answer, sn.Taken)
            taken += answer.trigger is not None
            ctx.reply(msg.from_, answer.trigger)
        elif isinstance(msg, Call) and isinstance(msg.request, Status):
            state = driver.state
            ctx.reply(msg.from_, {"counters": len(state.counters), "queue": len(state.queue),
                                  "queued": state.queued, "dropped": state.dropped,
                                  "taken": taken, "closed": state.closed})
        elif isinstance(msg, Call):
            ctx.reply(msg.from_, UnknownRequest.of(msg.request))
        else:
            _logger.warning("sensor got an unexpected message", message=repr(msg)[:200])
        return []

    await driver.serve(to_events)


async def _queued(ctx: Process, config: SensorProcessConfig, effect: sn.Queued) -> None:
    metrics.SENSOR_TRIGGERS.inc(1, {"reason": effect.trigger.reason, "fate": "queued"})
    compactor = await ctx.whereis(config.compactor)
    if compactor is not None:
        ctx.send(compactor, Work())


def _dropped(effect: sn.Dropped) -> None:
    metrics.SENSOR_TRIGGERS.inc(1, {"reason": effect.trigger.reason, "fate": "dropped"})
    _logger.info("sensor queue full, trigger dropped",
                 repo=effect.trigger.repo, branch=effect.trigger.branch)


__all__ = ["SensorProcessConfig", "sensor_process"]
