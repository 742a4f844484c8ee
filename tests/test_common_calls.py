"""`Status()` and `UnknownRequest`: the one status call every process answers and the one
answer to a request a process does not know, shared by every shell."""

from __future__ import annotations

import pickle

from sediment.runtime import Status, UnknownRequest, start
from sediment.scenarios import processes
from sediment.supervision import SupFlags, start_top
from sediment.supervision.requests import WhichChildren


def test_unknown_request_keeps_a_short_repr_and_pickles() -> None:
    answer = UnknownRequest.of(("frobnicate", "x" * 1000))
    assert answer.request.startswith("('frobnicate', 'xxx") and len(answer.request) == 200
    assert pickle.loads(pickle.dumps(answer)) == answer
    assert pickle.loads(pickle.dumps(Status())) == Status()


def test_a_process_answers_status_and_a_typed_unknown_request() -> None:
    with start("sim", nodes=("n1",), seed=1) as rt:
        recorder = rt.spawn(processes.recorder, node="n1")
        status = rt.call(recorder, Status())
        assert status["ops"] == 0 and status["done"] == []
        # the old tuple is no status call any more: it is a request like any other
        assert rt.call(recorder, ("status",)) == UnknownRequest("('status',)")


def test_the_supervisor_answers_an_unknown_request_typed() -> None:
    with start("sim", nodes=("n1",), seed=1) as rt:
        sup = start_top(rt, SupFlags(), [], node="n1")
        assert rt.call(sup, WhichChildren()) == []
        assert rt.call(sup, ("frobnicate",)) == UnknownRequest("('frobnicate',)")
