"""A host's typed answers to a call from the driver (`runtime/ray/transport.py`):
`CallReplied(value)` or `CallEnded(reason)`, turned into the reply or the typed error
by `call_result`. Pure: no Ray runtime starts here (the Ray tests run the real path)."""

from __future__ import annotations

import pickle

import pytest

from sediment.runtime.errors import CallExit, NoProc
from sediment.runtime.pid import Pid
from sediment.runtime.ray.transport import CallEnded, CallReplied, call_result
from sediment.runtime.reasons import KILLED, NOPROC

DEST = Pid("n1", "p1")


def test_a_reply_is_returned_as_it_came_even_a_tuple_that_looks_like_a_status() -> None:
    assert call_result(DEST, CallReplied(42)) == 42
    assert call_result(DEST, CallReplied(("exit", "killed"))) == ("exit", "killed")
    assert call_result(DEST, CallReplied(None)) is None


def test_a_process_that_was_not_there_is_noproc() -> None:
    with pytest.raises(NoProc):
        call_result(DEST, CallEnded(NOPROC))


def test_a_process_that_ended_before_it_replied_is_a_call_exit_with_its_reason() -> None:
    with pytest.raises(CallExit) as raised:
        call_result(DEST, CallEnded(KILLED))
    assert raised.value.reason == KILLED and raised.value.target == DEST


def test_the_answers_cross_a_process_boundary_unchanged() -> None:
    for answer in (CallReplied({"k": (1, 2)}), CallEnded(KILLED), CallEnded(NOPROC)):
        assert pickle.loads(pickle.dumps(answer)) == answer
