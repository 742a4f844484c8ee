"""sediment.log: fields on every line, both formats, env defaults, idempotent setup."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from sediment import log

ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


@pytest.fixture
def stream(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    monkeypatch.delenv(log.FORMAT_ENV, raising=False)
    monkeypatch.delenv(log.LEVEL_ENV, raising=False)
    buf = io.StringIO()
    yield buf
    log.configure("console", "info")  # back to defaults, stderr


def json_lines(buf: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in buf.getvalue().splitlines()]


def test_json_line_carries_identity_and_timestamp(stream: io.StringIO) -> None:
    log.configure("json", stream=stream)
    log.get_logger("t").info("hello", key=1)
    (line,) = json_lines(stream)
    assert line["event"] == "hello"
    assert line["key"] == 1
    assert line["level"] == "info"
    assert line["logger"] == "t"
    assert line["node"] == "-"
    assert line["process"] == "driver"
    assert line["pid"] == os.getpid()
    assert isinstance(line["timestamp"], str) and ISO_UTC.match(line["timestamp"])


def test_get_logger_binds_name_and_initial_values(stream: io.StringIO) -> None:
    log.configure("json", stream=stream)
    log.get_logger("sediment.kv", group=3).info("x")
    log.get_logger().info("y")
    first, second = json_lines(stream)
    assert (first["logger"], first["group"]) == ("sediment.kv", 3)
    assert "logger" not in second


def test_console_line_carries_identity(stream: io.StringIO) -> None:
    log.configure("console", stream=stream)
    with log.bound_process("n2", "kv"):
        log.get_logger("t").warning("disk slow", ms=12)
    (line,) = stream.getvalue().splitlines()
    assert "disk slow" in line
    assert "warning" in line
    assert "node=n2" in line
    assert "process=kv" in line
    assert f"pid={os.getpid()}" in line
    assert "ms=12" in line
    assert ISO_UTC.match(line.split()[0])
    assert "\x1b[" not in line  # no colour codes into a non-terminal


def test_bind_process_and_reset(stream: io.StringIO) -> None:
    log.configure("json", stream=stream)
    logger = log.get_logger()
    tokens = log.bind_process("n1", "raft:g1")
    try:
        logger.info("bound")
    finally:
        structlog.contextvars.reset_contextvars(**tokens)
    logger.info("unbound")
    bound, unbound = json_lines(stream)
    assert (bound["node"], bound["process"]) == ("n1", "raft:g1")
    assert (unbound["node"], unbound["process"]) == ("-", "driver")


def test_binding_stays_in_its_asyncio_task(stream: io.StringIO) -> None:
    log.configure("json", stream=stream)
    logger = log.get_logger()

    async def process(node: str, name: str) -> None:
        log.bind_process(node, name)
        await asyncio.sleep(0)
        logger.info("tick")
        await asyncio.sleep(0)
        logger.info("tock")

    async def main() -> None:
        await asyncio.gather(process("n1", "a"), process("n2", "b"))
        logger.info("driver")

    asyncio.run(main())
    lines = json_lines(stream)
    by_process = {(line["process"], line["event"]): line["node"] for line in lines}
    assert by_process == {
        ("a", "tick"): "n1",
        ("a", "tock"): "n1",
        ("b", "tick"): "n2",
        ("b", "tock"): "n2",
        ("driver", "driver"): "-",
    }


def test_level_filters(stream: io.StringIO) -> None:
    log.configure("json", "warning", stream=stream)
    logger = log.get_logger()
    logger.debug("d")
    logger.info("i")
    logger.warning("w")
    logger.error("e")
    assert [line["event"] for line in json_lines(stream)] == ["w", "e"]


def test_exception_is_rendered_in_json(stream: io.StringIO) -> None:
    log.configure("json", stream=stream)
    try:
        raise ValueError("boom")
    except ValueError:
        log.get_logger().exception("failed")
    (line,) = json_lines(stream)
    assert line["level"] == "error"
    assert "ValueError: boom" in str(line["exception"])


def test_configure_is_idempotent(stream: io.StringIO, monkeypatch: pytest.MonkeyPatch) -> None:
    log.configure("json", stream=stream)
    calls: list[object] = []
    real = structlog.configure
    monkeypatch.setattr(structlog, "configure", lambda **kw: calls.append(kw) or real(**kw))
    logger = log.get_logger("t")
    for _ in range(3):
        log.configure("json", stream=stream)
        log.get_logger("t")
    logger.info("once")
    assert calls == []  # installed once; later calls only set format/level/stream
    assert len(json_lines(stream)) == 1


def test_reconfigure_switches_existing_loggers(stream: io.StringIO) -> None:
    log.configure("json", stream=stream)
    logger = log.get_logger("t")
    logger.info("as json")
    log.configure("console", stream=stream)
    logger.info("as console")
    first, second = stream.getvalue().splitlines()
    assert json.loads(first)["event"] == "as json"
    assert second.split()[0] != "{" and "as console" in second


def test_reinstalls_after_someone_else_configures_structlog(stream: io.StringIO) -> None:
    structlog.reset_defaults()
    log.configure("json", stream=stream)
    log.get_logger().info("back")
    assert json_lines(stream)[0]["pid"] == os.getpid()


def test_bad_values_are_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="xml"):
        log.configure("xml")
    with pytest.raises(ValueError, match="loud"):
        log.configure("json", "loud")
    monkeypatch.setenv(log.FORMAT_ENV, "yaml")
    with pytest.raises(ValueError, match=log.FORMAT_ENV):
        log.configure()


def test_settings_come_from_the_environment(stream: io.StringIO) -> None:
    """A fresh process: no configure() call, only the environment and get_logger."""
    env = dict(os.environ, SEDIMENT_LOG_FORMAT="json", SEDIMENT_LOG_LEVEL="debug")
    code = (
        "from sediment.log import get_logger, bind_process\n"
        "get_logger('x').debug('first')\n"
        "bind_process('n3', 'worker')\n"
        "get_logger('x').info('second')\n"
        "import os; print(os.getpid())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env
    )
    assert result.returncode == 0, result.stderr
    pid = int(result.stdout)
    first, second = (json.loads(line) for line in result.stderr.splitlines())
    assert (first["event"], first["level"], first["process"]) == ("first", "debug", "driver")
    assert (second["node"], second["process"], second["pid"]) == ("n3", "worker", pid)


def test_cli_log_format_flag_sets_format_and_environment(
    stream: io.StringIO, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from sediment import cli

    assert cli.main(["--log-format", "json", "--log-level", "debug", "version"]) == 0
    assert log.current_settings()["fmt"] == "json"
    assert log.current_settings()["level"] == "debug"
    assert os.environ[log.FORMAT_ENV] == "json"  # inherited by processes started later
    log.get_logger().debug("via cli")
    assert json.loads(capsys.readouterr().err.splitlines()[-1])["event"] == "via cli"
    monkeypatch.delenv(log.FORMAT_ENV)
    monkeypatch.delenv(log.LEVEL_ENV)


# ---- destinations: a run's file, the console through a progress bar --------------------


def test_file_sink_takes_its_level_and_the_console_keeps_its_own(
    stream: io.StringIO, tmp_path: Path
) -> None:
    log.configure("console", "warning", stream=stream)
    logger = log.get_logger("t")
    with log.file_sink(tmp_path / "run" / "run.log", "info") as path:
        logger.debug("too low for both")
        logger.info("file only")
        logger.warning("both")
    logger.warning("after the sink closed")
    in_file = path.read_text()
    assert "file only" in in_file and "both" in in_file and "too low" not in in_file
    assert "after the sink" not in in_file
    console = stream.getvalue()
    assert "file only" not in console and "both" in console and "after the sink" in console


def test_captured_process_lines_go_to_the_file_only(stream: io.StringIO, tmp_path: Path) -> None:
    log.configure("console", "warning", stream=stream)
    logger = log.get_logger("t")
    with log.file_sink(tmp_path / "run.log", capture_processes=True) as path:
        with log.bound_process("n1", "kv-node"):
            logger.error("process crashed", traceback="Traceback (most recent call last)")
        logger.error("driver trouble", traceback="Traceback: the driver's")
    in_file = path.read_text()
    assert "process crashed" in in_file and "Traceback (most recent call last)" in in_file
    assert "Traceback: the driver's" in in_file  # the traceback, printed as is
    console = stream.getvalue()
    assert "process crashed" not in console
    assert "driver trouble" in console and "Traceback" not in console
    assert f"traceback_in={path}" in console  # where to find it


def test_file_sink_in_json_writes_json(stream: io.StringIO, tmp_path: Path) -> None:
    log.configure("json", "error", stream=stream)
    with log.file_sink(tmp_path / "run.log") as path:
        log.get_logger().info("hello", n=1)
    (line,) = (json.loads(x) for x in path.read_text().splitlines())
    assert (line["event"], line["n"]) == ("hello", 1)
    assert stream.getvalue() == ""


def test_console_writer_receives_console_lines(stream: io.StringIO) -> None:
    log.configure("console", "info", stream=stream)
    seen: list[str] = []
    with log.console_writer(seen.append):
        log.get_logger().info("through the bar")
    log.get_logger().info("to the stream")
    assert len(seen) == 1 and "through the bar" in seen[0] and not seen[0].endswith("\n")
    assert "to the stream" in stream.getvalue() and "through the bar" not in stream.getvalue()


def test_a_bad_setting_is_a_log_config_error_for_people(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(log.LEVEL_ENV, "loud")
    with pytest.raises(log.LogConfigError) as err:
        log.check_environment()
    assert str(err.value) == ("SEDIMENT_LOG_LEVEL must be one of debug, info, warning, error, "
                              "critical, got 'loud'")
    with pytest.raises(log.LogConfigError, match="the log level must be one of"):
        log.configure(level="verbose")


def test_a_bad_environment_does_not_break_imports(tmp_path: Path) -> None:
    env = dict(os.environ, SEDIMENT_LOG_LEVEL="loud", SEDIMENT_LOG_FORMAT="xml")
    code = "from sediment.log import get_logger; get_logger('x').warning('still here')"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, env=env)
    assert result.returncode == 0 and "still here" in result.stderr


def test_injected_faults_log_at_info_and_real_crashes_at_error(stream: io.StringIO) -> None:
    """A failpoint firing, and a process ended by a `raise` failpoint, are the test's
    doing: info, no traceback. An uncaught exception of process code is an error."""
    from sediment.runtime import api

    async def waits_at_a_failpoint(ctx: object) -> None:
        await ctx.failpoint("t.point")  # type: ignore[attr-defined]

    async def raises(ctx: object) -> None:
        raise RuntimeError("a bug")

    log.configure("json", "info", stream=stream)
    with api.start("sim", seed=1, nodes=("n1",)) as rt:
        rt.arm_failpoint_everywhere("t.point", "raise")
        rt.spawn(waits_at_a_failpoint, node="n1")
        rt.spawn(raises, node="n1")
        rt.sleep(0.1)
    lines = {line["event"]: line for line in json_lines(stream)}
    assert lines["failpoint fired"]["level"] == "info"
    ended = lines["process ended by a failpoint"]
    assert ended["level"] == "info" and "traceback" not in ended
    assert "t.point" in str(ended["reason"])
    crashed = lines["process crashed"]
    assert crashed["level"] == "error" and "RuntimeError: a bug" in str(crashed["traceback"])
