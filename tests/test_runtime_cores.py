"""The pure pieces of the runtime, exhaustively: exit-signal rules, mailbox, reorder buffer."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sediment.runtime.errors import MailboxOverflow
from sediment.runtime.mailbox import Mailbox, ReorderBuffer, compile_match
from sediment.runtime.reasons import KILL, KILLED, NORMAL, SHUTDOWN, Error, Shutdown
from sediment.runtime.signals import DROP, TO_MESSAGE, Terminate, on_exit_signal

# --- exit signals: every combination against the reference manual's rules ----------------


def reference_rule(reason: object, from_link: bool, link_active: bool, trap: bool,
                   from_self: bool) -> object:
    """The rules of ref_man_processes.md, "Receiving Exit Signals", written out again."""
    if from_link and not link_active:
        return DROP
    if not from_link and reason == KILL:
        return Terminate(KILLED)
    if trap:
        return TO_MESSAGE
    if reason == NORMAL:
        return Terminate(NORMAL) if from_self else DROP
    return Terminate(reason)


REASONS = [NORMAL, SHUTDOWN, KILL, KILLED, Shutdown("x"), ("custom", 1)]


@pytest.mark.parametrize(("reason", "from_link", "link_active", "trap", "from_self"),
                         list(itertools.product(REASONS, *[[False, True]] * 4)))
def test_exit_signal_table(reason: object, from_link: bool, link_active: bool, trap: bool,
                           from_self: bool) -> None:
    got = on_exit_signal(reason=reason, from_link=from_link, link_active=link_active,
                         trap_exit=trap, from_self=from_self)
    assert got == reference_rule(reason, from_link, link_active, trap, from_self)


def test_exit_signal_landmarks() -> None:
    # a linked kill is not converted to killed, and a trapping process survives it
    assert on_exit_signal(reason=KILL, from_link=True, link_active=True, trap_exit=False,
                          from_self=False) == Terminate(KILL)
    assert on_exit_signal(reason=KILL, from_link=True, link_active=True, trap_exit=True,
                          from_self=False) == TO_MESSAGE
    # exit(pid, kill) kills a trapping process
    assert on_exit_signal(reason=KILL, from_link=False, link_active=False, trap_exit=True,
                          from_self=False) == Terminate(KILLED)


# --- mailbox -------------------------------------------------------------------------------------


def test_selective_take_and_cursor() -> None:
    box = Mailbox(10)
    for m in ["a", 1, "b"]:
        box.put(m)
    is_int = compile_match(int)
    assert box.take(is_int) == (True, 1)
    assert box.take(is_int) == (False, None)
    box.put(2)
    assert box.take(is_int, resume=True) == (True, 2)  # only the new message was scanned
    assert box.drain() == ["a", "b"]


def test_mailbox_bound_is_a_failure_not_a_drop() -> None:
    box = Mailbox(2)
    box.put(1)
    box.put(2)
    with pytest.raises(MailboxOverflow):
        box.put(3)
    assert box.drain() == [1, 2]


def test_compile_match_rejects_nonsense() -> None:
    with pytest.raises(TypeError):
        compile_match(42)
    assert compile_match((int, str))("x")  # type: ignore[misc]


@given(st.lists(st.one_of(st.integers(), st.text(max_size=2)), max_size=40),
       st.lists(st.sampled_from(["int", "str", "any"]), max_size=40))
def test_mailbox_matches_a_list_model(msgs: list[object], takes: list[str]) -> None:
    box, model = Mailbox(1000), list(msgs)
    for m in msgs:
        box.put(m)
    kinds = {"int": int, "str": str, "any": None}
    for take in takes:
        match = kinds[take]
        got = box.take(compile_match(match))
        idx = next((i for i, m in enumerate(model) if match is None or isinstance(m, match)), None)
        if idx is None:
            assert got == (False, None)
        else:
            assert got == (True, model.pop(idx))
    assert box.drain() == model


# --- reorder buffer -------------------------------------------------------------------------------


@given(st.integers(min_value=0, max_value=2**32), st.integers(min_value=1, max_value=60),
       st.integers(min_value=1, max_value=4))
def test_reorder_restores_per_sender_fifo(seed: int, n: int, senders: int) -> None:
    rng = random.Random(seed)
    envelopes = [(s, i) for s in range(senders) for i in range(1, n + 1)]
    rng.shuffle(envelopes)
    buf = ReorderBuffer(capacity=10_000)
    out: list[tuple[int, int]] = []
    for sender, seq in envelopes:
        out.extend(buf.accept(sender, seq, (sender, seq)))
    for s in range(senders):
        assert [seq for snd, seq in out if snd == s] == list(range(1, n + 1))
    assert len(out) == senders * n


def test_reorder_drops_duplicates_and_bounds_held() -> None:
    buf = ReorderBuffer(capacity=2)
    assert buf.accept("a", 1, "m1") == ["m1"]
    assert buf.accept("a", 1, "m1 again") == []
    assert buf.accept("a", 3, "m3") == []
    assert buf.accept("a", 4, "m4") == []
    with pytest.raises(MailboxOverflow):
        buf.accept("a", 5, "m5")
    assert buf.accept("a", 2, "m2") == ["m2", "m3", "m4"]


def test_after_waits_for_everything_the_sender_sent() -> None:
    buf = ReorderBuffer(capacity=10)
    assert buf.accept("p", 2, "second") == []
    assert buf.after("p", 2, "EXIT") == []  # the exit must not overtake message 1 and 2
    assert buf.accept("p", 1, "first") == ["first", "second", "EXIT"]
    assert buf.after("p", 2, "DOWN") == ["DOWN"]  # already past: immediately


def test_error_reason_survives_unpicklable_exceptions() -> None:
    class Local(Exception):
        def __reduce__(self) -> object:
            raise TypeError("no")

    reason = Error.from_exception(Local("bad"))
    assert reason.kind == "Local" and reason.message == "bad" and reason.exc is None
    assert Error.from_exception(ValueError("v")).exc is not None


def test_metrics_land_in_the_local_registry_outside_ray(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from sediment import metrics
    from sediment.runtime import api

    # other tests of the session may have connected this process to Ray
    monkeypatch.setattr(metrics, "_in_ray", lambda: False)
    metrics.reset()
    rt = api.start("sim", seed=1)
    with pytest.raises(Exception, match="custom"):
        rt.run(_exit_with, ("custom", 1))
    rt.shutdown()
    exits = metrics.snapshot()["sediment_process_exits"]
    assert exits[(("kind", "other"), ("node", "n1"))] == 1


async def _exit_with(ctx: object, reason: object) -> None:
    from sediment.runtime.errors import ProcessExit

    raise ProcessExit(reason)
