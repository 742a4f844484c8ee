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
come from ``SEDIMENT_LOG_FORMAT`` and ``SEDIMENT_LOG_LEVEL``; explicit arguments win.
Lines go to ``sys.stderr`` (looked up at write time) unless a stream is given.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import Token
from typing import Any, Final, Literal, TextIO, cast

import structlog
from structlog.contextvars import bind_contextvars, merge_contextvars, reset_contextvars
from structlog.typing import EventDict, WrappedLogger

__all__ = [
    "bind_process",
    "bound_process",
    "configure",
    "current_settings",
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


class _Settings:
    """What the installed chain reads on every line."""

    def __init__(self) -> None:
        self.fmt: Format = "console"
        self.level: int = logging.INFO
        self.stream: TextIO | None = None  # None: sys.stderr at write time


_settings = _Settings()
_install_lock = threading.Lock()
_write_lock = threading.Lock()


# -- processors ------------------------------------------------------------------------


def _drop_below_level(_logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
    if LEVELS.get(method_name, logging.INFO) < _settings.level:
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


def _render(logger: WrappedLogger, method_name: str, event_dict: EventDict) -> str:
    if _settings.fmt == "json":
        event_dict = _format_exc_info(logger, method_name, event_dict)
        return cast(str, _json_renderer(logger, method_name, event_dict))
    return _console_renderer()(logger, method_name, event_dict)


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
    """The wrapped logger: writes one rendered line to the current stream."""

    def __init__(self, *_args: Any) -> None:
        pass

    def msg(self, message: str) -> None:
        stream = _settings.stream if _settings.stream is not None else sys.stderr
        with _write_lock:
            stream.write(message + "\n")
            stream.flush()

    debug = info = warning = warn = error = err = critical = fatal = exception = log = msg


_PROCESSORS: Final[list[Any]] = [
    _drop_below_level,
    merge_contextvars,
    _add_identity,
    structlog.processors.add_log_level,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
    structlog.processors.StackInfoRenderer(),
    _render,
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
    source = "format" if fmt is not None else FORMAT_ENV
    value = (fmt if fmt is not None else os.environ.get(FORMAT_ENV, "console")).strip().lower()
    if value not in FORMATS:
        raise ValueError(f"log {source} must be one of {', '.join(FORMATS)}, got {value!r}")
    return cast(Format, value)


def _resolve_level(level: str | int | None) -> int:
    if isinstance(level, int):
        return level
    source = "level" if level is not None else LEVEL_ENV
    value = (level if level is not None else os.environ.get(LEVEL_ENV, "info")).strip().lower()
    if value == "warn":
        value = "warning"
    if value not in LEVELS:
        raise ValueError(f"log {source} must be one of {', '.join(LEVELS)}, got {value!r}")
    return LEVELS[value]


def configure(
    fmt: str | None = None,
    level: str | int | None = None,
    *,
    stream: TextIO | None = None,
) -> None:
    """Install Sediment's logging (once) and set format, level and stream.

    ``fmt``: ``"console"`` or ``"json"``; ``None`` reads ``SEDIMENT_LOG_FORMAT``
    (default console). ``level``: a name (``"info"``) or a ``logging`` int; ``None`` reads
    ``SEDIMENT_LOG_LEVEL`` (default info). ``stream``: where lines go; ``None`` means
    ``sys.stderr`` at write time. Calling it again with the same settings is a no-op;
    with different settings it switches every existing logger over.
    """
    resolved_fmt = _resolve_format(fmt)
    resolved_level = _resolve_level(level)
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
    """A structlog logger; installs the default configuration on first use."""
    if not _installed():
        with _install_lock:
            if not _installed():
                _settings.fmt = _resolve_format(None)
                _settings.level = _resolve_level(None)
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
