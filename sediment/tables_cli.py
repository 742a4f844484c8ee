"""`sediment tables ...`: zones, tables, indexes and rows from the shell, as an Ignite or
SQL user expects them (CREATE ZONE/TABLE/INDEX, INSERT, SELECT by key, a scan, an index
lookup), over the Python API of the tables tier (`sediment/wiring/tables.py`).

There is no long-running tables cluster to attach to (`sediment start` runs the KV), so
each command starts the tables cluster over `--data-dir` on the simulator, runs one
request and stops it, as `sediment branches` does with no running cluster. The node
names are kept in `<data dir>/tables.json`, so every later command starts the same
members over the same files (the metastore's raft log with the catalog, the partitions'
SQLite files). The nodes' hybrid clocks run on the wall clock (the simulator's time plus
the wall time at the command's start), so a later command's timestamps are above an
earlier one's, as they would be in one long-running cluster.

Each row command runs in a transaction of its own: `put` (an upsert) and `delete` begin,
write and commit; `get`, `scan` and the lookups begin, read and commit (they see what
was committed before them). `--at TS` reads read-only at a hybrid timestamp instead
(the integer the other commands print), which fails below the low watermark.

Output: a row per line as JSON (keys sorted), or `--json` for one JSON document.
Errors are one line on stderr naming the typed error (`TableNotFound`,
`IndexNotAvailable`, `CatalogVersionCompacted`, `ReadBelowLowWatermark`,
`WriteConflict`, ...). Exit codes: 0 done, 1 the tier refused (the typed error; nothing
changed), 2 bad input (a row, a key, an option), 3 the cluster did not answer.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

from sediment.cli_args import HelpFormatter, int_at_least, positive_seconds

NODES_FILE = "tables.json"
EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 1, 2, 3


class BadInput(ValueError):
    """A row, key or value the command cannot take (exit 2)."""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser],
               common: Callable[[argparse.ArgumentParser], None]) -> None:
    """The `tables` group and its commands; `common` adds the log options."""
    text = "zones, tables, indexes and rows of the partitioned tables tier"
    group = sub.add_parser("tables", help=text, description=text[0].upper() + text[1:]
                           + ". Each command starts the tables cluster over --data-dir on "
                           "the simulator, runs one request (rows: in a transaction of "
                           "its own) and stops it.", formatter_class=HelpFormatter)
    common(group)
    _shared(group, suppress=False)
    cmds = group.add_subparsers(dest="tables_command", metavar="COMMAND")

    def cmd(name: str, helptext: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = cmds.add_parser(
            name, help=helptext, description=helptext[0].upper() + helptext[1:] + ".",
            formatter_class=HelpFormatter)
        common(p)
        _shared(p, suppress=True)
        return p

    p = cmd("create-zone", "create a zone (CREATE ZONE): its partitions and replicas")
    p.add_argument("name")
    p.add_argument("--partitions", type=int_at_least(1), default=4, help="partitions")
    p.add_argument("--replicas", type=int_at_least(1), default=2, help="replicas")
    p = cmd("alter-zone", "change a zone's replicas (ALTER ZONE ... SET REPLICAS) and wait "
                          "until its partitions are moved")
    p.add_argument("name")
    p.add_argument("--replicas", type=int_at_least(1), required=True,
                   help="the new replica count (at most the nodes)")
    p.add_argument("--no-wait", action="store_true",
                   help="return once the catalog changed, without waiting for the rebalance")
    p = cmd("versions", "show the catalog's versions: the earliest kept (compaction "
                        "trims below it), the latest, and the update log's size")
    p = cmd("create-table", "create a table (CREATE TABLE) in a zone")
    p.add_argument("name")
    p.add_argument("--zone", required=True, help="the zone holding its rows")
    p.add_argument("--column", "-c", dest="columns", action="append", required=True,
                   metavar="NAME:TYPE[!]",
                   help="a column (repeat); TYPE one of int, str, float, bytes, bool; a "
                        "trailing ! makes it NOT NULL")
    p.add_argument("--primary-key", "-k", required=True, metavar="COL[,COL...]",
                   help="the primary key's columns")
    p = cmd("create-index", "create an index (CREATE INDEX) and wait until it is built "
                            "and AVAILABLE")
    p.add_argument("name")
    p.add_argument("--table", required=True, help="the table it indexes")
    p.add_argument("--columns", required=True, metavar="COL[,COL...]",
                   help="the indexed columns, in order")
    p.add_argument("--unique", action="store_true", help="a unique index")
    p.add_argument("--no-wait", action="store_true",
                   help="return once registered, without waiting for the build")
    p = cmd("ls", "list the tables and indexes of a catalog version")
    p.add_argument("--version", type=int_at_least(0), default=None,
                   help="the catalog version (default: the latest); a compacted one is "
                        "CatalogVersionCompacted")
    p = cmd("put", "insert or update a row (an upsert) in a transaction of its own")
    p.add_argument("table")
    p.add_argument("row", metavar="JSON", help='the row as a JSON object, e.g. \'{"k": 1, '
                                               '"v": "one"}\'')
    p = cmd("delete", "delete a row by primary key in a transaction of its own")
    p.add_argument("table")
    p.add_argument("key", nargs="+", metavar="VALUE",
                   help="the primary key's values in order (JSON: 1, \"a\"; else text)")
    p = cmd("get", "read a row by primary key")
    p.add_argument("table")
    p.add_argument("key", nargs="+", metavar="VALUE",
                   help="the primary key's values in order (JSON: 1, \"a\"; else text)")
    _at(p)
    p = cmd("scan", "read every row of a table, by primary key")
    p.add_argument("table")
    _at(p)
    p = cmd("lookup", "read the rows an index finds: equal values, a prefix of its "
                      "columns, or a range")
    p.add_argument("index")
    p.add_argument("values", nargs="*", metavar="VALUE",
                   help="the indexed columns' values (all of them; with --prefix the first "
                        "few) (JSON: 1, \"a\"; else text)")
    p.add_argument("--prefix", action="store_true",
                   help="VALUEs are a prefix of the index's columns")
    p.add_argument("--from", dest="lower", default=None, metavar="JSON",
                   help="a range's lower bound: a JSON list, a prefix of the columns "
                        "(default: none, from the first row)")
    p.add_argument("--to", dest="upper", default=None, metavar="JSON",
                   help="a range's upper bound: a JSON list, a prefix of the columns "
                        "(default: none, to the last row)")
    p.add_argument("--exclusive", action="store_true",
                   help="leave out rows equal to either bound on its length")
    _at(p)


def _at(p: argparse.ArgumentParser) -> None:
    p.add_argument("--at", type=int_at_least(0), default=None, metavar="TS",
                   help="read read-only at this hybrid timestamp instead of in a "
                        "transaction (default: a transaction, now)")


def _shared(p: argparse.ArgumentParser, suppress: bool) -> None:
    def d(value: object) -> object:
        return argparse.SUPPRESS if suppress else value

    p.add_argument("--data-dir", default=d("sediment-tables"), metavar="DIR",
                   help="the tables cluster's files (default: sediment-tables)")
    p.add_argument("--nodes", type=int_at_least(1), default=d(3),
                   help="nodes when the data dir is new, later the recorded ones (default: 3)")
    p.add_argument("--seed", type=int_at_least(0), default=d(0),
                   help="the simulator's seed (default: 0)")
    p.add_argument("--json", action="store_true", default=d(False),
                   help="one JSON document instead of a row per line (default: off)")
    p.add_argument("--data-availability", type=positive_seconds, default=d(600.0),
                   metavar="SECONDS",
                   help="the low watermark trails now by this much: reads --at an older "
                        "time are refused, older row versions collected (default: 600, "
                        "Ignite's 10 min)")


# ---- values -------------------------------------------------------------------------


def value(text: str) -> Any:
    """A key or index value from the command line: JSON if it parses (1, 2.5, true,
    "a", null), else the text itself."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _row(text: str) -> dict[str, Any]:
    try:
        row = json.loads(text)
    except json.JSONDecodeError as err:
        raise BadInput(f"the row is not JSON: {err}") from None
    if not isinstance(row, dict):
        raise BadInput(f"the row must be a JSON object, got {text!r}")
    return row


def _bound(text: str | None) -> list[Any] | None:
    if text is None:
        return None
    try:
        bound = json.loads(text)
    except json.JSONDecodeError as err:
        raise BadInput(f"a bound is not JSON: {err}") from None
    if not isinstance(bound, list):
        bound = [bound]
    return bound


def columns(specs: Sequence[str]) -> list[tuple[str, str, bool]]:
    """`NAME:TYPE[!]` -> (name, type, nullable)."""
    out = []
    for spec in specs:
        name, sep, kind = spec.partition(":")
        if not sep or not name or not kind:
            raise BadInput(f"a column is NAME:TYPE[!], got {spec!r}")
        out.append((name, kind.rstrip("!"), not kind.endswith("!")))
    return out


def _names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise BadInput(f"no column names in {text!r}")
    return names


# ---- the cluster ----------------------------------------------------------------------


def _state(data_dir: str, nodes: int) -> dict[str, Any]:
    """`<data dir>/tables.json`: the node names (fixed at the first command) and the
    highest physical clock (ms) a command's nodes reached."""
    path = os.path.join(data_dir, NODES_FILE)
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            state: dict[str, Any] = json.load(f)
        return state
    return {"nodes": [f"n{i}" for i in range(1, nodes + 1)], "clock_ms": 0}


def _save_state(data_dir: str, state: dict[str, Any]) -> None:
    os.makedirs(data_dir, exist_ok=True)
    path = os.path.join(data_dir, NODES_FILE)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(state, f)
    os.replace(path + ".tmp", path)


@contextmanager
def cluster(args: argparse.Namespace) -> Iterator[Any]:
    """The tables cluster over --data-dir on the simulator, stopped on leaving. Its
    clocks start at the wall clock, or above where the last command's stopped: the
    simulator's time runs faster than the wall's, so a command that follows quickly
    would otherwise stamp below the rows the last one committed."""
    from sediment.actors.catalog.low_watermark import LowWatermarkConfig
    from sediment.wiring.tables import TablesCluster

    state = _state(args.data_dir, args.nodes)
    names = [str(n) for n in state["nodes"]]
    offset = max(int(time.time() * 1000), int(state.get("clock_ms", 0)) + 1)
    _save_state(args.data_dir, state)
    available_ms = max(1, int(args.data_availability * 1000))
    lwm = LowWatermarkConfig(data_availability_ms=available_ms,
                             update_interval_ms=max(1, min(available_ms // 2, 5_000)),
                             max_clock_skew_ms=10)
    with TablesCluster.start(names, backend="sim", data_dir=args.data_dir, seed=args.seed,
                             lwm=lwm, clock_offsets_ms={n: offset for n in names}) as c:
        try:
            yield c
        finally:
            state["clock_ms"] = offset + int(c.now() * 1000) + 1
            _save_state(args.data_dir, state)


def _in_tx(c: Any, work: Callable[[Any], Any]) -> Any:
    """Run `work(tx)` in a transaction of its own: committed if it returned, rolled
    back if it raised (the error goes on)."""
    tx = c.begin()
    try:
        result = work(tx)
    except BaseException:
        with suppress(Exception):  # already aborted by the failure
            tx.rollback()
        raise
    if not tx.commit():
        from sediment.actors.tables.errors import TxNotActive

        raise TxNotActive(tx.id, "aborted")
    return result, tx


def run(c: Any, args: argparse.Namespace) -> Any:
    """The command against a started cluster: what to print (a dict or a list of rows)."""
    from sediment.actors.catalog.hlc import HybridTimestamp

    command = args.tables_command
    at = HybridTimestamp(args.at) if getattr(args, "at", None) is not None else None
    if command == "create-zone":
        return _ddl(c, c.create_zone(args.name, args.partitions, args.replicas))
    if command == "alter-zone":
        version = c.alter_zone(args.name, args.replicas)
        if not args.no_wait:
            c.wait_rebalanced(args.name)
        assignments = c.assignments()
        zone = c.catalog().zone_named(args.name)
        return {**_ddl(c, version), "replicas": args.replicas,
                "partitions": {str(g.partition): sorted(nodes)
                               for g, nodes in sorted(assignments.items(),
                                                      key=lambda a: a[0].partition)
                               if g.zone_id == zone.id}}
    if command == "versions":
        v = c.versions()
        return {"earliest_version": v.earliest_version, "latest_version": v.latest_version,
                "log_size": v.log_size}
    if command == "create-table":
        return _ddl(c, c.create_table(args.name, args.zone, columns(args.columns),
                                      _names(args.primary_key)))
    if command == "create-index":
        version = c.create_index(args.name, args.table, _names(args.columns), args.unique)
        if args.no_wait:
            return {**_ddl(c, version), "status": "registered"}
        return {**_ddl(c, c.wait_index_available(args.name)), "status": "available"}
    if command == "ls":
        cat = c.catalog() if args.version is None else c.catalog_version(args.version)
        return [{"table": t.name, "zone": cat.zones[t.zone_id].name,
                 "columns": [f"{col.name}:{col.type}{'' if col.nullable else '!'}"
                             for col in t.columns],
                 "primary_key": list(t.primary_key),
                 "indexes": sorted(f"{i.name}({','.join(i.columns)}) {i.status.value}"
                                   for i in cat.indexes.values() if i.table_id == t.id)}
                for t in sorted(cat.tables.values(), key=lambda t: t.name)]
    if command == "put":
        row = _row(args.row)
        _, tx = _in_tx(c, lambda tx: tx.insert(args.table, row))
        return {"committed": str(tx.commit_ts.value), "tx": tx.id}
    if command == "delete":
        key = tuple(value(v) for v in args.key)
        _, tx = _in_tx(c, lambda tx: tx.delete(args.table, key))
        return {"committed": str(tx.commit_ts.value), "tx": tx.id}
    if command == "get":
        key = tuple(value(v) for v in args.key)
        found = (c.get(args.table, key, ts=at) if at is not None
                 else _in_tx(c, lambda tx: tx.get(args.table, key))[0])
        return [] if found is None else [found]
    if command == "scan":
        if at is not None:
            return c.scan(args.table, ts=at)
        return _in_tx(c, lambda tx: tx.scan(args.table))[0]
    if command == "lookup":
        return _lookup(c, args, at)
    raise BadInput(f"tables needs a command, got {command!r}")


def _ddl(c: Any, version: int) -> dict[str, Any]:
    """A DDL command's answer: the new catalog version and when it became active."""
    from sediment.actors.catalog.errors import CatalogError

    try:
        activation = c.catalog_version(version).activation
    except (CatalogError, AttributeError):
        return {"version": version}
    return {"version": version, "active_at": str(activation.value)}


def _lookup(c: Any, args: argparse.Namespace, at: Any) -> list[dict[str, Any]]:
    values = [value(v) for v in args.values]
    ranged = args.lower is not None or args.upper is not None
    if ranged and (values or args.prefix):
        raise BadInput("a range (--from/--to) takes no VALUEs and no --prefix")
    if not ranged and not values:
        raise BadInput("lookup needs VALUEs, or a range with --from/--to")
    if ranged:
        lower, upper = _bound(args.lower), _bound(args.upper)
        incl = not args.exclusive
        if at is not None:
            rows: list[dict[str, Any]] = c.range_lookup(
                args.index, lower, upper, lower_inclusive=incl, upper_inclusive=incl, ts=at)
            return rows
        result: list[dict[str, Any]] = _in_tx(c, lambda tx: tx.range_lookup(
            args.index, lower, upper, lower_inclusive=incl, upper_inclusive=incl))[0]
        return result
    if args.prefix:
        if at is not None:
            return list(c.prefix_lookup(args.index, values, ts=at))
        return list(_in_tx(c, lambda tx: tx.prefix_lookup(args.index, values))[0])
    if at is not None:
        return list(c.lookup(args.index, values, ts=at))
    return list(_in_tx(c, lambda tx: tx.lookup(args.index, values))[0])


def _print(result: Any, as_json: bool) -> None:
    if as_json:
        print(json.dumps(result, default=_plain, sort_keys=True))
    elif isinstance(result, list):
        for row in result:
            print(json.dumps(row, default=_plain, sort_keys=True))
    else:
        print(" ".join(f"{k}={v}" for k, v in sorted(result.items())))


def _plain(obj: Any) -> Any:
    if isinstance(obj, bytes):
        return obj.hex()
    return str(obj)


def cmd_tables(args: argparse.Namespace) -> int:
    from sediment.actors.catalog.errors import CatalogError
    from sediment.runtime.errors import CallError

    if getattr(args, "tables_command", None) is None:
        print("sediment: tables needs a command (see `sediment tables --help`)",
              file=sys.stderr)
        return EXIT_USAGE
    try:
        with cluster(args) as c:
            result = run(c, args)
    except BadInput as err:
        print(f"sediment: {err}", file=sys.stderr)
        return EXIT_USAGE
    except CatalogError as err:  # typed: nothing changed
        print(f"sediment: {type(err).__name__}: {err}", file=sys.stderr)
        return EXIT_REFUSED
    except (CallError, TimeoutError) as err:
        print(f"sediment: the tables cluster did not answer: {type(err).__name__}: {err}",
              file=sys.stderr)
        return EXIT_UNAVAILABLE
    _print(result, args.json)
    return EXIT_OK


__all__ = ["BadInput", "add_parser", "cluster", "cmd_tables", "columns", "run", "value"]
