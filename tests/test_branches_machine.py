"""A branch under concurrent writes, commits, compactions, resets and reads, with any
of them killed at any KV request, against the model. Two drivers pick which flow takes
its next KV request: a seeded simulation over many seeds (`SEDIMENT_SIM_SEEDS`,
default 300), and a hypothesis state machine (which shrinks a failure to a short
schedule). Every read any flow made, and a final full read, go through the branch
checker: reads equal the model, no acknowledged write lost, one winner per SetIf race.

The mutation check at the end proves the sweep fails when a rule of the protocol is
broken (step 3 without its "sealed tokens changed" check, a write without its
compare, reads not pinned at their snapshot)."""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from branches_helpers import Flow, Flows, Lake, make_lake
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from sediment.actors.branches import branch as br
from sediment.actors.branches import commits, compactor, reads
from sediment.actors.branches.entry import Entry
from sediment.actors.branches.errors import (
    CompactionConflict,
    CompactionThrottled,
    NoChanges,
    NothingToCompact,
    ObjectNotFound,
    TooManyTries,
)
from sediment.actors.branches.ports import run_sync
from sediment.scenarios.checkers.branch_reads import check_branch_reads
from sediment.scenarios.checkers.result import CheckResult

R, B = "repo1", "main"
EXPECTED = (CompactionConflict, CompactionThrottled, NoChanges, NothingToCompact,
            ObjectNotFound, TooManyTries)
PATH_CHOICES = ["a", "a/1", "a/2", "b", "b/1", "c"]
OPS = ["write", "write", "write", "rm", "commit", "compact", "compact", "reset", "get",
       "ls", "diff"]
MAX_RUNNING = 6


def start_op(lake: Lake, flows: Flows, op: str, rng: random.Random) -> None:
    """Start flow `op` with arguments drawn from `rng`."""
    t = lake.stepped
    path = rng.choice(PATH_CHOICES)
    makers: dict[str, Callable[[], Any]] = {
        "write": lambda: commits.stage(t, R, B, path, Entry(f"s3://{rng.choice('xyz')}", 1, "c")),
        "rm": lambda: commits.stage(t, R, B, path, None),
        "commit": lambda: commits.commit(t, R, B, "m", allow_empty=rng.random() < 0.2),
        "compact": lambda: compactor.compact(t, R, B, force=rng.random() < 0.5),
        "reset": lambda: commits.reset(t, R, B),
        "get": lambda: reads.get_entry(t, R, B, path),
        "ls": lambda: reads.list_entries(t, R, B, rng.choice(["", "a", "a/"]),
                                         rng.choice(["", "a", "a/1", "b"]), rng.randint(1, 4)),
        "diff": lambda: reads.diff_uncommitted(t, R, B, rng.choice(["", "a/"]),
                                               rng.choice(["", "a/1"]), rng.randint(1, 4)),
    }
    flows.start(op, makers[op]())


def check_flow(flow: Flow) -> None:
    if flow.done and flow.error is not None and not isinstance(flow.error, EXPECTED):
        raise flow.error


def finish(lake: Lake, flows: Flows) -> CheckResult:
    """Drain the flows, read everything once more, check the history."""
    flows.drain()
    for flow in flows.finished:
        check_flow(flow)
    run_sync(reads.list_entries(lake.api.tier, R, B, "", "", 1000))
    run_sync(reads.diff_uncommitted(lake.api.tier, R, B, "", "", 1000))
    return check_branch_reads(lake.history.events)


def simulate(seed: int, steps: int = 60) -> CheckResult:
    rng = random.Random(seed)
    lake = make_lake(seed=seed)
    try:
        lake.api.repo_create(R)
        flows = Flows()
        for _ in range(steps):
            x = rng.random()
            if x < 0.35 and len(flows.running) < MAX_RUNNING:
                start_op(lake, flows, rng.choice(OPS), rng)
            elif x < 0.96 and flows.running:
                flows.step(rng.choice(flows.running))
            elif flows.running:
                flows.kill(rng.choice(flows.running))
            else:
                lake.clock.advance(rng.choice([1.0, 100.0]))
        return finish(lake, flows)
    finally:
        lake.close()


SEEDS = int(os.environ.get("SEDIMENT_SIM_SEEDS", "300"))


def test_seeded_simulation_of_a_branch_under_races_and_kills() -> None:
    failures = [(seed, r.report()) for seed in range(SEEDS) if not (r := simulate(seed)).ok]
    assert not failures, failures[:3]


@contextmanager
def broken(target: Any, name: str, replacement: Any) -> Iterator[None]:
    original = getattr(target, name)
    setattr(target, name, replacement)
    try:
        yield
    finally:
        setattr(target, name, original)


def _finish_without_check(current: br.Branch, started: br.Branch, metarange: str) -> br.Branch:
    return br.Branch(current.commit_id, current.staging_token, (), metarange,
                     current.compaction_start_time)


@pytest.mark.parametrize("mutation", ["step3_no_check", "write_no_compare", "reads_unpinned"])
def test_the_simulation_catches_a_broken_protocol(mutation: str) -> None:
    from sediment.actors.branches import staging as stg

    if mutation == "step3_no_check":
        ctx = broken(br, "finish_compaction", _finish_without_check)
    elif mutation == "write_no_compare":
        ctx = broken(stg.Staging, "write", _write_without_compare)
    else:
        original_get = stg.Staging.get

        async def unpinned(self: Any, repo: str, tokens: Any, path: str, at: int) -> Any:
            return await original_get(self, repo, tokens, path, 0)

        ctx = broken(stg.Staging, "get", unpinned)
    with ctx:
        bad = [seed for seed in range(SEEDS) if not simulate(seed).ok]
    assert bad, f"{mutation}: no seed of {SEEDS} noticed"


async def _write_without_compare(self: Any, repo: str, branch: str, path: str,
                                 entry: Entry | None) -> Any:
    from sediment.actors.branches import names as nm
    from sediment.actors.branches.entry import encode_value
    from sediment.actors.branches.history import Staged
    from sediment.actors.branches.staging import StagedWrite
    from sediment.actors.kv.types import Put, Txn

    read = await self.refs.get_branch(repo, branch)
    token = read.branch.staging_token
    res = await self.kv.txn(Txn((), (Put(nm.staging_key(repo, token, path),
                                         encode_value(entry)),)))
    self.recorder.record(Staged(repo, branch, path, entry, token, res.revision))
    return StagedWrite(token, res.revision, len(read.branch.sealed_tokens))


class BranchMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.lake = make_lake()
        self.lake.api.repo_create(R)
        self.flows = Flows()

    @precondition(lambda self: len(self.flows.running) < MAX_RUNNING)
    @rule(op=st.sampled_from(OPS), seed=st.integers(0, 2**16))
    def start(self, op: str, seed: int) -> None:
        start_op(self.lake, self.flows, op, random.Random(seed))

    @precondition(lambda self: bool(self.flows.running))
    @rule(i=st.integers(0, MAX_RUNNING - 1), n=st.integers(1, 6))
    def step(self, i: int, n: int) -> None:
        flow = self.flows.running[i % len(self.flows.running)]
        for _ in range(n):
            if flow not in self.flows.running:
                break
            self.flows.step(flow)
        check_flow(flow)

    @precondition(lambda self: bool(self.flows.running))
    @rule(i=st.integers(0, MAX_RUNNING - 1))
    def kill(self, i: int) -> None:
        self.flows.kill(self.flows.running[i % len(self.flows.running)])

    @rule(seconds=st.sampled_from([1.0, 100.0]))
    def tick(self, seconds: float) -> None:
        self.lake.clock.advance(seconds)

    def teardown(self) -> None:
        try:
            result = finish(self.lake, self.flows)
            assert result.ok, result.report()
        finally:
            self.lake.close()


BranchMachine.TestCase.settings = settings(
    max_examples=100, stateful_step_count=60, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
test_branch_machine = BranchMachine.TestCase
