"""A raft group of processes changes its members (sim): moved from nodes (n1, n2, n3) to
a fourth node while a writer keeps writing, the new member started from nothing and
caught up by a snapshot install, the old one removed (the leader, in one case) and
stopped; nothing acknowledged is lost, every member ends with the same state and the
new configuration, and a restarted member knows it from its own disk."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import collector, eventually

from sediment.actors.log.kv_machine import KvPut
from sediment.actors.log.raft.types import ConfChange, Membership
from sediment.actors.log.shell.cluster import propose, start_log_cluster, status
from sediment.actors.log.shell.group_spec import GroupSpec
from sediment.actors.log.shell.members import (
    ChangeRefused,
    MemberPlacementError,
    change,
    replace_member,
    start_member,
    stop_member,
    wait_caught_up,
)
from sediment.actors.log.shell.names import raft_name
from sediment.actors.log.shell.protocol import (
    Change,
    Done,
    Failed,
    Found,
    GetKey,
    NotLeader,
    Propose,
    Refused,
)
from sediment.runtime import api
from sediment.runtime.common_calls import Status, UnknownRequest
from sediment.runtime.errors import CallError
from sediment.runtime.process import Process

NODES = ("n1", "n2", "n3", "n4")
WRITES = 120
KEYS = 5


@pytest.fixture
def rt4(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The simulator with a fourth node for the group to move to."""
    runtime = api.start("sim", seed=len(request.node.nodeid), nodes=NODES)
    yield runtime
    runtime.shutdown()


def group(tmp_path: Path) -> GroupSpec:
    # small snapshots and retention: the new member is caught up by an install
    return GroupSpec("g1", ("n1", "n2", "n3"), str(tmp_path / "data"), snapshot_every=20,
                     max_retained=10, segment_max_entries=8, wal_max_size=4096)


async def writer(ctx: Process, group_name: str, count: int, report_to: Any) -> None:
    """Puts k0..k4 one after another, each retried until acknowledged, following the
    leader by its hints among every node; reports (i, index) of each acknowledgement."""
    acked: list[tuple[int, int]] = []
    hint: str | None = None
    for i in range(count):
        command = KvPut(f"k{i % KEYS}", i)
        for attempt in range(2000):
            target = hint or NODES[attempt % len(NODES)]
            hint = None
            try:
                reply = await ctx.call(raft_name(group_name, target), Propose(command),
                                       timeout=2)
            except CallError:
                reply = ("down",)
            if isinstance(reply, Done):
                acked.append((i, reply.index))
                ctx.send(report_to, ("acked", i))
                hint = target
                break
            if isinstance(reply, NotLeader) and reply.hint is not None:
                hint = reply.hint
                continue
            await ctx.sleep(0.05)
        else:
            ctx.send(report_to, ("gave_up", i))
            return
        await ctx.sleep(0.01)
    ctx.send(report_to, ("done", acked))


def leader_of(rt: Any, spec: GroupSpec, nodes: tuple[str, ...]) -> str | None:
    views = status(rt, spec.__class__(spec.group, nodes, spec.data_dir))
    leaders = [v["node"] for v in views.values() if v is not None and v["role"] == "leader"]
    return leaders[0] if len(leaders) == 1 else None


def views_of(rt: Any, spec: GroupSpec, nodes: tuple[str, ...]) -> dict[str, Any]:
    return status(rt, spec.__class__(spec.group, nodes, spec.data_dir))


@pytest.mark.parametrize("old", ["n1", "leader"])
def test_a_group_moves_to_a_new_node_under_writes(rt4: Any, tmp_path: Path, old: str) -> None:
    rt = rt4
    spec = group(tmp_path)
    top = start_log_cluster(rt, [spec])
    for i in range(40):  # history: snapshots, a compacted log
        propose(rt, spec, KvPut(f"k{i % KEYS}", -i))
    sink = rt.spawn(collector, node="n2")
    rt.spawn(writer, spec.group, WRITES, sink, node="n2")

    def acks() -> int:
        return sum(m[0] == "acked" for m in rt.call(sink, "get"))

    assert eventually(rt, lambda: acks() >= 5, timeout=30)  # writes under way
    first = spec.nodes
    if old == "leader":
        leader = leader_of(rt, spec, first)
        assert leader is not None
        old = leader
    everyone = (*first, "n4")
    before = acks()
    start_member(rt, top, spec, "n4")  # from nothing: it waits for the leader
    added = change(rt, spec, "add_learner", "n4", everyone)
    wait_caught_up(rt, spec, "n4", everyone)
    promoted = change(rt, spec, "promote", "n4", everyone)
    removed = change(rt, spec, "remove", old, everyone)
    assert added is not None and promoted is not None and removed is not None
    assert added < promoted < removed
    stop_member(rt, top, spec, old)
    assert rt.whereis(raft_name(spec.group, old)) is None
    during = acks() - before
    assert 0 < during < WRITES - before, (before, during)  # the writes went on meanwhile
    after = tuple(p for p in everyone if p != old)

    assert eventually(rt, lambda: any(m[0] in ("done", "gave_up") for m in rt.call(sink, "get")),
                      timeout=120)
    report = next(m for m in rt.call(sink, "get") if m[0] in ("done", "gave_up"))
    assert report[0] == "done", report
    acked: list[tuple[int, int]] = report[1]
    assert len(acked) == WRITES

    def converged() -> bool:
        views = views_of(rt, spec, after)
        return all(v is not None and v["applied"] == v["commit"] for v in views.values()) \
            and len({tuple(sorted(v["keys"].items())) for v in views.values()}) == 1

    assert eventually(rt, converged, timeout=60), views_of(rt, spec, after)
    views = views_of(rt, spec, after)
    for node, view in views.items():
        assert set(view["voters"]) == set(after) and view["learners"] == (), (node, view)
    assert views["n4"]["installs"] >= 1, views["n4"]  # caught up from a snapshot
    # nothing acknowledged is lost: each key holds its last write, at or after its ack
    last: dict[str, tuple[int, int]] = {}
    for i, index in acked:
        last[f"k{i % KEYS}"] = (i, index)
    for node in after:
        keys = views[node]["keys"]
        for key, (i, index) in last.items():
            assert keys[key] >= index, (node, key, keys[key], index)
            assert rt.call(raft_name(spec.group, node), GetKey(key)) == Found(i), (node, key)

    # a member restarted from its own disk knows the configuration: from its snapshot,
    # taken past the last change, not from its log
    moved = spec.__class__(spec.group, after, spec.data_dir)
    for i in range(spec.snapshot_every + 5):
        propose(rt, moved, KvPut("later", i))
    assert eventually(rt, lambda: rt.call(raft_name(spec.group, "n4"), Status())[
        "snapshot_index"] > removed, timeout=60)
    rt.kill(rt.whereis(raft_name(spec.group, "n4")))
    assert eventually(rt, lambda: rt.whereis(raft_name(spec.group, "n4")) is not None,
                      timeout=30)
    view = rt.call(raft_name(spec.group, "n4"), Status())
    assert set(view["voters"]) == set(after)
    index, _ = propose(rt, moved, KvPut("z", 1))
    assert eventually(rt, lambda: all(
        v is not None and v["keys"].get("z") == index for v in views_of(rt, spec, after).values()),
        timeout=60)


def test_bad_changes_get_typed_errors_and_change_nothing(rt4: Any, tmp_path: Path) -> None:
    rt = rt4
    spec = group(tmp_path)
    top = start_log_cluster(rt, [spec])
    propose(rt, spec, KvPut("k", 1))
    with pytest.raises(ChangeRefused) as refused:
        change(rt, spec, "demote", "n2", spec.nodes)
    assert refused.value.reason == "unknown_op"
    leader = leader_of(rt, spec, spec.nodes)
    assert leader is not None
    server = raft_name(spec.group, leader)
    assert rt.call(server, Change("promote", "n2")) == Refused("not_a_learner")
    assert rt.call(server, Change("remove", "n9")) == Refused("not_a_member")
    # the driver treats a change whose outcome holds already as done (a retry after a
    # lost reply): n2 is a voter
    assert change(rt, spec, "promote", "n2", spec.nodes) is None
    assert rt.call(server, ("change", "add_learner")) == UnknownRequest("('change', 'add_learner')")
    raw = ConfChange("remove", "n2", Membership(("n1", "n3")))
    assert rt.call(server, Propose(raw)) == Failed("bad_proposal")
    with pytest.raises(MemberPlacementError):
        start_member(rt, top, spec, "n2")  # it runs the group's processes already
    for view in status(rt, spec).values():
        assert view is not None and view["voters"] == spec.nodes and view["learners"] == ()


def test_replace_member_runs_the_whole_move(rt4: Any, tmp_path: Path) -> None:
    rt = rt4
    spec = group(tmp_path)
    top = start_log_cluster(rt, [spec])
    for i in range(30):
        propose(rt, spec, KvPut(f"k{i % KEYS}", i))
    after = replace_member(rt, top, spec, "n2", "n4", spec.nodes)
    assert after == ("n1", "n3", "n4")
    moved = GroupSpec(spec.group, after, spec.data_dir)
    index, _ = propose(rt, moved, KvPut("k0", "new"))
    assert eventually(rt, lambda: all(v is not None and v["keys"]["k0"] == index
                                      for v in status(rt, moved).values()), timeout=60)
    assert status(rt, moved)["n4"]["voters"] == after


def test_an_installed_snapshot_gives_a_restarted_member_its_configuration(
        rt4: Any, tmp_path: Path) -> None:
    """n4 is added as a learner before its processes start; the group's snapshots move
    past the change, so n4 is caught up by an install whose snapshot is its only record
    of the configuration. Restarted at once, it still knows it is a learner."""
    rt = rt4
    spec = group(tmp_path)
    top = start_log_cluster(rt, [spec])
    propose(rt, spec, KvPut("k", 0))
    added = change(rt, spec, "add_learner", "n4", spec.nodes)
    assert added is not None
    for i in range(spec.snapshot_every + spec.max_retained + 10):
        propose(rt, spec, KvPut(f"k{i % KEYS}", i))
    everyone = (*spec.nodes, "n4")
    start_member(rt, top, spec, "n4")
    wait_caught_up(rt, spec, "n4", everyone)
    view = rt.call(raft_name(spec.group, "n4"), Status())
    assert view["installs"] == 1 and view["snapshot_index"] > added, view
    rt.kill(rt.whereis(raft_name(spec.group, "n4")))
    assert eventually(rt, lambda: rt.whereis(raft_name(spec.group, "n4")) is not None,
                      timeout=30)
    view = rt.call(raft_name(spec.group, "n4"), Status())
    assert (view["voters"], view["learners"]) == (spec.nodes, ("n4",)), view
    assert change(rt, spec, "promote", "n4", everyone) is not None
