"""Write intent resolution on the write path (Ignite's write intent resolution, which
every reader and writer that meets an intent runs, not only read-only reads).

A write refused on another transaction's intent (a `WriteConflict` naming the intent's
key, or a unique claim's `UniqueConstraintViolation(pending=True)`) may have met the
intent of a transaction whose outcome is already decided: committed or aborted at its
commit partition but not cleaned up yet, or never finished by a coordinator that died.
So instead of failing at once, the writer's table node starts one resolver process: the
intent's commit partition decides; with no record there, the coordinator is asked
whether it still runs the transaction (`tx_alive`), and if not the resolver records the
abort (`RecoverTxCmd`) and cleans the intent up (`node_reads.resolve_intent_on`). Then
it sends the refused requests again, once, and their answer goes back to the node under
the task tag the node gave it, as if the first try had answered it.

A holder that is alive and pending makes the write fail with the first refusal
unchanged: after the resolver asked again (every `intent_wait` doubling up to 8x) for
up to `lock_wait` seconds (1 s by default, `node_state.DEFAULT_LOCK_WAIT`), as a
database whose writers wait on a lock with a timeout would; at once with `lock_wait` 0
(no-wait). If the holder aborts meanwhile the retried
write succeeds; if it commits, the retry meets a version committed after the writer
began, a `WriteConflict` (first committer wins). The waiting is the writer's, not a
queue in the partition: a partition is a raft machine that answers each command when
it applies, so a queue there would need answers deferred past apply (the raft shell's
change) or a leader-local lock table lost at every leader change; so waiters are not
served in arrival order, and two transactions waiting on each other's intents both fail
when their waits end (no deadlock detection, the timeout breaks it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sediment import log
from sediment.actors.catalog import catalog_log
from sediment.actors.catalog.descriptors import ZonePartition
from sediment.actors.catalog.hlc import MAX
from sediment.actors.log.shell.names import RAFT_HOST
from sediment.actors.log.shell.protocol import Propose, ReadIndex
from sediment.actors.tables.errors import UniqueConstraintViolation, WriteConflict
from sediment.actors.tables.mvcc import RowKey
from sediment.actors.tables.names import partition_group
from sediment.actors.tables.shell.group_task import TaskDone, group_task
from sediment.actors.tables.shell.node_reads import ReadPlan, resolve_intent_on
from sediment.actors.tables.shell.node_state import NodeState, catalog_log_now
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process

_logger = log.get_logger("sediment.tables.intent_resolver")


def met_intent(error: object) -> bool:
    """Whether a refusal names another transaction's intent (which may be resolvable)."""
    return (isinstance(error, WriteConflict) and error.intent_key is not None) or (
        isinstance(error, UniqueConstraintViolation) and error.pending)


async def resolve_and_retry(s: NodeState, group: ZonePartition, key: RowKey,
                            requests: tuple[Propose | ReadIndex, ...], retry: Any,
                            refused: Any) -> None:
    """Resolve the intent on `key` in `group`, then send `requests` there again; the
    node gets `TaskDone` under a tag for `retry` (what the task is for): the new answers,
    or `refused` (the first answer) if the holder is alive and pending."""
    latest = await catalog_log_now(s)  # a finder's cleanup carries the current version
    plan = ReadPlan(key[0], (group,), dict(s.assignments), ts=MAX,
                    catalog_version=catalog_log.active_version(latest, s.now()))
    wait = Wait(s.config.lock_wait, s.config.intent_wait)
    await s.ctx.spawn(_resolver, plan, group, key, requests, refused, s.ctx.self(),
                      s.next_tag(retry), wait, label="intent-resolver", host=RAFT_HOST)


@dataclass(frozen=True, slots=True)
class Wait:
    """How long (seconds) to wait for a live, pending holder, and the first pause."""

    total: float = 0.0
    first: float = 0.05


async def _resolver(ctx: Process, plan: ReadPlan, group: ZonePartition, key: RowKey,
                    requests: tuple[Propose | ReadIndex, ...], refused: Any, reply_to: Pid,
                    tag: int, wait: Wait = Wait()) -> None:
    """Process entry."""
    deadline = ctx.now() + wait.total
    pause = max(wait.first, 0.001)
    while True:
        try:
            resolved = await resolve_intent_on(ctx, plan, group, key)
        except Exception as err:  # noqa: BLE001 (unresolved: the refusal stands)
            _logger.info("intent not resolved", group=str(group), error=str(err)[:200])
            resolved = False
        if resolved or ctx.now() >= deadline:
            break
        await ctx.sleep(min(pause, max(0.0, deadline - ctx.now())))
        pause = min(pause * 2, wait.first * 8)
    if not resolved:
        ctx.send(reply_to, TaskDone(tag, True, (refused,)))
        return
    nodes = tuple(sorted(plan.assignments.get(group, ())))
    await group_task(ctx, partition_group(group), nodes, requests, reply_to, tag)


__all__ = ["Wait", "met_intent", "resolve_and_retry"]
