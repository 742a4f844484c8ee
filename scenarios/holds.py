"""Where a scenario's protocol moments are held open: each trigger's breakpoint.

A fault with `when: {trigger: ...}` must land inside a moment of a protocol: between
the compaction notices and the Compact proposal, while the leader's value-only pass
runs, while a follower installs a snapshot. Polling the members' status for the moment
found it on `sim`, but on Ray a round of status calls and the driver's fault together
took longer than most moments last: in the library's Ray run of 2026-11-22, 1 of 13 triggered faults
landed inside its moment; the rest fired at their deadline.

So a trigger is a failpoint in the process code at the moment, armed everywhere as a
breakpoint (`Runtime.arm_failpoint_everywhere` with `notify`): the first process to reach
it pauses there and tells the run's trigger waiter, the fault is applied while the
process is held inside the moment, and only then is the breakpoint released. The held
process is the fault's `leader` (or, for a compaction worker, its target), so nothing is
looked up between the moment and the fault. A held process goes on by itself after
HOLD_LIMIT seconds, whatever happens to the runner.

- notice: `coordinator.before_propose`, in the leader's compaction coordinator: every
  notice confirmed, the Compact not yet proposed;
- compact_entry: `raft.leader.before_apply.Compact`, in the KV leader's raft server: a
  Compact committed, not yet applied on the leader;
- physical_compaction: `raft.leader.before_background`, the same server: a compaction
  applied, its value-only pass not finished;
- snapshot_install: `install.leader.before_last_chunk`, the same server: a follower has
  staged the snapshot's live entries but not its last chunk;
- job_leased: `blocks.worker.before_merge`, in a compaction worker's job task: a job's
  lease held, its merge not started;
- compaction_started: `branches.compactor.after_step1`, in a branch staging compactor
  (`cluster.branches`): step 1's SetIf won (the staging token sealed, the claim set),
  the merge of step 2 not started.

`flush_behind` (the flusher behind the KV's history, the compaction held at its cursor)
is a state that lasts, not a step in code: it is still polled (`tier.wait_for_tier`).
"""

from __future__ import annotations

from dataclasses import dataclass

from sediment.actors.blocks.shell.compaction_worker import BEFORE_MERGE
from sediment.actors.branches.shell.compactor import FAILPOINTS as COMPACTOR_FAILPOINTS
from sediment.actors.kv.shell.coordinator import BEFORE_PROPOSE
from sediment.actors.kv.types import Compact
from sediment.actors.log.shell.applying import before_apply_point
from sediment.actors.log.shell.install import LEADER_BEFORE_LAST_CHUNK
from sediment.actors.log.shell.server import LEADER_BEFORE_BACKGROUND

COMPACTOR_AFTER_STEP1 = COMPACTOR_FAILPOINTS[0]
HOLD_LIMIT = 10.0  # seconds a held process waits for its release at most


@dataclass(frozen=True)
class Hold:
    """A trigger's breakpoint: the failpoint, and the role of the process reaching it
    (`leader`: the KV leader's raft server; `coordinator` runs on the KV leader too)."""

    point: str
    holder: str

    def on_leader(self) -> bool:
        return self.holder in ("leader", "coordinator")


HOLDS: dict[str, Hold] = {
    "notice": Hold(BEFORE_PROPOSE, "coordinator"),
    "compact_entry": Hold(before_apply_point(Compact), "leader"),
    "physical_compaction": Hold(LEADER_BEFORE_BACKGROUND, "leader"),
    "snapshot_install": Hold(LEADER_BEFORE_LAST_CHUNK, "leader"),
    "job_leased": Hold(BEFORE_MERGE, "compaction_worker"),
    "compaction_started": Hold(COMPACTOR_AFTER_STEP1, "branches_compactor"),
}


def hold_of(trigger: str) -> Hold | None:
    """The breakpoint of `trigger`, or None for a polled one."""
    return HOLDS.get(trigger)


__all__ = ["HOLDS", "HOLD_LIMIT", "Hold", "hold_of"]
