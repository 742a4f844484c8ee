"""Child specs, supervisor flags and their validation (OTP's check_childspec / check_flags)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from sediment.runtime.errors import BadArgument
from sediment.supervision.errors import InvalidChildSpec, InvalidSupFlags
from sediment.supervision.spec import (
    Backoff,
    ChildSpec,
    SupFlags,
    validate_backoff,
    validate_child_spec,
    validate_child_specs,
    validate_sup_flags,
)


async def entry(*args: Any) -> None:
    """A process entry function; the core never calls it."""


def spec(id: Any = "a", **kw: Any) -> ChildSpec:
    kw.setdefault("start", (entry, ()))
    return ChildSpec(id, **kw)


# ---- defaults --------------------------------------------------------------------------


def test_child_spec_defaults_follow_otp() -> None:
    s = spec()
    assert (s.restart, s.type, s.significant) == ("permanent", "worker", False)
    assert s.shutdown == 5.0 and s.shutdown_mode == 5.0
    assert spec(type="supervisor").shutdown == "infinity"
    assert spec(type="supervisor", shutdown=2.0).shutdown == 2.0
    assert spec(shutdown="brutal_kill").shutdown_mode == "brutal_kill"


def test_child_spec_exposes_fn_and_args_and_appends_extra_args() -> None:
    s = spec(start=(entry, (1, 2)))
    assert s.fn is entry and s.args == (1, 2)
    assert s.with_extra_args((3,)).args == (1, 2, 3)
    assert s.args == (1, 2)  # frozen: the template is unchanged


def test_sup_flags_defaults_follow_otp() -> None:
    f = SupFlags()
    assert (f.strategy, f.intensity, f.period, f.auto_shutdown, f.backoff) == (
        "one_for_one",
        1,
        5.0,
        "never",
        None,
    )


def test_backoff_reset_after_defaults_to_akka_midpoint() -> None:
    assert Backoff(3.0, 30.0).reset_after_s == 16.5
    assert Backoff(3.0, 30.0, reset_after=1.0).reset_after_s == 1.0
    assert Backoff(3.0, 30.0).random_factor == 0.2


def test_errors_are_bad_arguments() -> None:
    assert issubclass(InvalidChildSpec, BadArgument) and issubclass(InvalidSupFlags, BadArgument)
    assert issubclass(InvalidChildSpec, ValueError)


# ---- child spec validation ---------------------------------------------------------------


def test_valid_specs_pass() -> None:
    validate_child_spec(spec())
    validate_child_spec(spec(restart="transient", shutdown=0.5, type="supervisor"))
    validate_child_spec(spec(restart="temporary", shutdown="brutal_kill"))
    validate_child_spec(spec(id=("tuple", 1), shutdown=3))
    validate_child_spec(spec(restart="transient", significant=True), "any_significant")
    validate_child_spec(spec(restart="temporary", significant=True), "all_significant")


BAD_SPECS: list[tuple[str, ChildSpec, str, str]] = [
    ("missing id", spec(id=None), "'id'", "None"),
    ("unhashable id", spec(id=["x"]), "'id'", "['x']"),
    ("start not a pair", spec(start=entry), "'start'", "entry"),
    ("start of one item", spec(start=(entry,)), "'start'", "entry"),
    ("fn not callable", spec(start=("nope", ())), "'start'", "'nope'"),
    ("args a list", spec(start=(entry, [1])), "'start'", "[1]"),
    ("unknown restart", spec(restart="sometimes"), "'restart'", "'sometimes'"),
    ("unknown type", spec(type="daemon"), "'type'", "'daemon'"),
    ("zero shutdown", spec(shutdown=0), "'shutdown'", "0"),
    ("negative shutdown", spec(shutdown=-1.0), "'shutdown'", "-1.0"),
    ("nan shutdown", spec(shutdown=math.nan), "'shutdown'", "nan"),
    ("inf shutdown", spec(shutdown=math.inf), "'shutdown'", "inf"),
    ("bool shutdown", spec(shutdown=True), "'shutdown'", "True"),
    ("unknown shutdown", spec(shutdown="soon"), "'shutdown'", "'soon'"),
    ("significant not bool", spec(restart="transient", significant=1), "'significant'", "1"),
]


@pytest.mark.parametrize(
    ("case", "bad", "field", "value"), BAD_SPECS, ids=[c[0] for c in BAD_SPECS]
)
def test_invalid_child_spec_names_field_and_value(
    case: str, bad: ChildSpec, field: str, value: str
) -> None:
    with pytest.raises(InvalidChildSpec) as info:
        validate_child_spec(bad, "any_significant")
    message = str(info.value)
    assert field in message and value in message, message
    assert message.count(". ") == 0  # one sentence


def test_significant_permanent_is_a_bad_combination() -> None:
    with pytest.raises(InvalidChildSpec, match="bad combination with restart='permanent'"):
        validate_child_spec(spec(significant=True), "any_significant")


@pytest.mark.parametrize("restart", ["transient", "temporary"])
def test_significant_with_auto_shutdown_never_is_a_bad_combination(restart: str) -> None:
    with pytest.raises(InvalidChildSpec, match="bad combination with auto_shutdown='never'"):
        validate_child_spec(spec(restart=restart, significant=True), "never")


def test_not_a_child_spec() -> None:
    with pytest.raises(InvalidChildSpec, match="must be a ChildSpec"):
        validate_child_spec({"id": "a"})  # type: ignore[arg-type]


# ---- flags validation ----------------------------------------------------------------


def test_valid_flags_pass() -> None:
    for strategy in ("one_for_one", "one_for_all", "rest_for_one", "simple_one_for_one"):
        validate_sup_flags(SupFlags(strategy=strategy))  # type: ignore[arg-type]
    validate_sup_flags(SupFlags(intensity=0, period=0.5, auto_shutdown="all_significant"))
    validate_sup_flags(SupFlags(backoff=Backoff(0.0, 0.0, 0.0)))
    validate_sup_flags(SupFlags(backoff=Backoff(1, 10, 0.5, reset_after=3)))


BAD_FLAGS: list[tuple[str, SupFlags, str, str]] = [
    ("unknown strategy", SupFlags(strategy="all_for_one"), "'strategy'", "'all_for_one'"),  # type: ignore[arg-type]
    ("negative intensity", SupFlags(intensity=-1), "'intensity'", "-1"),
    ("float intensity", SupFlags(intensity=1.5), "'intensity'", "1.5"),  # type: ignore[arg-type]
    ("bool intensity", SupFlags(intensity=True), "'intensity'", "True"),
    ("zero period", SupFlags(period=0), "'period'", "0"),
    ("negative period", SupFlags(period=-5.0), "'period'", "-5.0"),
    ("string period", SupFlags(period="5"), "'period'", "'5'"),  # type: ignore[arg-type]
    ("unknown auto_shutdown", SupFlags(auto_shutdown="some"), "'auto_shutdown'", "'some'"),  # type: ignore[arg-type]
    ("backoff not Backoff", SupFlags(backoff=(1, 2)), "'backoff'", "(1, 2)"),  # type: ignore[arg-type]
    ("backoff min > max", SupFlags(backoff=Backoff(5.0, 1.0)), "'max_s'", "1.0"),
    ("backoff negative min", SupFlags(backoff=Backoff(-1.0, 1.0)), "'min_s'", "-1.0"),
    ("backoff negative max", SupFlags(backoff=Backoff(0.0, -1.0)), "'max_s'", "-1.0"),
    ("backoff negative factor", SupFlags(backoff=Backoff(1, 2, -0.1)), "'random_factor'", "-0.1"),
    ("backoff zero reset", SupFlags(backoff=Backoff(1, 2, reset_after=0)), "'reset_after'", "0"),
]


@pytest.mark.parametrize(
    ("case", "bad", "field", "value"), BAD_FLAGS, ids=[c[0] for c in BAD_FLAGS]
)
def test_invalid_flags_name_field_and_value(
    case: str, bad: SupFlags, field: str, value: str
) -> None:
    with pytest.raises(InvalidSupFlags) as info:
        validate_sup_flags(bad)
    message = str(info.value)
    assert field in message and value in message, message


def test_validate_backoff_directly() -> None:
    validate_backoff(Backoff(1.0, 1.0))
    with pytest.raises(InvalidSupFlags, match="'min_s'"):
        validate_backoff(Backoff(math.nan, 1.0))


def test_not_sup_flags() -> None:
    with pytest.raises(InvalidSupFlags, match="must be a SupFlags"):
        validate_sup_flags({"strategy": "one_for_one"})  # type: ignore[arg-type]


# ---- the whole start spec --------------------------------------------------------------


def test_duplicate_child_ids_are_rejected() -> None:
    with pytest.raises(InvalidChildSpec, match=r"'id' is duplicated: 'a'"):
        validate_child_specs(SupFlags(), [spec("a"), spec("b"), spec("a")])


@pytest.mark.parametrize("count", [0, 2])
def test_simple_one_for_one_needs_exactly_one_template(count: int) -> None:
    specs = [spec(f"t{i}") for i in range(count)]
    with pytest.raises(InvalidChildSpec, match=f"exactly one child spec.*got {count}"):
        validate_child_specs(SupFlags(strategy="simple_one_for_one"), specs)


def test_start_spec_checks_flags_and_every_spec() -> None:
    validate_child_specs(SupFlags(strategy="simple_one_for_one"), [spec()])
    validate_child_specs(SupFlags(), [])
    with pytest.raises(InvalidSupFlags):
        validate_child_specs(SupFlags(intensity=-1), [spec()])
    with pytest.raises(InvalidChildSpec, match="'restart'"):
        validate_child_specs(SupFlags(), [spec("a"), spec("b", restart="never")])
    with pytest.raises(InvalidChildSpec, match="auto_shutdown='never'"):
        validate_child_specs(SupFlags(), [spec(restart="transient", significant=True)])
    flags = SupFlags(auto_shutdown="any_significant")
    validate_child_specs(flags, [spec(restart="transient", significant=True)])
