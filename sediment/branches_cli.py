"""`sediment branches ...`: repositories, branches and commits from the shell, in
lakeFS's vocabulary (lakectl's `repo create`, `branch create`, `fs upload/stat/ls/rm`,
`commit`, `diff`, `branch reset`, `log`, plus the staging `compact` lakeFS lacks).

Two ways to reach the KV:
- A running cluster: when a `sediment start` holds `--data-dir` (its state file names
  its etcd endpoints), or with `--endpoints`, each command talks to that cluster over
  etcd's v3 gRPC API (`ports.EtcdKv`): Range and Txn, the tier's SetIf and staged writes
  as etcd Txns. Range files go to the cluster's block store (the state file's `blocks`,
  else `<data dir>/blocks`: the same filesystem). Deletes are reported to the cluster's
  delete sensor over the same endpoints (`shell/sensor_wire.py`), so enough of them
  trigger a staging compaction there.
- No running cluster: each command starts the KV cluster over `--data-dir` on
  `--backend` (sim by default, as `sediment run`; ray starts an embedded local Ray, or
  joins `RAY_ADDRESS`), runs one request of the branch tier (`actors/branches/api.py`)
  and stops the cluster. The KV's files are `<data dir>/kv` (the same files `sediment
  start --data-dir` serves) and the ranges `<data dir>/blocks`; the node names are kept
  in `<data dir>/branches.json`, so every later command starts the same members. No
  sensor outlives such a command, so its deletes are counted by none; `compact`
  compacts now.

Time is the wall clock (commit dates and compaction claims must compare across
commands and with the compactor of a running cluster, which `sediment start` puts on
the wall clock too).

Output: one line per item, tab-separated, or `--json`. Exit codes: 0 done, 1 the tier
refused (not found, exists, no changes, a conflict), 2 bad input (a name, a path, an
entry, an option), 3 the cluster did not answer or the KV refused a request, 4
unexpected.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sediment.cli_args import HelpFormatter, int_at_least

if TYPE_CHECKING:
    from sediment.branches_remote import Security

NODES_FILE = "branches.json"
EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 1, 2, 3
BACKENDS = ("sim", "ray")


def _meta(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"must be KEY=VALUE, got {text!r}")
    return key, value


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser],
               common: Callable[[argparse.ArgumentParser], None]) -> None:
    """The `branches` group and its commands; `common` adds the log options."""
    text = "versioned repositories, branches and commits (lakeFS's vocabulary)"
    group = sub.add_parser("branches", help=text, description=text[0].upper() + text[1:]
                           + ". Each command talks to the cluster a running `sediment start` "
                           "keeps over --data-dir (or at --endpoints) through its etcd API; "
                           "with none running, it starts the cluster over --data-dir, runs, "
                           "and stops it.", formatter_class=HelpFormatter)
    common(group)
    _shared(group, suppress=False)
    cmds = group.add_subparsers(dest="branches_command", metavar="COMMAND")

    def cmd(parent: Any, name: str, helptext: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = parent.add_parser(
            name, help=helptext, description=helptext[0].upper() + helptext[1:] + ".",
            formatter_class=HelpFormatter)
        common(p)
        _shared(p, suppress=True)
        return p

    repo = cmd(cmds, "repo", "repositories: create, ls").add_subparsers(
        dest="repo_command", metavar="COMMAND")
    p = cmd(repo, "create", "create a repository (its default branch and first commit)")
    p.add_argument("repo")
    p.add_argument("--default-branch", default="main", help="the first branch's name")
    cmd(repo, "ls", "list the repositories")

    branch = cmd(cmds, "branch", "branches: create, ls, show, delete").add_subparsers(
        dest="branch_command", metavar="COMMAND")
    p = cmd(branch, "create", "create a branch at a source ref (a branch or a commit)")
    p.add_argument("repo")
    p.add_argument("name")
    p.add_argument("--source", required=True, metavar="REF",
                   help="a branch or a commit id (required)")
    p = cmd(branch, "ls", "list a repository's branches")
    p.add_argument("repo")
    p = cmd(branch, "show", "a branch's record: commit, staging and sealed tokens, "
                            "compacted metarange, compaction start")
    p.add_argument("repo")
    p.add_argument("name")
    p = cmd(branch, "delete", "delete a branch")
    p.add_argument("repo")
    p.add_argument("name")

    p = cmd(cmds, "put", "stage an object entry at a path (a pointer: address, size, "
                         "checksum, metadata)")
    p.add_argument("repo")
    p.add_argument("branch")
    p.add_argument("path")
    p.add_argument("--address", required=True,
                   help="where the object's bytes are (required)")
    p.add_argument("--size", required=True, type=int_at_least(0),
                   help="the object's bytes (required)")
    p.add_argument("--checksum", default="", help="the object's checksum (default: none)")
    p.add_argument("--meta", type=_meta, action="append", default=[], metavar="KEY=VALUE",
                   help="user metadata, repeatable (default: none)")
    p = cmd(cmds, "get", "an entry on a ref (staged, compacted or committed)")
    p.add_argument("repo")
    p.add_argument("ref", help="a branch or a commit id")
    p.add_argument("path")
    p.add_argument("--staged-only", action="store_true",
                   help="only the branch's staging area (a missing path there: not found)")
    p = cmd(cmds, "ls", "list entries on a ref, a page at a time")
    p.add_argument("repo")
    p.add_argument("ref")
    _page_options(p)
    p = cmd(cmds, "rm", "delete paths on a branch (a staged tombstone each)")
    p.add_argument("repo")
    p.add_argument("branch")
    p.add_argument("paths", nargs="+", metavar="PATH")
    p = cmd(cmds, "commit", "commit a branch's staged changes")
    p.add_argument("repo")
    p.add_argument("branch")
    p.add_argument("-m", "--message", required=True, help="the commit message (required)")
    p.add_argument("--meta", type=_meta, action="append", default=[], metavar="KEY=VALUE",
                   help="commit metadata, repeatable (default: none)")
    p.add_argument("--committer", default="", help="who commits (default: none)")
    p.add_argument("--allow-empty", action="store_true",
                   help="commit even when nothing changed")
    p = cmd(cmds, "diff", "a branch's uncommitted changes (DiffUncommitted), a page")
    p.add_argument("repo")
    p.add_argument("branch")
    _page_options(p)
    p = cmd(cmds, "reset", "drop a branch's uncommitted changes")
    p.add_argument("repo")
    p.add_argument("branch")
    p = cmd(cmds, "log", "the commits reachable from a ref, newest first")
    p.add_argument("repo")
    p.add_argument("ref")
    p.add_argument("--amount", type=int_at_least(1), default=100, help="at most this many")
    p = cmd(cmds, "compact", "compact a branch's staging area into a metarange now")
    p.add_argument("repo")
    p.add_argument("branch")
    p.add_argument("--no-force", dest="force", action="store_false",
                   help="refuse when a compaction started within the interval (as the "
                        "sensor's compactions do)")


def _shared(p: argparse.ArgumentParser, suppress: bool) -> None:
    """The group's options, on the group and again on every command (there with
    SUPPRESS defaults, so `sediment branches ls R B --json` works and an absent option
    keeps the group's value)."""

    def d(value: object) -> object:
        return argparse.SUPPRESS if suppress else value

    p.add_argument("--data-dir", default=d("sediment-data"), metavar="DIR",
                   help="the cluster's files, kv/ and blocks/ (default: sediment-data)")
    p.add_argument("--endpoints", default=d(None), metavar="URLS",
                   help="a running cluster's etcd endpoints, comma-separated (default: "
                        "those of the `sediment start` holding --data-dir, if any)")
    p.add_argument("--cacert", default=d(None), metavar="FILE",
                   help="with --endpoints: the CA that signed the etcd servers' "
                        "certificates (TLS; default: none, or the system's for https://)")
    p.add_argument("--cert", default=d(None), metavar="FILE",
                   help="with --endpoints: a client certificate for TLS (with --key; "
                        "default: none)")
    p.add_argument("--key", default=d(None), metavar="FILE",
                   help="with --endpoints: the client certificate's key (with --cert; "
                        "default: none)")
    p.add_argument("--user", default=d(None), metavar="NAME[:PASSWORD]",
                   help="with --endpoints: an etcd user (auth enabled); its token goes "
                        "with every request (default: none, no auth)")
    p.add_argument("--backend", choices=BACKENDS, default=d("sim"),
                   help="with no running cluster: sim, the simulator in this process; "
                        "ray, an embedded local Ray or RAY_ADDRESS (default: sim)")
    p.add_argument("--nodes", type=int_at_least(1), default=d(3),
                   help="KV nodes when the data dir is new, later the recorded ones "
                        "(default: 3)")
    p.add_argument("--json", action="store_true", default=d(False),
                   help="print JSON (default: off)")


def _page_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prefix", default="", help="only paths with this prefix (default: all)")
    p.add_argument("--after", default="", help="start after this path (default: the first)")
    p.add_argument("--amount", type=int_at_least(1), default=1000, help="a page's size")


# ---- running ----------------------------------------------------------------------------


def _nodes(data_dir: Path, wanted: int) -> tuple[str, ...]:
    path = data_dir / NODES_FILE
    if path.exists():
        recorded = json.loads(path.read_text()).get("nodes")
        if not isinstance(recorded, list) or not all(isinstance(n, str) for n in recorded):
            raise ValueError(f"{path} has no list of node names")
        return tuple(recorded)
    if (data_dir / "kv").exists():  # a cluster `sediment start` made: its default names
        return tuple(f"n{i}" for i in range(1, wanted + 1))
    nodes = tuple(f"n{i}" for i in range(1, wanted + 1))
    data_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"nodes": list(nodes)}) + "\n")
    return nodes


def _held_by_start(data_dir: Path) -> int | None:
    """The pid of a running `sediment start` over this data dir, if any."""
    from sediment.local_cluster import STATE_FILE

    try:
        state = json.loads((data_dir / STATE_FILE).read_text())
        pid = int(state.get("pid", 0)) if state.get("running") else 0
    except (OSError, ValueError, AttributeError):
        return None
    if pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid
    return pid


@contextmanager
def open_lake(data_dir: Path, backend: str, nodes: int) -> Iterator[Any]:
    """The branch tier over the cluster in `data_dir`, started for the block."""
    from sediment.actors.branches.api import Branches
    from sediment.actors.branches.metarange import MetaRangeStore
    from sediment.actors.branches.ports import ClientKv, SyncEnv
    from sediment.wiring.cluster import Cluster

    names = _nodes(data_dir, nodes)
    cluster = Cluster.start(names, data_dir=str(data_dir / "kv"), backend=backend)
    try:
        env = SyncEnv(clock=time.time, sleeper=cluster.rt.sleep)
        yield Branches.over(ClientKv(cluster.client()), env,
                            MetaRangeStore(str(data_dir / "blocks")))
    finally:
        cluster.stop()


def _state(data_dir: Path) -> dict[str, Any]:
    from sediment.local_cluster import STATE_FILE

    try:
        state = json.loads((data_dir / STATE_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


@contextmanager
def open_remote_lake(endpoints: list[str], blocks: Path,
                     security: Security | None = None) -> Iterator[tuple[Any, Any]]:
    """The branch tier over a running cluster's etcd endpoints, and the reporter that
    sends its deletes to that cluster's sensor (flush it after the command); both over
    TLS and with the user's token as `security` says (`branches_remote.py`)."""
    from sediment import branches_remote as remote
    from sediment.actors.branches.api import Branches
    from sediment.actors.branches.metarange import MetaRangeStore
    from sediment.actors.branches.ports import EtcdKv, SyncEnv
    from sediment.actors.branches.shell.sensor_wire import DeleteReporter

    security = security or remote.Security()
    token = remote.authenticate(endpoints, security) if security.user is not None else None
    reporter = DeleteReporter(endpoints, credentials=security.credentials(endpoints),
                              metadata=() if token is None else ((remote.TOKEN_KEY, token),))
    with remote.connect(endpoints, security, token) as client:
        yield (Branches.over(EtcdKv(client), SyncEnv(), MetaRangeStore(str(blocks)),
                             on_delete=reporter), reporter)


def _remote(args: argparse.Namespace, data_dir: Path) -> tuple[list[str], Path] | str | None:
    """(endpoints, block store) of the running cluster to talk to; None: none runs (start
    one here); a string: why the command cannot go on."""
    state = _state(data_dir)
    blocks = Path(state.get("blocks") or data_dir / "blocks")
    if args.endpoints is not None:
        urls = [e.strip() for e in args.endpoints.split(",") if e.strip()]
        if not urls:
            return "--endpoints names no endpoint"
        return urls, blocks
    holder = _held_by_start(data_dir)
    if holder is None:
        return None
    endpoints = state.get("endpoints") or {}
    if not isinstance(endpoints, dict) or not endpoints:
        return (f"{data_dir} is held by a running `sediment start` (pid {holder}) that "
                "serves no etcd API (on sim); stop it, or start it with --backend ray")
    return [str(u) for u in endpoints.values()], blocks


def _security(args: argparse.Namespace) -> Security:
    """The TLS and auth options (ValueError: a bad combination)."""
    from sediment import branches_remote as remote

    user, password = (None, None) if args.user is None else remote.parse_user(args.user)
    return remote.Security(args.cacert, args.cert, args.key, user, password)


def cmd_branches(args: argparse.Namespace) -> int:
    from sediment.actors.branches import errors

    sub = args.branches_command
    if sub is None or (sub == "repo" and args.repo_command is None) or (
            sub == "branch" and args.branch_command is None):
        print("sediment: branches: name a command (`sediment branches --help`)",
              file=sys.stderr)
        return EXIT_USAGE
    from sediment import branches_remote as remote
    from sediment.actors.kv.errors import KvError

    data_dir = Path(args.data_dir).resolve()
    where = _remote(args, data_dir)
    if isinstance(where, str):
        print(f"sediment: {where}", file=sys.stderr)
        return EXIT_USAGE
    try:
        security = _security(args)
    except ValueError as exc:
        print(f"sediment: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if where is None and security != remote.Security():
        print("sediment: --cacert, --cert, --key and --user are for a running cluster "
              "(--endpoints)", file=sys.stderr)
        return EXIT_USAGE
    lost = None
    try:
        if where is None:
            with open_lake(data_dir, args.backend, args.nodes) as lake:
                out = _dispatch(lake, args)
        else:
            with open_remote_lake(*where, security) as (lake, reporter):
                try:
                    out = _dispatch(lake, args)
                finally:
                    lost = reporter.flush()
    except errors.InvalidInput as exc:
        print(f"sediment: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except errors.BranchesError as exc:
        print(f"sediment: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except KvError as exc:
        print(f"sediment: the cluster: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except remote.AuthFailed as exc:
        print(f"sediment: the cluster: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    finally:
        if lost is not None:
            print(f"sediment: warning: the deletes are staged but no delete sensor counted "
                  f"them ({lost})", file=sys.stderr)
    _print(out, args.json)
    return EXIT_OK


Rows = list[list[str]]


def _entry_row(path: str, entry: Any) -> list[str]:
    meta = ",".join(f"{k}={v}" for k, v in entry.metadata)
    return [path, entry.address, str(entry.size), entry.checksum, meta]


def _dispatch(lake: Any, a: argparse.Namespace) -> tuple[Any, Rows]:
    """(the JSON value, the table rows) of one command."""
    c = a.branches_command
    if c == "repo":
        if a.repo_command == "create":
            commit = lake.repo_create(a.repo, a.default_branch)
            return {"repo": a.repo, "commit": commit}, [[commit]]
        repos = lake.repo_list()
        return repos, [[r] for r in repos]
    if c == "branch":
        if a.branch_command == "create":
            commit = lake.branch_create(a.repo, a.name, a.source)
            return {"branch": a.name, "commit": commit}, [[commit]]
        if a.branch_command == "ls":
            names = lake.branch_list(a.repo)
            return names, [[n] for n in names]
        if a.branch_command == "delete":
            lake.branch_delete(a.repo, a.name)
            return {"deleted": a.name}, []
        record = asdict(lake.branch(a.repo, a.name))
        return record, [[k, _field(k, v)] for k, v in record.items()]
    if c == "put":
        lake.put(a.repo, a.branch, a.path, address=a.address, size=a.size,
                 checksum=a.checksum, metadata=dict(a.meta))
        return {"staged": a.path}, []
    if c == "get":
        entry = lake.get(a.repo, a.ref, a.path, staged_only=a.staged_only)
        return {"path": a.path, **_entry_dict(entry)}, [_entry_row(a.path, entry)]
    if c == "ls":
        page = lake.ls(a.repo, a.ref, a.prefix, a.after, a.amount)
        return ({"entries": [{"path": p, **_entry_dict(e)} for p, e in page.entries],
                 "has_more": page.has_more},
                [_entry_row(p, e) for p, e in page.entries] + _more(page.has_more))
    if c == "rm":
        for path in a.paths:
            lake.rm(a.repo, a.branch, path)
        return {"removed": a.paths}, []
    if c == "commit":
        commit = lake.commit(a.repo, a.branch, a.message, dict(a.meta), a.committer,
                             a.allow_empty)
        return {"commit": commit}, [[commit]]
    if c == "diff":
        dpage = lake.diff(a.repo, a.branch, a.prefix, a.after, a.amount)
        return ({"diffs": [{"path": d.path, "kind": d.kind,
                            "left": _entry_json(d.left), "right": _entry_json(d.right)}
                           for d in dpage.diffs], "has_more": dpage.has_more},
                [[d.kind, d.path] for d in dpage.diffs] + _more(dpage.has_more))
    if c == "reset":
        lake.reset(a.repo, a.branch)
        return {"reset": a.branch}, []
    if c == "log":
        commits = lake.log(a.repo, a.ref, a.amount)
        return ([{"id": cid, **asdict(cm)} for cid, cm in commits],
                [[cid, _date(cm.creation_date), cm.committer or "-", cm.message]
                 for cid, cm in commits])
    done = lake.compact(a.repo, a.branch, force=a.force)
    value = {"metarange": done.metarange, "tokens": len(done.dropped),
             "changes": done.stats.changes, "ranges_written": done.stats.written,
             "ranges_reused": done.stats.reused, "seconds": round(done.seconds, 3)}
    return value, [[k, str(v)] for k, v in value.items()]


def _field(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list | tuple):
        return " ".join(value) or "-"
    if key == "compaction_start_time":
        return _date(value)
    return str(value)


def _entry_json(entry: Any) -> dict[str, Any] | None:
    return None if entry is None else _entry_dict(entry)


def _entry_dict(entry: Any) -> dict[str, Any]:
    return {"address": entry.address, "size": entry.size, "checksum": entry.checksum,
            "metadata": dict(entry.metadata)}


def _more(has_more: bool) -> Rows:
    return [["(more: --after the last path)"]] if has_more else []


def _date(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _print(out: tuple[Any, Rows], as_json: bool) -> None:
    value, rows = out
    if as_json:
        print(json.dumps(value, indent=2, default=list))
        return
    for row in rows:
        print("\t".join(row))


__all__ = ["add_parser", "cmd_branches", "open_lake", "open_remote_lake"]
