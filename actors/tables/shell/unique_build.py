"""Building a unique index over rows that already exist: claim them, or refuse.

Writers claim a unique index's values from the catalog version that registered it on
(`unique_check.py`). The rows written before have no claims. The index build driver
(`index_driver.py`) waits, as for any index, until every RW transaction older than
the registering version has ended (`txs_finished`); then, before it proposes
`StartBuildingIndex`, it runs one ordinary RW transaction through its node's table node
that reads every row of the table and writes it back unchanged. Each of those writes
claims the row's values like any write, so:

- two existing rows with the same values (or an existing row and a newer one that
  already claimed them): the transaction fails with `UniqueConstraintViolation`, the
  build fails, and the driver drops the index (`DropIndex`), keeping the reason for
  `status` (`failed`) and `TablesCluster.wait_index_available`, which raises it. Ignite
  refuses the same way by failing the index (it never becomes AVAILABLE); here it goes
  so the table is writable again without a unique check nobody can rely on;
- a concurrent writer's intent on a row or a claim (`WriteConflict`), or an
  unreachable partition: the transaction aborts and the next look tries again;
- otherwise it commits, every existing row has its claim, and the build goes on.

Writing each row back (not only its claim) makes the seeding conflict with a writer
that changes the row meanwhile, so no stale claim can commit.
"""

from __future__ import annotations

import contextlib
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from sediment import log
from sediment.actors.catalog.catalog_log import CatalogLog
from sediment.actors.catalog.ddl import DropIndex
from sediment.actors.tables.errors import UniqueConstraintViolation
from sediment.actors.tables.names import table_node_name
from sediment.actors.tables.shell import named_pids
from sediment.actors.tables.shell import node_protocol as p
from sediment.runtime.errors import CallError
from sediment.runtime.process import Process

_logger = log.get_logger("sediment.tables.unique_build")
KEEP = 64  # failed builds kept for `status`


class CatalogNotActiveYet(Exception):
    """The seeding transaction began before the index's catalog version was active."""


@dataclass
class UniqueBuilds:
    """What the driver remembers: the indexes seeded, and the failed builds."""

    seeded: set[int] = field(default_factory=set)
    failed: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=KEEP))


async def ready_to_build(ctx: Process, node: str, catalog: CatalogLog, index_id: int,
                         builds: UniqueBuilds, timeout: float) -> bool:
    """Whether `StartBuildingIndex` may be proposed: not a unique index, or its
    existing rows were claimed. False: try again at the next look (or the index was
    dropped because rows share values)."""
    index = catalog.latest.index(index_id)
    if index is None or not index.unique or index_id in builds.seeded:
        return True
    table = catalog.latest.table(index.table_id)
    if table is None:
        return False
    try:
        error = await _seed(ctx, table_node_name(node), table.name, index.created_version,
                            timeout)
    except CallError as err:
        _logger.info("unique index seeding interrupted", index=index.name, error=str(err)[:200])
        return False
    if error is None:
        builds.seeded.add(index_id)
        return True
    if isinstance(error, UniqueConstraintViolation):
        builds.failed.append({"index_id": index_id, "name": index.name, "error": error,
                              "at": ctx.now()})
        _logger.info("unique index refused: rows share values", index=index.name,
                     error=str(error)[:200])
        # not taken: the next look finds it REGISTERED, seeds again and fails again
        with contextlib.suppress(CallError):
            await named_pids.call(ctx, table_node_name(node), p.Ddl((DropIndex(index.name),)),
                                  timeout=timeout)
    return False


async def _seed(ctx: Process, table_node: str, table: str, version: int,
                timeout: float) -> Exception | None:
    """One RW transaction writing every row of `table` back; its error, None when it
    committed. It must begin under `version` (the index's) or later, or its writes
    would claim nothing: the driver may see the index before that version is active
    (`CatalogNotActiveYet`: the next look tries again)."""
    began = await named_pids.call(ctx, table_node, p.Begin(), timeout=timeout)
    if not isinstance(began, p.Began):
        return RuntimeError(repr(began)[:200])
    tx_id = began.tx_id
    if began.version < version:
        await named_pids.call(ctx, table_node, p.Rollback(tx_id), timeout=timeout)
        return CatalogNotActiveYet(f"catalog version {version} not active at {began.ts}")
    error: Exception | None = None
    reply = await named_pids.call(ctx, table_node, p.Scan(tx_id, table), timeout=timeout)
    if isinstance(reply, p.Failed):
        error = _exception(reply.error)
    else:
        for _pk, row in sorted(reply.rows, key=lambda r: repr(r[0])):
            answer = await named_pids.call(ctx, table_node, p.Write(tx_id, table, dict(row)),
                                           timeout=timeout)
            if isinstance(answer, p.Failed):
                error = _exception(answer.error)
                break
    end = p.Rollback(tx_id) if error else p.Commit(tx_id)
    ended = await named_pids.call(ctx, table_node, end, timeout=timeout)
    if error is None and isinstance(ended, p.Ended) and not ended.committed:
        error = ended.failure or RuntimeError("the seeding transaction aborted")
    return error


def _exception(error: BaseException) -> Exception:
    return error if isinstance(error, Exception) else RuntimeError(repr(error))


def failure(driver_status: dict[str, Any] | None, name: str) -> Exception | None:
    """The latest failed build of the index `name` in the driver's `status`."""
    found = [f for f in (driver_status or {}).get("unique_failed", []) if f["name"] == name]
    error = found[-1]["error"] if found else None
    return error if isinstance(error, Exception) else None


__all__ = ["UniqueBuilds", "failure", "ready_to_build"]
