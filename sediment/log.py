"""Structured logging for every Sediment process.

structlog is configured once per OS process (the first `configure()` or `get_logger()`
call installs the processor chain). Later `configure()` calls only change the format,
level or stream the installed chain reads, so loggers that modules already created keep
working and nothing is ever stacked twice.

Every line carries:

- ``node`` and ``process``: the logical node and process name, bound with
  `bind_process()` in the current context (an asyncio task copies its context when it
  is created, so a binding inside a task stays in that task). Unbound: ``node="-"``,
  ``process="driver"``.
- ``pid``: the OS process id, added when the line is written (a Ray actor is its own OS
  process).
- ``timestamp`` (ISO 8601, UTC) and ``level``; ``logger`` when `get_logger(name)` was used.

Formats: ``console`` for people, ``json`` (one object per line) for machines. Defaults
come from ``SEDIMENT_LOG_FORMAT`` and ``SEDIMENT_LOG_LEVEL``; explicit arguments win (a
value that is neither raises `LogConfigError`, a ValueError with a message for people).
Lines go to ``sys.stderr`` (looked up at write time) unless a stream is given.

Two scoped destinations serve the console of a long command:

- `file_sink(path, level)`: while open, every line at or above ``level`` also goes to
  ``path`` (plain text, or JSON in the json format). With ``capture_processes`` the lines
  of processes (anything bound with `bind_process`) go only to the file: a scenario
  run's process logs are part of its result, and the console keeps the driver's own
  lines. A traceback stays in the file; the console line says where it is.
- `console_writer(write)`: console lines are handed to ``write`` instead of the stream
  (``tqdm.write`` keeps a progress bar intact).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import Token
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, TextIO, cast

import structlog
from structlog.contextvars import bind_contextvars, merge_contextvars, reset_contextvars
from structlog.typing import EventDict, WrappedLogger

__all__ = [
    "LogConfigError",
    "bind_process",
    "bound_process",
    "check_environment",
    "configure",
    "console_writer",
    "current_settings",
    "file_sink",
    "get_logger",
]

Format = Literal["console", "json"]
FORMATS: Final[tuple[str, ...]] = ("console", "json")
LEVELS: Final[dict[str, int]] = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}
FORMAT_ENV: Final = "SEDIMENT_LOG_FORMAT"
LEVEL_ENV: Final = "SEDIMENT_LOG_LEVEL"
DEFAULT_NODE: Final = "-"
DEFAULT_PROCESS: Final = "driver"


class LogConfigError(ValueError):
    """A log format or level that is not one of the known ones."""


@dataclass(frozen=True)
class _File:
    """An open `file_sink`."""

    path: Path
    handle: TextIO
    level: int
    capture_processes: bool


class _Settings:
    """What the installed chain reads on every line."""

    def __init__(self) -> None:
        self.fmt: Format = "console"
        self.level: int = logging.INFO
        self.stream: TextIO | None = None  # None: sys.stderr at write time
        self.writer: Callable[[str], None] | None = None  # console lines, instead of stream
        self.file: _File | None = None

    def lowest(self) -> int:
        """The lowest level any destination takes."""
        return self.level if self.file is None else min(self.level, self.file.level)


_settings = _Settings()
_install_lock = threading.Lock()
_write_lock = threading.Lock()


# -- processors ------------------------------------------------------------------------


_METHOD_LEVELS: Final[dict[str, int]] = {
    **LEVELS, "warn": logging.WARNING, "exception": logging.ERROR, "err": logging.ERROR,
    "fatal": logging.CRITICAL,
}


def _level_of(method_name: str) -> int:
    return _METHOD_LEVELS.get(method_name, logging.INFO)


def _drop_below_level(_logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
    if _level_of(method_name) < _settings.lowest():
        raise structlog.DropEvent
    return event_dict


def _add_identity(_logger: WrappedLogger, _method_name: str, event_dict: EventDict) -> EventDict:
    event_dict.setdefault("node", DEFAULT_NODE)
    event_dict.setdefault("process", DEFAULT_PROCESS)
    event_dict["pid"] = os.getpid()
    return event_dict


_json_renderer = structlog.processors.JSONRenderer(sort_keys=False)
_format_exc_info = structlog.processors.ExceptionRenderer()
_console_plain = structlog.dev.ConsoleRenderer(colors=False)
_console_color: structlog.dev.ConsoleRenderer | None = None


def _hand_over(
    _logger: WrappedLogger, method_name: str, event_dict: EventDict
) -> tuple[tuple[str, EventDict], dict[str, Any]]:
    """The last processor: the sink renders per destination."""
    return (method_name, event_dict), {}


def _render(logger: WrappedLogger, method_name: str, event_dict: EventDict, *,
            plain: bool) -> str:
    if _settings.fmt == "json":
        event_dict = _format_exc_info(logger, method_name, event_dict)
        return cast(str, _json_renderer(logger, method_name, event_dict))
    if isinstance(event_dict.get("traceback"), str) and "exception" not in event_dict:
        event_dict["exception"] = event_dict.pop("traceback")  # printed as is, below
    renderer = _console_plain if plain else _console_renderer()
    return renderer(logger, method_name, event_dict)


def _console_renderer() -> structlog.dev.ConsoleRenderer:
    global _console_color
    stream = _settings.stream if _settings.stream is not None else sys.stderr
    use_color = not os.environ.get("NO_COLOR") and bool(getattr(stream, "isatty", lambda: False)())
    if not use_color:
        return _console_plain
    if _console_color is None:
        _console_color = structlog.dev.ConsoleRenderer(colors=True)
    return _console_color


class _Sink:
    """The wrapped logger: renders a line for each destination that takes it."""

    def __init__(self, *_args: Any) -> None:
        pass

    def _emit(self, method_name: str, event_dict: EventDict) -> None:
        level = _level_of(method_name)
        file = _settings.file
        if file is not None and level >= file.level:
            line = _render(self, method_name, dict(event_dict), plain=True)
            with _write_lock:
                file.handle.write(line + "\n")
                file.handle.flush()
        if level < _settings.level:
            return
        if file is not None:
            if file.capture_processes and event_dict.get("process") != DEFAULT_PROCESS:
                return  # a process's line: the file has it
            if "traceback" in event_dict or "exc_info" in event_dict:
                event_dict = {k: v for k, v in event_dict.items()
                              if k not in ("traceback", "exc_info")}
                event_dict["traceback_in"] = str(file.path)
        line = _render(self, method_name, dict(event_dict), plain=False)
        with _write_lock:
            if _settings.writer is not None:
                _settings.writer(line)
                return
            stream = _settings.stream if _settings.stream is not None else sys.stderr
            stream.write(line + "\n")
            stream.flush()

    debug = info = msg = log = warning = warn = error = err = exception = _emit
    critical = fatal = _emit


_PROCESSORS: Final[list[Any]] = [
    _drop_below_level,
    merge_contextvars,
    _add_identity,
    structlog.processors.add_log_level,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
    structlog.processors.StackInfoRenderer(),
    _hand_over,
]


def _installed() -> bool:
    return structlog.is_configured() and structlog.get_config()["processors"] is _PROCESSORS


def _install() -> None:
    structlog.configure(
        processors=_PROCESSORS,
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        context_class=dict,
        logger_factory=_Sink,
        cache_logger_on_first_use=True,
    )


# -- public API --------------------------------------------------------------------------


def _resolve_format(fmt: str | None) -> Format:
    source = "the log format" if fmt is not None else FORMAT_ENV
    value = (fmt if fmt is not None else os.environ.get(FORMAT_ENV, "console")).strip().lower()
    if value not in FORMATS:
        raise LogConfigError(f"{source} must be one of {', '.join(FORMATS)}, got {value!r}")
    return cast(Format, value)


def _resolve_level(level: str | int | None, default: str = "info") -> int:
    if isinstance(level, int):
        return level
    source = "the log level" if level is not None else LEVEL_ENV
    value = (level if level is not None else os.environ.get(LEVEL_ENV, default)).strip().lower()
    if value == "warn":
        value = "warning"
    if value not in LEVELS:
        raise LogConfigError(f"{source} must be one of {', '.join(LEVELS)}, got {value!r}")
    return LEVELS[value]


def check_environment() -> None:
    """Raise LogConfigError if SEDIMENT_LOG_FORMAT or SEDIMENT_LOG_LEVEL is set to
    something unknown (a command checks this once, up front)."""
    _resolve_format(None)
    _resolve_level(None)


def configure(
    fmt: str | None = None,
    level: str | int | None = None,
    *,
    stream: TextIO | None = None,
    default_level: str = "info",
) -> None:
    """Install Sediment's logging (once) and set format, level and stream.

    ``fmt``: ``"console"`` or ``"json"``; ``None`` reads ``SEDIMENT_LOG_FORMAT``
    (default console). ``level``: a name (``"info"``) or a ``logging`` int; ``None`` reads
    ``SEDIMENT_LOG_LEVEL``, else ``default_level``. ``stream``: where lines go; ``None``
    means ``sys.stderr`` at write time. Calling it again with the same settings is a
    no-op; with different settings it switches every existing logger over. Unknown
    values raise `LogConfigError`.
    """
    resolved_fmt = _resolve_format(fmt)
    resolved_level = _resolve_level(level, default_level)
    with _install_lock:
        _settings.fmt = resolved_fmt
        _settings.level = resolved_level
        _settings.stream = stream
        if not _installed():
            _install()


def current_settings() -> Mapping[str, Any]:
    """The format, level name and stream in effect (for diagnostics and tests)."""
    names = {v: k for k, v in LEVELS.items()}
    return {
        "fmt": _settings.fmt,
        "level": names.get(_settings.level, str(_settings.level)),
        "stream": _settings.stream,
        "installed": _installed(),
    }


def get_logger(name: str | None = None, **initial: Any) -> Any:
    """A structlog logger; installs the default configuration on first use (from the
    environment; an unknown value there falls back to the default: a module's import
    never fails over a log setting, commands check it with `check_environment`)."""
    if not _installed():
        with _install_lock:
            if not _installed():
                try:
                    _settings.fmt = _resolve_format(None)
                except LogConfigError:
                    _settings.fmt = "console"
                try:
                    _settings.level = _resolve_level(None)
                except LogConfigError:
                    _settings.level = logging.INFO
                _install()
    if name is not None:
        # not get_logger(logger=...): structlog's wrap_logger has a `logger` parameter
        initial.setdefault("logger", name)
    proxy = structlog.get_logger()
    return proxy.bind(**initial) if initial else proxy


def bind_process(node: str, process: str) -> Mapping[str, Token[Any]]:
    """Bind ``node`` and ``process`` for the current context (thread or asyncio task).

    Returns the tokens; pass them to `structlog.contextvars.reset_contextvars` to undo,
    or use `bound_process` for a scoped binding.
    """
    return bind_contextvars(node=node, process=process)


@contextmanager
def bound_process(node: str, process: str) -> Iterator[None]:
    """Bind ``node`` and ``process`` for the duration of a ``with`` block."""
    tokens = bind_process(node, process)
    try:
        yield
    finally:
        reset_contextvars(**tokens)


def _ensure_installed() -> None:
    if not _installed():
        get_logger()


@contextmanager
def file_sink(path: str | Path, level: str | int = "info", *,
              capture_processes: bool = False) -> Iterator[Path]:
    """While open, lines at or above ``level`` also go to ``path`` (appended; its
    directory is created). With ``capture_processes``, lines bound to a process go to
    the file only. Sinks do not stack: an inner one replaces the outer until it closes."""
    target = Path(path)
    resolved = _resolve_level(level)
    target.parent.mkdir(parents=True, exist_ok=True)
    _ensure_installed()
    with target.open("a", encoding="utf-8") as handle:
        previous = _settings.file
        _settings.file = _File(target, handle, resolved, capture_processes)
        try:
            yield target
        finally:
            with _write_lock:
                _settings.file = previous


@contextmanager
def console_writer(write: Callable[[str], None]) -> Iterator[None]:
    """While open, console lines go to ``write(line)`` (no newline) instead of the stream."""
    previous = _settings.writer
    _settings.writer = write
    try:
        yield
    finally:
        _settings.writer = previous

