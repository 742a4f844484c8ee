"""`sediment ... | head`: a stdout whose reader went away ends the command quietly (exit
141, as a command killed by SIGPIPE), not with a BrokenPipeError message (exit 4); a
broken pipe that is not stdout is still an unexpected error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sediment import cli
from sediment.actors.kv.store import Store

ROOT = Path(__file__).resolve().parents[1]


def _run_into_a_closed_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    """The command with stdout a pipe whose read end is already closed: every write to
    it fails, deterministically (no race with a `head` that exits)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([sys.executable, "-m", "sediment", *args], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=60, cwd=ROOT,
                              env=dict(os.environ))
    finally:
        os.close(write_end)


def test_version_into_a_closed_pipe_exits_quietly() -> None:
    result = _run_into_a_closed_pipe("version", "--all")
    assert result.stderr == ""
    assert result.returncode == cli.EXIT_STDOUT_CLOSED == 141


def test_json_into_a_closed_pipe_exits_quietly(tmp_path: Path) -> None:
    kv_dir = tmp_path / "n1" / "groups" / "kv"
    kv_dir.mkdir(parents=True)
    with Store(kv_dir / "kv.sqlite") as store:
        for i in range(200):
            store.put(b"k%d" % i, b"v", applied=i + 1)
    result = _run_into_a_closed_pipe("inspect", str(tmp_path / "n1"), "--json")
    assert result.stderr == ""
    assert result.returncode == cli.EXIT_STDOUT_CLOSED


def test_a_broken_pipe_that_is_not_stdout_is_still_unexpected(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def broken(argv: object) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(cli, "_main", broken)
    # at debug level an unexpected error is re-raised; an earlier test in this process
    # may have left the level there
    monkeypatch.setattr(cli.log, "current_settings", lambda: {"level": "warning"})
    assert cli.main(["version"]) == cli.EXIT_INTERNAL
    assert "unexpected error: BrokenPipeError" in capsys.readouterr().err
