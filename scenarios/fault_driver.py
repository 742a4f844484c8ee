"""A scenario run's faults as they happen: each step of the nemesis's plan applied at its
time or, for a fault with `when`, at its protocol moment, and recorded as a FaultEvent.

A moment with a breakpoint (`holds.py`) is waited for by the run's trigger waiter: the
breakpoint is armed everywhere, the first process to reach it stays there while the
fault lands, then goes on. A tier state is polled instead. At the end the failpoints the
nemesis armed are marked with when and where they fired (their hits, which the run's
recorder heard). A fault `when: {failpoint_fired: j}` polls those hits until faults[j]'s
is among them, then is applied (a failpoint on a process that hit fired in waits for
the process's restart: armed on the dying one it would be lost).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sediment import log
from sediment.runtime.api import Runtime
from sediment.runtime.errors import RuntimeErrorBase
from sediment.runtime.failpoints import FailpointHit
from sediment.runtime.pid import Pid
from sediment.scenarios import holds, nemesis, trigger_waiter
from sediment.scenarios import recorder_protocol as rp
from sediment.scenarios import run_protocol as rn
from sediment.scenarios.history import FaultEvent
from sediment.scenarios.schema import Fault
from sediment.scenarios.schema_blocks import TIER_TRIGGERS
from sediment.scenarios.schema_branches import SPARK_TRIGGER

_logger = log.get_logger("sediment.scenarios.runner")

FIRED_POLL = 0.05  # seconds between looks at the failpoints that fired
LEADER_WAIT = 3.0  # seconds a leader target waits for an election (a loaded Ray's included)

ReportFn = Callable[[str, float, str], None]


class FaultDriver:
    """Applies a run's fault steps; `faults` and `notes` are the run's own lists. `waiter`
    is the run's trigger waiter (started when the scenario has faults)."""

    def __init__(self, rt: Runtime, nodes: tuple[str, ...], duration: float,
                 trigger_interval: float, waiter: Pid | None, recorder: Pid, t0: float,
                 report: ReportFn, faults: list[FaultEvent], notes: list[str]) -> None:
        self.rt, self.nodes, self.duration = rt, nodes, duration
        self.trigger_interval = trigger_interval
        self.waiter, self.recorder, self.t0 = waiter, recorder, t0
        self.report, self.faults, self.notes = report, faults, notes

    def _now(self) -> float:
        return float(self.rt.now()) - self.t0

    def leader_now(self) -> str | None:
        """The KV leader, asked of every member at once (by the trigger waiter); while
        none leads (an election after a kill), for up to LEADER_WAIT."""
        assert self.waiter is not None
        try:
            answer = self.rt.call(self.waiter, rn.FindLeader(self.nodes, LEADER_WAIT),
                                  timeout=30)
        except RuntimeErrorBase:
            return None
        return answer if isinstance(answer, str) else None

    def apply(self, injector: nemesis.Injector, step: nemesis.Step, fault: Fault) -> None:
        """Apply (or undo) one step of the plan, at its moment if it has a trigger, and
        record it."""
        detail: dict[str, Any] = {"fault": step.fault}
        if step.undo:
            detail.update(injector.undo(step.fault, fault), phase="end")
        elif fault.when is None:
            detail.update(injector.apply(step.fault, fault), phase="start",
                          ranged=fault.until is not None)
        elif fault.when.fired is not None:
            hit = self._wait_fired(fault, fault.when.fired)
            detail.update(trigger=fault.when.trigger, hit=hit is not None,
                          seen=f"faults[{fault.when.fired}] fired in {hit.pid}" if hit else
                          f"faults[{fault.when.fired}] did not fire")
            detail.update(injector.apply(step.fault, fault, avoid=hit.pid if hit else None),
                          phase="start", ranged=fault.until is not None)
        else:
            hold = holds.hold_of(fault.when.trigger)
            moment = self._wait_for(step.fault, fault)  # held there until released here
            detail.update(trigger=fault.when.trigger, hit=moment.hit, seen=moment.seen)
            held = (hold.holder, moment.held) if hold and moment.held else None
            # the leader as the wait saw it (or held it): no second look (seconds on Ray)
            leader = moment.leader if hold is None or hold.on_leader() else None
            try:
                detail.update(injector.apply(step.fault, fault, leader, held),
                              phase="start", ranged=fault.until is not None)
            finally:
                if hold is not None and held is not None:  # landed: the held one goes on
                    self.rt.release_failpoint_everywhere(hold.point)
            if held is not None:
                detail["held_at"] = round(moment.t - self.t0, 6)
        event = FaultEvent(self._now(), fault.name, detail)
        self.faults.append(event)
        self.report("fault", event.t, f"{fault.name} {'end' if step.undo else 'start'}")
        _logger.info("fault", action=fault.name, t=round(event.t, 3), **{
            k: v for k, v in detail.items() if k in ("node", "process", "phase", "trigger")})

    def record_fired(self, injector: nemesis.Injector) -> None:
        """Mark each armed failpoint's fault with when and where it fired (its first hit,
        which the process sent the recorder before acting), and note the crash ones that
        never did."""
        fired = self.rt.call(self.recorder, rp.FiredFailpoints(), timeout=30)
        self.notes += injector.unfired(fired)
        for k, event in enumerate(self.faults):
            hit = fired.get(nemesis.fired_tag(int(str(event.detail.get("fault", -1)))))
            if hit is not None and event.detail.get("phase") == "start":
                self.faults[k] = FaultEvent(event.t, event.action, {
                    **event.detail, "fired_at": round(float(hit.t) - self.t0, 6),
                    "fired_in": str(hit.pid)})

    def _wait_fired(self, fault: Fault, j: int) -> FailpointHit | None:
        """The hit of faults[j]'s failpoint (the run's recorder hears it), polled until
        the fault's window ends; None (noted) if it never fired."""
        assert fault.when is not None
        end = fault.until if fault.until is not None else self.duration
        if fault.when.within is not None:
            end = min(end, fault.at + fault.when.within)
        tag = nemesis.fired_tag(j)
        while True:
            fired = self.rt.call(self.recorder, rp.FiredFailpoints(), timeout=30)
            hit = fired.get(tag)
            if isinstance(hit, FailpointHit):
                return hit
            if self._now() >= end:
                self.notes.append(f"fault {fault.name} at {fault.at:g}: faults[{j}]'s "
                                  f"failpoint had not fired by {end:g}; applied then")
                return None
            self.rt.sleep(FIRED_POLL)

    def _wait_for(self, i: int, fault: Fault) -> trigger_waiter.Moment:
        """Wait for the fault's moment: at its breakpoint (armed here; on a hit the
        caller releases it once the fault is applied, on a miss it is released here) or,
        for a polled trigger, by polling the tier."""
        assert fault.when is not None and self.waiter is not None
        end = fault.until if fault.until is not None else self.duration
        if fault.when.within is not None:
            end = min(end, fault.at + fault.when.within)
        deadline = self.t0 + end
        timeout = max(1.0, deadline - float(self.rt.now())) + 30.0
        hold = holds.hold_of(fault.when.trigger)
        request: rn.WaiterRequest
        if hold is not None:
            tag = f"fault-{i}"
            self.rt.arm_failpoint_everywhere(hold.point, "pause", seconds=holds.HOLD_LIMIT,
                                             notify=self.waiter, tag=tag)
            request = rn.HoldMoment(tag, deadline)
        else:  # every KV moment has a breakpoint; a tier state (or the Spark bridge's) is polled
            assert fault.when.trigger in (*TIER_TRIGGERS, SPARK_TRIGGER), fault.when.trigger
            target = getattr(fault.action, "target", None)  # on its node, if it names one
            request = rn.PollTier(self.nodes, fault.when.trigger, deadline,
                                  self.trigger_interval, getattr(target, "node", None))
        moment = trigger_waiter.waiting(self.rt.call(self.waiter, request, timeout=timeout))
        if hold is not None and not moment.hit:  # missed: nothing may stay held
            self.rt.release_failpoint_everywhere(hold.point)
        if not moment.hit:
            self.notes.append(f"fault {fault.name} at {fault.at:g}: its trigger "
                              f"{fault.when.trigger} was not seen by {end:g}; applied then")
        return moment


__all__ = ["LEADER_WAIT", "FaultDriver"]
