"""The `sediment` command: help, version, demo dispatch."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

import sediment
from sediment import cli

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str, exe: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    command = (exe or [sys.executable, "-m", "sediment"]) + list(args)
    return subprocess.run(
        command, capture_output=True, text=True, timeout=60, cwd=ROOT, env=dict(os.environ)
    )


def test_version_via_python_m() -> None:
    result = run("version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"sediment {sediment.__version__}"


def test_version_matches_package_metadata() -> None:
    from importlib.metadata import version

    assert sediment.__version__ == version("sediment") != "0.0.0"


def test_help_lists_commands() -> None:
    result = run("--help")
    assert result.returncode == 0, result.stderr
    for word in ("demo", "version", "--log-format"):
        assert word in result.stdout


def test_console_script() -> None:
    script = Path(sys.executable).parent / "sediment"
    if not script.exists():
        pytest.skip("the sediment console script is not installed next to this python")
    result = run("version", exe=[str(script)])
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("sediment ")


def test_version_all_lists_the_stack(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["version", "--all"]) == 0
    out = capsys.readouterr().out
    for dist in ("python", "ray", "raydp", "pyspark", "pandas"):
        assert f"\n{dist} " in out


def test_no_command_prints_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    assert "usage: sediment" in capsys.readouterr().err


def test_unknown_argument_is_an_error() -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["version", "--bogus"])
    assert exc.value.code == 2


def test_bad_log_format_is_an_error() -> None:
    with pytest.raises(SystemExit):
        cli.main(["--log-format", "xml", "version"])


def test_demo_gets_every_argument_after_the_word_demo(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[list[str]] = []
    fake = types.ModuleType("sediment.demo")
    fake.main = lambda argv: seen.append(argv) or 7  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sediment.demo", fake)
    monkeypatch.delenv("SEDIMENT_LOG_FORMAT", raising=False)
    assert cli.main(["demo", "--seed", "3", "--help"]) == 7
    assert seen == [["--seed", "3", "--help"]]


def test_missing_demo_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "sediment.demo", None)  # import now fails
    assert cli.main(["demo"]) == 2
    assert "sediment/demo.py" in capsys.readouterr().err
