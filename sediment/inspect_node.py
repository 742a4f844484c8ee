"""`sediment inspect NODE`: what is inside a node's SQLite files, read only.

NODE is a node's data directory (`<data-dir>/kv/<node>` of `sediment start`, or any
directory above one). Every SQLite file of a known kind under it (`actors/schemas`:
`kv.sqlite`, `partition.db`) is opened read only and shown: its schema version (the
migration steps it ran against those this release knows), its tables and their row
counts, and for a KV file its head, compact revision, applied raft index and the
compactions table. Nothing is migrated or written: a file from an earlier release is
reported as such and migrates when its node opens it.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

from sediment.actors.kv.store import read_revisions
from sediment.actors.schemas import FILES, FileKind
from sediment.actors.schemas.migrate import applied_steps, database, unknown_steps

EXIT_OK, EXIT_USAGE = 0, 2


class InspectError(Exception):
    """A NODE or a file that cannot be inspected (one line for the user)."""


def find_files(node: Path) -> list[tuple[Path, FileKind]]:
    """Every SQLite file of a known kind under `node`, by path."""
    if not node.exists():
        raise InspectError(f"{node}: no such directory")
    if not node.is_dir():
        raise InspectError(f"{node}: not a directory (NODE is a node's data directory)")
    found = [(p, FILES[p.name]) for p in node.rglob("*") if p.name in FILES and p.is_file()]
    return sorted(found, key=lambda pk: str(pk[0]))


def _open_read_only(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()  # not a database: raises
    return conn


def _schema(conn: sqlite3.Connection, kind: FileKind) -> dict[str, Any]:
    applied = applied_steps(conn, kind)
    later = unknown_steps(applied, kind)
    pending = [name for name, _ in kind.steps if name not in applied]
    if later:
        state = "from a later release (this release cannot open it)"
    elif pending:
        state = f"{len(pending)} migration step(s) to run when its node opens it"
    else:
        state = "current"
    return {"kind": kind.name, "version": len(applied), "release_version": kind.version,
            "state": state, "pending": pending, "unknown": later}


def _kv(conn: sqlite3.Connection) -> dict[str, Any]:
    head, compact, finished = read_revisions(conn)
    applied = conn.execute("SELECT value FROM meta WHERE name = 'applied'").fetchone()
    compactions = [{"revision": r, "finished": bool(f)} for r, f in conn.execute(
        "SELECT revision, finished FROM compactions ORDER BY revision")]
    return {"head": head, "compact_revision": max(0, compact),
            "finished_compact_revision": max(0, finished),
            "pending_compaction": compact if compact > finished else None,
            "applied": None if applied is None else int(applied[0]),
            "compactions": compactions}


def describe(path: Path, kind: FileKind) -> dict[str, Any]:
    """One file's schema version, tables with row counts and (KV) revisions."""
    try:
        conn = _open_read_only(path)
    except sqlite3.Error as exc:
        raise InspectError(f"{path}: cannot open as SQLite ({exc})") from None
    try:
        db = database(conn)
        out: dict[str, Any] = {"path": str(path), **_schema(conn, kind)}
        out["tables"] = {t: db.table(t).count for t in sorted(db.table_names())}
        if kind.name == "kv" and not out["unknown"]:
            out.update(_kv(conn))
        return out
    except sqlite3.Error as exc:
        raise InspectError(f"{path}: cannot read ({exc})") from None
    finally:
        conn.close()


def _print_file(info: dict[str, Any], node: Path) -> None:
    rel = Path(info["path"]).relative_to(node) if Path(info["path"]).is_relative_to(node) \
        else Path(info["path"])
    print(f"{rel}  ({info['kind']} file, schema version {info['version']} of "
          f"{info['release_version']}: {info['state']})")
    if "head" in info:
        pending = info["pending_compaction"]
        print(f"  head {info['head']}  compact revision {info['compact_revision']}"
              f"  finished compaction {info['finished_compact_revision']}"
              + (f" (pass at {pending} not finished)" if pending is not None else "")
              + f"  applied raft index {info['applied'] if info['applied'] is not None else '-'}")
    width = max((len(t) for t in info["tables"]), default=5)
    print("  tables:")
    for table, count in info["tables"].items():
        print(f"    {table:<{width}}  {count} row{'' if count == 1 else 's'}")
    if "compactions" in info:
        print("  compactions:" + ("" if info["compactions"] else " none"))
        for c in info["compactions"]:
            print(f"    revision {c['revision']:<8}  {'finished' if c['finished'] else 'pending'}")


def cmd_inspect(args: argparse.Namespace) -> int:
    node = Path(args.node)
    try:
        files = find_files(node)
    except InspectError as exc:
        print(f"sediment: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not files:
        print(f"sediment: {node}: no SQLite files of a node under it (looked for "
              f"{', '.join(sorted(FILES))})", file=sys.stderr)
        return EXIT_USAGE
    described: list[dict[str, Any]] = []
    errors: list[str] = []
    for path, kind in files:
        try:
            described.append(describe(path, kind))
        except InspectError as exc:
            errors.append(str(exc))
    if args.json:
        print(json.dumps({"node": str(node), "files": described, "errors": errors},
                         indent=2))
    else:
        print(f"node {node}: {len(files)} SQLite file(s)")
        for info in described:
            _print_file(info, node)
    for message in errors:
        print(f"sediment: {message}", file=sys.stderr)
    return EXIT_USAGE if errors else EXIT_OK


def add_parser(sub: Any, log_options: Any, formatter: type[argparse.HelpFormatter]) -> None:
    text = "show a node's SQLite files: schema version, tables, row counts, revisions"
    parser = sub.add_parser(
        "inspect", help=text, formatter_class=formatter,
        description="Show what is inside a node's SQLite files, read only: each file's "
                    "schema version (and whether it migrates when its node opens it), its "
                    "tables and row counts, and for a KV file its head, compact revision, "
                    "applied raft index and compactions table. Nothing is written.")
    log_options(parser)
    parser.add_argument("node", metavar="NODE",
                        help="a node's data directory (e.g. sediment-data/kv/n1), or a "
                             "directory above several")
    parser.add_argument("--json", action="store_true",
                        help="print the files as JSON (default: a text summary)")


__all__ = ["InspectError", "add_parser", "cmd_inspect", "describe", "find_files"]
