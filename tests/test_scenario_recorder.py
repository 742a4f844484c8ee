"""The scenario run's recorder speaks `recorder_protocol.py`: typed reports in, typed
questions answered; an untyped tuple is no report any more."""

from __future__ import annotations

from sediment.actors.kv.types import Put
from sediment.runtime import Status, UnknownRequest, start
from sediment.runtime.pid import Pid
from sediment.scenarios import processes
from sediment.scenarios import recorder_protocol as rp


def _op(revision: int) -> processes.OpRecord:
    result = type("R", (), {"revision": revision})()
    return processes.OpRecord(1, "put", Put(b"k", b"v"), 0.0, 0.1, "ok", result, 3)


def test_the_recorder_keeps_typed_reports_and_answers_typed_questions() -> None:
    with start("sim", nodes=("n1",), seed=1) as rt:
        recorder = rt.spawn(processes.recorder, node="n1")
        rt.send(recorder, rp.OpDone(_op(7)))
        rt.send(recorder, rp.SessionOpened(2, Pid("n1", "9"), "n1"))
        rt.send(recorder, rp.EntriesRead((processes.Entry(1, None, 0.2),)))
        rt.send(recorder, rp.Finished("client-1"))
        rt.send(recorder, ("op", _op(9)))  # the old tuple: ignored
        assert rt.call(recorder, rp.HeadRevision()) == 7
        assert rt.call(recorder, rp.Sessions()) == {2: (Pid("n1", "9"), "n1")}
        assert rt.call(recorder, rp.LastSample()) is None
        assert rt.call(recorder, rp.FiredFailpoints()) == {}
        status = rt.call(recorder, Status())
        assert (status["ops"], status["entries"], status["done"]) == (1, 1, ["client-1"])
        dump = rt.call(recorder, rp.TakeDump())
        assert [op.result.revision for op in dump.ops] == [7]
        assert rt.call(recorder, ("dump",)) == UnknownRequest("('dump',)")
