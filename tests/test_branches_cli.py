"""`sediment branches ...` on sim: every command against a cluster over one data dir,
each invocation a fresh start of the same cluster (so what one command wrote the next
one reads from disk), bad input and refusals with their exit codes."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest

from sediment import cli
from sediment.local_cluster import STATE_FILE


def sed(capsys: pytest.CaptureFixture[str], data: Path, *args: str) -> tuple[int, str, str]:
    code = cli.main(["--log-level", "warning", "branches", "--data-dir", str(data), *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_lakefs_flow_over_restarts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "lake"
    code, out, _ = sed(capsys, d, "repo", "create", "demo")
    assert code == 0 and len(out.strip()) == 64
    first = out.strip()
    assert sed(capsys, d, "put", "demo", "main", "a/1.csv", "--address", "s3://b/1",
               "--size", "10", "--checksum", "e1", "--meta", "k=v")[0] == 0
    assert sed(capsys, d, "put", "demo", "main", "a/2.csv", "--address", "s3://b/2",
               "--size", "20")[0] == 0
    code, out, _ = sed(capsys, d, "commit", "demo", "main", "-m", "first",
                       "--committer", "ada")
    assert code == 0
    head = out.strip()
    assert sed(capsys, d, "branch", "create", "demo", "dev", "--source", "main") == (
        0, head + "\n", "")
    assert sed(capsys, d, "rm", "demo", "dev", "a/1.csv")[0] == 0
    assert sed(capsys, d, "diff", "demo", "dev") == (0, "removed\ta/1.csv\n", "")

    code, out, _ = sed(capsys, d, "compact", "demo", "dev", "--json")
    done = json.loads(out)
    assert code == 0 and done["tokens"] == 1 and done["changes"] == 1
    code, out, _ = sed(capsys, d, "branch", "show", "demo", "dev", "--json")
    record = json.loads(out)
    assert record["commit_id"] == head and record["sealed_tokens"] == []
    assert record["compacted_metarange"] == done["metarange"]
    # the compaction changed no read: the diff, the listing and a get read the same
    assert sed(capsys, d, "diff", "demo", "dev") == (0, "removed\ta/1.csv\n", "")
    assert sed(capsys, d, "ls", "demo", "dev") == (0, "a/2.csv\ts3://b/2\t20\t\t\n", "")
    code, out, _ = sed(capsys, d, "ls", "demo", "main", "--amount", "1", "--json")
    page = json.loads(out)
    assert page == {"entries": [{"path": "a/1.csv", "address": "s3://b/1", "size": 10,
                                 "checksum": "e1", "metadata": {"k": "v"}}],
                    "has_more": True}
    assert sed(capsys, d, "get", "demo", head, "a/1.csv")[1].startswith("a/1.csv\ts3://b/1")
    code, out, _ = sed(capsys, d, "log", "demo", "main")
    lines = [line.split("\t") for line in out.splitlines()]
    assert [(r[0], r[2], r[3]) for r in lines] == [(head, "ada", "first"),
                                                    (first, "-", "Repository created")]
    assert sed(capsys, d, "repo", "ls")[1] == "demo\n"
    assert sed(capsys, d, "branch", "ls", "demo")[1] == "dev\nmain\n"

    assert sed(capsys, d, "reset", "demo", "dev")[0] == 0
    assert sed(capsys, d, "diff", "demo", "dev") == (0, "", "")
    code, out, _ = sed(capsys, d, "branch", "show", "demo", "dev", "--json")
    assert json.loads(out)["compacted_metarange"] is None
    assert sed(capsys, d, "branch", "delete", "demo", "dev")[0] == 0
    assert sed(capsys, d, "branch", "ls", "demo")[1] == "main\n"


def test_refusals_and_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "lake"
    assert sed(capsys, d, "repo", "create", "demo")[0] == 0
    code, _, err = sed(capsys, d, "get", "demo", "main", "a/missing")
    assert code == 1 and err.startswith("sediment: ObjectNotFound:")
    code, _, err = sed(capsys, d, "put", "demo", "main", "", "--address", "x", "--size", "1")
    assert code == 2 and "InvalidPath" in err
    code, _, err = sed(capsys, d, "branch", "create", "demo", "main", "--source", "main")
    assert code == 1 and "BranchExists" in err
    code, _, err = sed(capsys, d, "repo", "create", "Bad_Name")
    assert code == 2 and "InvalidName" in err
    code, _, err = sed(capsys, d, "compact", "demo", "main")
    assert code == 1 and "NothingToCompact" in err
    code, _, err = sed(capsys, d, "commit", "demo", "nope", "-m", "x")
    assert code == 1 and "BranchNotFound" in err
    code, _, err = sed(capsys, d, "commit", "demo", "main", "-m", "x")
    assert code == 1 and "NoChanges" in err
    assert cli.main(["branches", "--data-dir", str(d)]) == 2
    assert "name a command" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        cli.main(["branches", "put", "demo", "main", "p", "--address", "x", "--size", "-1"])
    assert exit_.value.code == 2
    assert "--size: must be an integer >= 0" in capsys.readouterr().err
    # nothing of the refused requests was written
    assert sed(capsys, d, "diff", "demo", "main") == (0, "", "")
    assert sed(capsys, d, "repo", "ls")[1] == "demo\n"


def test_a_data_dir_held_by_start_is_refused(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "held"
    d.mkdir()
    (d / STATE_FILE).write_text(json.dumps({"format": 1, "running": True,
                                            "pid": os.getpid()}))
    code, _, err = sed(capsys, d, "repo", "ls")
    assert code == 2 and "held by a running `sediment start`" in err
    assert not (d / "kv").exists()


def _leaves(parser: argparse.ArgumentParser, prog: str) -> dict[str, argparse.ArgumentParser]:
    out = {prog: parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out.update(_leaves(sub, f"{prog} {name}"))
    return out


def test_every_branches_option_has_help_with_its_default() -> None:
    top = cli.build_parser()
    group = next(a for a in top._actions
                 if isinstance(a, argparse._SubParsersAction)).choices["branches"]
    leaves = _leaves(group, "sediment branches")
    assert {"sediment branches repo create", "sediment branches branch show",
            "sediment branches compact", "sediment branches diff"} <= set(leaves)
    for prog, p in leaves.items():
        formatter = p._get_formatter()
        for a in p._actions:
            if a.option_strings and a.option_strings[0] != "-h":
                text = formatter._expand_help(a)
                assert "default" in text or "required" in text, f"{prog} {a.option_strings}"
