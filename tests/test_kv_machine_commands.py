"""The reference machine's typed commands (`actors/log/kv_machine.py`) and the previous
release's tuple form: raft logs hold commands pickled, so a log written before the
commands were typed must still replay to the same state and results."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

from runtime_helpers import eventually

from sediment.actors.log import kv_machine as kv
from sediment.actors.log.raft.types import Entry
from sediment.actors.log.shell.cluster import propose, start_log_cluster, status
from sediment.actors.log.shell.codec import from_stored, to_stored
from sediment.actors.log.shell.group_spec import GroupSpec
from sediment.actors.log.shell.names import raft_name
from sediment.actors.log.shell.protocol import Found, GetKey
from sediment.actors.log.storage.records import Entry as Stored

RT_BACKENDS = ("sim",)

OLD = [("put", "a", "1"), ("put", "b", "2"), ("put", "a", "3"), ("get", "a"),
       ("delete", "b"), ("get", "b"), None]
TYPED = [kv.KvPut("a", "1"), kv.KvPut("b", "2"), kv.KvPut("a", "3"), kv.KvGet("a"),
         kv.KvDelete("b"), kv.KvGet("b"), None]
# what the previous release's codec stored for ("put", "a", "1") and ("delete", "a"):
# pickle protocol 5 of the tuples, kept as bytes so a change to either side shows here
OLD_PUT_PAYLOAD = bytes.fromhex("80059511000000000000008c03707574948c0161948c01319487942e")
OLD_DELETE_PAYLOAD = bytes.fromhex("80059510000000000000008c0664656c657465948c01619486942e")


def _replay(commands: list[Any]) -> tuple[kv.KvState, list[Any]]:
    state, results = kv.initial(), []
    for i, cmd in enumerate(commands, start=1):
        state, result = kv.apply(state, Entry(i, 1, 0.0, cmd))
        results.append(result)
    return state, results


def test_an_old_form_log_replays_to_the_typed_logs_state_and_results() -> None:
    assert [kv.decode_command(c) for c in OLD if c is not None] == [
        c for c in TYPED if c is not None]
    old_state, old_results = _replay(OLD)
    typed_state, typed_results = _replay(TYPED)
    assert old_state == typed_state and old_results == typed_results
    assert typed_results == [1, 2, 3, 3, 2, None, None]
    assert kv.snapshot(old_state) == kv.snapshot(typed_state)  # snapshots unchanged too


def test_stored_entries_of_the_previous_release_decode_and_apply() -> None:
    put = from_stored(Stored(1, 1, 0, OLD_PUT_PAYLOAD))
    delete = from_stored(Stored(2, 1, 0, OLD_DELETE_PAYLOAD))
    assert put.command == ("put", "a", "1") and kv.put_value(put.command) == "1"
    state, result = kv.apply(kv.initial(), put)
    assert result == 1 and state.keys == {"a": 1}
    state, result = kv.apply(state, delete)
    assert result == 1 and state.keys == {}
    # typed commands go to disk as themselves and come back equal
    typed = Entry(3, 1, 0.0, kv.KvPut("a", "x"))
    assert from_stored(to_stored(typed)).command == kv.KvPut("a", "x")
    assert pickle.loads(to_stored(typed).payload) == kv.KvPut("a", "x")


def test_commands_the_machine_does_not_know_are_refused_and_change_nothing() -> None:
    state, _ = kv.apply(kv.initial(), Entry(1, 1, 0.0, kv.KvPut("a", "1")))
    for bad in [("bogus",), "junk", ("put", "a"), ("put", 1, "x"), (), ("get", "a", "b")]:
        after, result = kv.apply(state, Entry(2, 1, 0.0, bad))
        assert after == state and isinstance(result, kv.KvRefused), bad
    assert kv.put_value(kv.KvGet("a")) is None and kv.put_value(("put", "a", 7)) == 7


def test_a_group_whose_log_holds_both_forms_recovers_a_killed_node(rt: Any,
                                                                    tmp_path: Path) -> None:
    """Entries proposed in the old form (as the previous release wrote them) and typed
    ones share a WAL; a node killed and restarted replays both and reads the values."""
    spec = GroupSpec("g1", ("n1", "n2", "n3"), str(tmp_path / "data"))
    start_log_cluster(rt, [spec])
    keys: dict[str, int] = {}
    for i in range(6):
        cmd: Any = ("put", f"k{i}", i) if i % 2 else kv.KvPut(f"k{i}", i)
        keys[f"k{i}"] = propose(rt, spec, cmd)[0]
    rt.kill_node("n3")
    keys["k6"] = propose(rt, spec, kv.KvPut("k6", 6))[0]
    assert propose(rt, spec, ("delete", "k1"))[1] == keys.pop("k1")

    def converged() -> bool:
        return all(v is not None and v["keys"] == keys and v["applied"] == v["commit"]
                   for v in status(rt, spec).values())

    assert eventually(rt, converged, timeout=60)
    for k in keys:
        got = rt.call(raft_name(spec.group, "n3"), GetKey(k), timeout=10)
        assert got == Found(int(k[1:]))
