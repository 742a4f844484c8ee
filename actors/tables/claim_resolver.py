"""Resolving the pending claim a unique-index write was refused on.

Read-only reads resolve the intents they meet (`node_reads.py`), but no read meets a
unique index's claim rows (`unique_claims.py`). So when a claim is refused because
another transaction's intent holds the values (`UniqueConstraintViolation(pending=True)`
or a `WriteConflict`), the refused writer's table node starts one resolver process for
that claim: the intent's commit partition decides; if the holder's coordinator no
longer runs it, the resolver records the abort there (or finds the commit) and cleans
the intent up (`node_reads.resolve_intent_on`), so later writers of those values are not
refused for ever because of a transaction whose coordinator died. A live holder is left
alone (its transaction ends by itself). The refused write fails either way (no-wait).
"""

from __future__ import annotations

from sediment import log
from sediment.actors.catalog import catalog_log
from sediment.actors.catalog.descriptors import ZonePartition
from sediment.actors.catalog.errors import CatalogError
from sediment.actors.catalog.hlc import MAX
from sediment.actors.log.shell.names import RAFT_HOST
from sediment.actors.tables.errors import UniqueConstraintViolation, WriteConflict
from sediment.actors.tables.mvcc import RowKey
from sediment.actors.tables.node_reads import ReadPlan, resolve_intent_on
from sediment.actors.tables.node_state import NodeState, catalog_log_now
from sediment.actors.tables.unique_claims import UniqueClaimCmd, claim_key
from sediment.runtime.process import Process

_logger = log.get_logger("sediment.tables.claim_resolver")


def pending_holder(error: CatalogError | None) -> bool:
    """Whether a refused claim may have met another transaction's intent."""
    return isinstance(error, WriteConflict) or (
        isinstance(error, UniqueConstraintViolation) and error.pending)


async def after_refused_claim(s: NodeState, group: ZonePartition, cmd: UniqueClaimCmd,
                              error: CatalogError | None) -> None:
    """Start a resolver for the claim's intent when the refusal names a pending one."""
    if not pending_holder(error):
        return
    latest = await catalog_log_now(s)  # a finder's cleanup carries the current version
    plan = ReadPlan(cmd.index_id, (group,), dict(s.assignments), ts=MAX,
                    catalog_version=catalog_log.active_version(latest, s.now()))
    await s.ctx.spawn(_resolver, plan, group, claim_key(cmd.index_id, cmd.values),
                      label="claim-resolver", host=RAFT_HOST)


async def _resolver(ctx: Process, plan: ReadPlan, group: ZonePartition, key: RowKey) -> None:
    """Process entry: one try; a failure leaves it to the next refused writer."""
    try:
        await resolve_intent_on(ctx, plan, group, key)
    except Exception as err:  # noqa: BLE001 (best effort, logged)
        _logger.info("claim not resolved", group=str(group), error=str(err)[:200])


__all__ = ["after_refused_claim", "pending_holder"]
