"""Child specs and supervisor flags (OTP's child_spec() and sup_flags()), plus validation.

The dataclasses only hold values and fill OTP's defaults; `validate_*` rejects bad
input with `InvalidChildSpec` / `InvalidSupFlags` so that the core can trust its state.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from sediment.supervision.errors import InvalidChildSpec, InvalidSupFlags

Restart = Literal["permanent", "transient", "temporary"]
ChildType = Literal["worker", "supervisor"]
Strategy = Literal["one_for_one", "one_for_all", "rest_for_one", "simple_one_for_one"]
AutoShutdown = Literal["never", "any_significant", "all_significant"]
ShutdownMode = float | Literal["brutal_kill", "infinity"]

RESTARTS: tuple[str, ...] = ("permanent", "transient", "temporary")
CHILD_TYPES: tuple[str, ...] = ("worker", "supervisor")
STRATEGIES: tuple[str, ...] = ("one_for_one", "one_for_all", "rest_for_one", "simple_one_for_one")
AUTO_SHUTDOWNS: tuple[str, ...] = ("never", "any_significant", "all_significant")
WORKER_SHUTDOWN_S = 5.0  # OTP: 5000 ms for workers, infinity for supervisors


@dataclass(frozen=True)
class ChildSpec:
    """How to start, restart and stop one child.

    `start` is `(fn, args)`: the shell spawns a linked process running `fn(*args)`.
    `shutdown=None` means OTP's default: 5.0 s for a worker, "infinity" for a supervisor.
    """

    id: Hashable
    start: tuple[Callable[..., Any], tuple[Any, ...]]
    restart: Restart = "permanent"
    shutdown: ShutdownMode | None = None
    type: ChildType = "worker"
    significant: bool = False

    def __post_init__(self) -> None:
        if self.shutdown is None:
            default: ShutdownMode = "infinity" if self.type == "supervisor" else WORKER_SHUTDOWN_S
            object.__setattr__(self, "shutdown", default)

    @property
    def shutdown_mode(self) -> ShutdownMode:
        """The resolved shutdown (never None once constructed)."""
        assert self.shutdown is not None
        return self.shutdown

    @property
    def fn(self) -> Callable[..., Any]:
        return self.start[0]

    @property
    def args(self) -> tuple[Any, ...]:
        return self.start[1]

    def with_extra_args(self, extra: tuple[Any, ...]) -> ChildSpec:
        """simple_one_for_one: the template's args followed by start_child's args."""
        return replace(self, start=(self.fn, self.args + extra))


@dataclass(frozen=True)
class Backoff:
    """Akka-style restart backoff: min_s * 2**n capped at max_s, plus jitter.

    `reset_after=None` means Akka's default, (min_s + max_s) / 2 seconds.
    """

    min_s: float
    max_s: float
    random_factor: float = 0.2
    reset_after: float | None = None

    @property
    def reset_after_s(self) -> float:
        if self.reset_after is None:
            return (self.min_s + self.max_s) / 2
        return self.reset_after


@dataclass(frozen=True)
class SupFlags:
    """Supervisor flags with OTP's defaults (one_for_one, 1 restart per 5 s, never)."""

    strategy: Strategy = "one_for_one"
    intensity: int = 1
    period: float = 5.0
    auto_shutdown: AutoShutdown = "never"
    backoff: Backoff | None = None


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _finite(value: object) -> bool:
    return _is_number(value) and math.isfinite(value)  # type: ignore[arg-type]  # checked above


def _one_of(value: object, allowed: tuple[str, ...]) -> bool:
    return isinstance(value, str) and value in allowed


def validate_child_spec(spec: ChildSpec, auto_shutdown: str = "never") -> None:
    """Raise InvalidChildSpec unless `spec` is usable under a supervisor with `auto_shutdown`."""
    if not isinstance(spec, ChildSpec):
        raise InvalidChildSpec(f"a child spec must be a ChildSpec, got {spec!r}")
    if spec.id is None:
        raise InvalidChildSpec("child spec field 'id' is missing (None)")
    try:
        hash(spec.id)
    except TypeError:
        raise InvalidChildSpec(f"child spec field 'id' must be hashable, got {spec.id!r}") from None
    who = f"child spec {spec.id!r}"
    start = spec.start
    if not (isinstance(start, tuple) and len(start) == 2):
        raise InvalidChildSpec(f"{who}: field 'start' must be a (fn, args) tuple, got {start!r}")
    if not callable(start[0]):
        raise InvalidChildSpec(f"{who}: field 'start' fn must be callable, got {start[0]!r}")
    if not isinstance(start[1], tuple):
        raise InvalidChildSpec(f"{who}: field 'start' args must be a tuple, got {start[1]!r}")
    if not _one_of(spec.restart, RESTARTS):
        raise InvalidChildSpec(
            f"{who}: field 'restart' must be one of {RESTARTS}, got {spec.restart!r}"
        )
    if not _one_of(spec.type, CHILD_TYPES):
        raise InvalidChildSpec(
            f"{who}: field 'type' must be one of {CHILD_TYPES}, got {spec.type!r}"
        )
    _validate_shutdown(who, spec.shutdown)
    _validate_significant(who, spec, auto_shutdown)


def _validate_shutdown(who: str, shutdown: object) -> None:
    if shutdown in ("brutal_kill", "infinity"):
        return
    if not (_finite(shutdown) and shutdown > 0):  # type: ignore[operator]  # number checked first
        raise InvalidChildSpec(
            f"{who}: field 'shutdown' must be a positive finite number of seconds, "
            f"'brutal_kill' or 'infinity', got {shutdown!r}"
        )


def _validate_significant(who: str, spec: ChildSpec, auto_shutdown: str) -> None:
    if not isinstance(spec.significant, bool):
        raise InvalidChildSpec(
            f"{who}: field 'significant' must be a bool, got {spec.significant!r}"
        )
    if spec.significant and auto_shutdown == "never":
        raise InvalidChildSpec(
            f"{who}: field 'significant'=True is a bad combination with auto_shutdown='never'"
        )
    if spec.significant and spec.restart == "permanent":
        raise InvalidChildSpec(
            f"{who}: field 'significant'=True is a bad combination with restart='permanent'"
        )


def validate_backoff(backoff: Backoff) -> None:
    """Raise InvalidSupFlags unless `backoff` describes a usable delay curve."""
    if not isinstance(backoff, Backoff):
        raise InvalidSupFlags(f"flag 'backoff' must be a Backoff or None, got {backoff!r}")
    if not (_finite(backoff.min_s) and backoff.min_s >= 0):
        raise InvalidSupFlags(
            f"backoff field 'min_s' must be a finite number >= 0, got {backoff.min_s!r}"
        )
    if not (_finite(backoff.max_s) and backoff.max_s >= backoff.min_s):
        raise InvalidSupFlags(
            f"backoff field 'max_s' must be a finite number >= min_s ({backoff.min_s!r}), "
            f"got {backoff.max_s!r}"
        )
    if not (_finite(backoff.random_factor) and backoff.random_factor >= 0):
        raise InvalidSupFlags(
            "backoff field 'random_factor' must be a finite number >= 0, "
            f"got {backoff.random_factor!r}"
        )
    reset = backoff.reset_after
    if reset is not None and not (_finite(reset) and reset > 0):
        raise InvalidSupFlags(f"backoff field 'reset_after' must be None or > 0, got {reset!r}")


def validate_sup_flags(flags: SupFlags) -> None:
    """Raise InvalidSupFlags unless every flag has an allowed value."""
    if not isinstance(flags, SupFlags):
        raise InvalidSupFlags(f"supervisor flags must be a SupFlags, got {flags!r}")
    if not _one_of(flags.strategy, STRATEGIES):
        raise InvalidSupFlags(
            f"flag 'strategy' must be one of {STRATEGIES}, got {flags.strategy!r}"
        )
    intensity = flags.intensity
    if not (isinstance(intensity, int) and not isinstance(intensity, bool) and intensity >= 0):
        raise InvalidSupFlags(f"flag 'intensity' must be an integer >= 0, got {intensity!r}")
    if not (_finite(flags.period) and flags.period > 0):
        raise InvalidSupFlags(
            f"flag 'period' must be a positive finite number of seconds, got {flags.period!r}"
        )
    if not _one_of(flags.auto_shutdown, AUTO_SHUTDOWNS):
        raise InvalidSupFlags(
            f"flag 'auto_shutdown' must be one of {AUTO_SHUTDOWNS}, got {flags.auto_shutdown!r}"
        )
    if flags.backoff is not None:
        validate_backoff(flags.backoff)


def validate_child_specs(flags: SupFlags, specs: Sequence[ChildSpec]) -> None:
    """Validate the flags, every spec, id uniqueness and simple_one_for_one's single template."""
    validate_sup_flags(flags)
    specs = list(specs)
    if flags.strategy == "simple_one_for_one" and len(specs) != 1:
        raise InvalidChildSpec(
            "strategy 'simple_one_for_one' needs exactly one child spec (the template), "
            f"got {len(specs)}"
        )
    seen: set[Hashable] = set()
    for spec in specs:
        validate_child_spec(spec, flags.auto_shutdown)
        if spec.id in seen:
            raise InvalidChildSpec(f"child spec field 'id' is duplicated: {spec.id!r}")
        seen.add(spec.id)
