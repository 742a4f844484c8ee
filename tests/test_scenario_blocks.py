"""Scenarios of the KV's block tier: `cluster.blocks` in the scenario file, the tier's
checks (`blocks_exactly_once`, `history_reads`) and the tier's library scenarios.

Pure parts first: the schema's new keys (accepted, round-tripped, refused with the file,
line and column), the `BlockTier` a spec starts, the read sample, and each checker on
planted violations and on clean states. Then whole runs on `sim`: every tier scenario of
the library passes for two seeds with the evidence that its faults did what it says,
and bugs planted in the system (a flusher that skips a row, a coordinator that ignores
the flush hold, history reads that return a wrong value) are caught end to end. A `ray`
parametrization of two scenarios runs with the session's Ray cluster (`-m "not ray"`
skips it).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from sediment.actors.kv.types import Event, KeyValue
from sediment.scenarios import report, schema, tier
from sediment.scenarios.checkers import blocks_exactly_once as beo
from sediment.scenarios.checkers import history_reads as hr
from sediment.scenarios.checkers import run as run_checks
from sediment.scenarios.checkers.tier_state import (
    BlockRow,
    HistoryRead,
    HoldSample,
    TierState,
)
from sediment.scenarios.history import History
from sediment.scenarios.runner import RunResult, run_scenario
from sediment.scenarios.schema_blocks import BlocksSpec, FlushSpec, LevelSpec
from sediment.scenarios.tier_collect import sample_reads
from sediment.scenarios.traffic import KEY_PREFIX, KEYSPACE_END

LIBRARY = Path(__file__).resolve().parents[1] / "scenarios" / "library"
TIER_SCENARIOS = ("compaction-worker-killed-holding-lease", "compaction-worker-paused-past-lease",
                  "metastore-leader-killed-mid-plan", "flusher-killed-before-add",
                  "kv-leader-killed-flusher-behind")
RAY_TIER_SUBSET = ("compaction-worker-killed-holding-lease",)  # about 100 s on Ray here
HEAD = "name: b\nduration: 5\n"


# ---- the schema -----------------------------------------------------------------------------


def test_blocks_defaults_round_trip_and_add_the_tier_checks() -> None:
    s = schema.loads(HEAD + "cluster:\n  blocks: {}\n")
    assert s.cluster.blocks == BlocksSpec()
    assert s.checks == (*schema.CHECKS, *schema.TIER_CHECKS)
    assert schema.load_dict(s.to_dict()) == s
    bare = schema.loads(HEAD + "cluster:\n  blocks:\n")  # no value: every default
    assert bare.cluster.blocks == BlocksSpec()
    assert schema.loads(HEAD).cluster.blocks is None
    assert schema.loads(HEAD).checks == schema.CHECKS


def test_every_blocks_key_is_read_and_round_trips() -> None:
    s = schema.loads(HEAD + """cluster:
  settings: {election_timeout: [0.3, 0.6], heartbeat_interval: 0.05, wal_max_size: 8192}
  blocks:
    shards: 3
    flush: {max_rows: 0, max_bytes: 4096, max_age: 0.25}
    flush_tick: 0.1
    read_batch: 50
    levels: [{max_blocks: 2}, {max_blocks: 4, max_age: 3}]
    cleanup_delay: 0
    cleanup_interval: 0.5
    lease_duration: 1.5
    max_failures: 2
    workers_per_node: 3
    capacity: 4
    poll_interval: 0.25
    executor: pyarrow
    history_compaction: {every: 1, keep: 7}
faults:
  - {at: 1, kill_process: {role: flusher}, when: {trigger: flush_behind, within: 2}}
  - {at: 1, pause_process: {role: compaction_worker, node: n2}, until: 4, when: job_leased}
  - {at: 2, kill_process: {role: metastore_leader}}
  - {at: 2, restart_process: {role: metastore, node: n3}}
  - {at: 3, failpoint: {role: compaction_service, point: blocks.service.after_prepare}}
  - {at: 3, kill_process: {role: blocks_node}, until: 4}
  - {at: 3, kill_process: {role: flush_node, node: n1}}
checks: [blocks_exactly_once, history_reads, linearizable]
""")
    b = s.cluster.blocks
    assert b is not None
    assert (b.shards, b.flush, b.flush_tick, b.read_batch) == (3, FlushSpec(0, 4096, 0.25), 0.1, 50)
    assert b.levels == (LevelSpec(2, 0.0), LevelSpec(4, 3.0))
    assert (b.cleanup_delay, b.cleanup_interval, b.lease_duration, b.max_failures) == (
        0.0, 0.5, 1.5, 2)
    assert (b.workers_per_node, b.capacity, b.poll_interval, b.executor) == (3, 4, 0.25,
                                                                            "pyarrow")
    assert b.history_compaction is not None and b.history_compaction.keep == 7
    assert [f.action.target.role for f in s.faults if hasattr(f.action, "target")] == [
        "flusher", "compaction_worker", "metastore_leader", "metastore", "compaction_service",
        "blocks_node", "flush_node"]
    assert s.faults[0].when == schema.When("flush_behind", 2.0)
    assert schema.load_dict(s.to_dict()) == s

    t = tier.block_tier(b, s.cluster.settings)
    assert (t.shards, t.workers_per_node, t.read_batch, t.flush_tick) == (3, 3, 50, 0.1)
    assert (t.flush.max_rows, t.flush.max_bytes, t.flush.max_age) == (0, 4096, 0.25)
    assert [(lv.max_blocks, lv.max_age) for lv in t.planner.levels] == [(2, 0.0), (4, 3.0)]
    assert t.planner.cleanup_delay == 0.0
    assert (t.scheduler.lease_duration, t.scheduler.max_failures) == (1.5, 2)
    assert (t.worker.capacity, t.worker.poll_interval) == (4, 0.25)
    assert t.tuning == {"cleanup_interval": 0.5}
    assert t.group_options == {"election_timeout": (0.3, 0.6), "heartbeat_interval": 0.05,
                               "wal_max_size": 8192}


BAD = [
    ("cluster:\n  blocks: {shard: 2}\n", "4:12: cluster.blocks.shard: unknown key (did you mean "
     "'shards'?)"),
    ("cluster:\n  blocks: {shards: 0}\n", "4:20: cluster.blocks.shards: must be an integer in "
     "[1, 64], got 0"),
    ("cluster:\n  blocks: {executor: spark}\n", "4:22: cluster.blocks.executor: must be one of "
     "pyarrow, got 'spark'"),
    ("cluster:\n  blocks: {flush: {max_rows: 0, max_age: 0}}\n", "4:19: cluster.blocks.flush: "
     "at least one of max_rows, max_bytes, max_age must be above 0"),
    ("cluster:\n  blocks: {lease_duration: 0.5}\n", "4:28: cluster.blocks.lease_duration: must "
     "be a number >= 1 and <= 3600, got 0.5"),
    ("cluster:\n  blocks: {levels: []}\n", "4:20: cluster.blocks.levels: must not be empty"),
    ("cluster:\n  blocks: {levels: [{max_age: 1}]}\n", "4:21: cluster.blocks.levels[0]."
     "max_blocks: is required"),
    ("cluster:\n  blocks: {history_compaction: {every: 9}}\n", "4:40: cluster.blocks."
     "history_compaction.every: must be a number >= 0.01 and <= 5, got 9"),
    ("cluster:\n  blocks: []\n", "4:11: cluster.blocks: must be a mapping, got a list"),
    ("cluster:\n  blocks: {}\ntraffic: {compactions: {every: 1}}\n", "5:24: traffic."
     "compactions: client Compacts go straight to raft and bypass the block tier's flush "
     "hold"),
    ("faults:\n  - {at: 1, kill_process: {role: flusher}}\n", "4:34: faults[0].kill_process."
     "role: 'flusher' belongs to the block tier: it needs cluster.blocks"),
    ("faults:\n  - {at: 1, heal: , when: job_leased}\n", "4:27: faults[0].when: 'job_leased' "
     "belongs to the block tier: it needs cluster.blocks"),
    ("checks: [history_reads]\n", "3:10: checks[0]: 'history_reads' belongs to the block tier: "
     "it needs cluster.blocks"),
    ("cluster:\n  blocks: {}\nfaults:\n  - {at: 1, kill_process: {role: flusher, node: n1}}\n",
     "6:49: faults[0].kill_process.node: a flusher runs on one node only, found when the "
     "fault fires; drop node"),
    ("cluster:\n  blocks: {}\nfaults:\n  - {at: 1, kill_process: {role: compaction_worker}, "
     "until: 2}\n", "6:61: faults[0].until: a compaction_worker is one of its pool's workers"),
    ("cluster:\n  blocks: {}\nfaults:\n  - {at: 1, heal: , when: {trigger: soon}}\n",
     "6:37: faults[0].when.trigger: must be one of notice, compact_entry, physical_compaction,"
     " snapshot_install, job_leased, flush_behind, got 'soon'"),
    ("cluster:\n  blocks: {}\nchecks: [serializable]\n", "5:10: checks[0]: must be one of "
     "linearizable, watch_guarantees, no_lost_writes, compaction_safe, revisions_monotonic, "
     "blocks_exactly_once, history_reads, got 'serializable'"),
]


@pytest.mark.parametrize("text, expected", BAD, ids=[e for _, e in BAD])
def test_bad_blocks_keys_name_the_line_and_the_field(text: str, expected: str) -> None:
    with pytest.raises(schema.ScenarioError) as err:
        schema.loads(HEAD + text, source="t.yaml")
    assert str(err.value).startswith("t.yaml:" + expected), str(err.value)


def test_the_readme_documents_the_blocks_mapping() -> None:
    text = (LIBRARY / "README.md").read_text()
    examples = [b.split("```", 1)[0] for b in text.split("```yaml\n")[1:]]
    tiered = [e for e in examples if "blocks:" in e]
    assert tiered, "the README has no cluster.blocks example"
    s = schema.loads(tiered[0], source="README.md")
    assert s.cluster.blocks is not None and s.checks[-2:] == schema.TIER_CHECKS
    for key in ("flush_tick", "lease_duration", "workers_per_node", "history_compaction",
                "job_leased", "flush_behind", "blocks_exactly_once", "history_reads",
                "compaction_worker", "metastore_leader"):
        assert key in text, key


# ---- the checkers ---------------------------------------------------------------------------


def put(key: bytes, value: bytes, rev: int, create: int, version: int) -> Event:
    return Event("put", KeyValue(key, value, create, rev, version))


def delete(key: bytes, rev: int) -> Event:
    return Event("delete", KeyValue(key, b"", 0, rev, 0))


A, B = KEY_PREFIX + b"a", KEY_PREFIX + b"b"
TRUTH = [put(A, b"a1", 2, 2, 1), put(B, b"b1", 3, 3, 1), put(A, b"a2", 5, 2, 2),
         delete(B, 6), put(B, b"b2", 8, 8, 1), put(A, b"a3", 9, 2, 3)]


def rows_of(events: list[Event], block: str = "blk") -> tuple[BlockRow, ...]:
    return tuple(BlockRow(e.kv.mod_revision, e.kv.key,
                          e.kv.value if e.kind == "put" else None, block) for e in events)


def clean(**kw: Any) -> TierState:
    """Every row flushed and in one block, the KV compacted through 8, head 9."""
    base: dict[str, Any] = dict(
        rows=rows_of(TRUTH), blocks=1, levels={0: 1}, cursor=9, floor=0,
        kv_compacts={"n1": 8, "n2": 8, "n3": 7}, hot=((9, A, b"a3"),), hot_from=8, head=9,
        samples=(HoldSample(1.0, 3, 5), HoldSample(2.0, 8, 9)))
    return TierState(**{**base, **kw})


def test_exactly_once_passes_a_clean_tier_and_rows_merged_away_legitimately() -> None:
    assert beo.check(TRUTH, clean()).ok
    # blocks compacted at 6: A@2 (superseded by A@5 <= 6) and B@3 (by the delete at 6) go
    merged = [e for e in TRUTH if (e.kv.mod_revision, e.kv.key) not in {(2, A), (3, B)}]
    assert beo.check(TRUTH, clean(rows=rows_of(merged), floor=6)).ok
    # not yet flushed, still hot above the KV's compaction
    assert beo.check(TRUTH, clean(rows=rows_of(TRUTH[:-1]), cursor=8, hot_from=8)).ok


@pytest.mark.parametrize("state, words", [
    (clean(rows=rows_of(TRUTH) + rows_of(TRUTH[2:3], "other")), "duplicate: k/a@5 is in 2 "
     "live blocks: blk, other"),
    (clean(rows=rows_of(TRUTH) + (BlockRow(7, A, b"x", "blk"),)), "stray: block blk holds "
     "k/a@7, which the log never committed"),
    (clean(rows=rows_of(TRUTH[:2]) + (BlockRow(5, A, b"zz", "blk"),) + rows_of(TRUTH[3:])),
     "stray: block blk holds k/a@5 = b'zz', the log committed b'a2'"),
    (clean(rows=rows_of(TRUTH[:1] + TRUTH[2:])), "lost: k/b@3 is in no live block, though "
     "the flush cursor says every revision through 9 is"),
    (clean(rows=rows_of(TRUTH[1:]), floor=1), "lost: k/a@2 is in no live block"),
    (clean(rows=rows_of(TRUTH[:-1]), cursor=8, hot=(), hot_from=9, kv_compacts={"n1": 9}),
     "hold: KV member n1 compacted through 9, above the flush cursor 8"),
    (clean(samples=(HoldSample(1.5, 6, 5),)), "hold: at 1.500 s a KV member had compacted "
     "through 6, above the committed flush cursor 5"),
    (clean(hot=((9, A, b"old"),)), "hot store: k/a@9 = b'old', the log committed b'a3'"),
    (clean(hot=()), "hot store: k/a@9 is missing above its compaction (8)"),
    (clean(rows=rows_of(TRUTH[:3]), unreadable=("blk2: MissingBlock: gone",)),
     "unreadable: live block blk2: MissingBlock: gone"),
])
def test_exactly_once_catches_planted_violations(state: TierState, words: str) -> None:
    result = beo.check(TRUTH, state)
    assert result.status == "violation"
    assert words in " | ".join([result.explanation, *result.details]), result.report()
    assert result.details[-1].startswith("6 committed rows")  # the summary comes last


def test_exactly_once_cannot_judge_what_it_could_not_read() -> None:
    assert beo.check(TRUTH, None).status == "unknown"
    partial = beo.check(TRUTH, TierState(complete=False, notes=("no index",)))
    assert partial.status == "unknown" and partial.details == ("no index",)


def rng_read(kind: str, rev: int, **kw: Any) -> HistoryRead:
    key = kw.pop("key", KEY_PREFIX)
    end = kw.pop("range_end", KEYSPACE_END if key == KEY_PREFIX else None)
    return HistoryRead(kind, rev, key, end, **kw)  # type: ignore[arg-type]


def test_history_reads_pass_when_answers_match_the_log() -> None:
    at5 = rng_read("range", 5, kvs=(TRUTH[2].kv, TRUTH[1].kv))
    at6 = rng_read("range", 6, kvs=(TRUTH[2].kv,))
    hist_a = rng_read("history", 3, key=A, end=9, events=(TRUTH[2], TRUTH[5]))
    whole = rng_read("history", 5, end=9, events=tuple(TRUTH[2:]))
    refused = rng_read("range", 2, error="ErrCompacted", compact_revision=4)
    failed = rng_read("range", 7, error="CallTimeout", answered=False)
    state = clean(reads=(at5, at6, hist_a, whole, refused, failed), floor=4)
    result = hr.check(TRUTH, state)
    assert result.ok, result.report()
    assert "5 reads answered (4 below the KV's compaction 8" in result.details[0]
    assert any("failed: not judged" in d for d in result.details)


@pytest.mark.parametrize("read, words", [
    (rng_read("range", 5, kvs=(TRUTH[2].kv,)), "missing KeyValue(key=b'k/b'"),
    (rng_read("range", 6, kvs=(KeyValue(A, b"a1", 2, 5, 2),)), "got KeyValue(key=b'k/a', "
     "value=b'a1'"),
    (rng_read("range", 4, kvs=(TRUTH[0].kv, TRUTH[1].kv, KeyValue(KEY_PREFIX + b"z", b"z",
                                                                   4, 4, 1))),
     "never committed: KeyValue(key=b'k/z'"),
    (rng_read("range", 4, kvs=(TRUTH[0].kv, TRUTH[4].kv)), "got KeyValue(key=b'k/b', "
     "value=b'b2', create_revision=8, mod_revision=8, version=1, lease=0), the log says "
     "KeyValue(key=b'k/b', value=b'b1'"),
    (rng_read("history", 3, key=A, end=9, events=(TRUTH[5],)), "missing Event(kind='put', "
     "kv=KeyValue(key=b'k/a', value=b'a2'"),
    (rng_read("range", 5, error="ErrCompacted", compact_revision=6), "range [b'k/', b'k0') at "
     "revision 5: refused as compacted (at 6), but the blocks answer from revision 4"),
    (rng_read("range", 5, error="ErrHistoryUnavailable", message="the value of k/a at 5 is in "
              "no block"), "the value of k/a at 5 is in no block"),
])
def test_history_reads_catch_planted_wrong_answers(read: HistoryRead, words: str) -> None:
    result = hr.check(TRUTH, clean(reads=(read,), floor=4))
    assert result.status == "violation"
    assert words in result.explanation, result.explanation


def test_history_reads_without_an_answer_are_unknown() -> None:
    failed = rng_read("range", 5, error="TimeoutError", answered=False)
    assert hr.check(TRUTH, clean(reads=(failed,))).status == "unknown"
    assert hr.check(TRUTH, clean()).status == "unknown"
    assert hr.check(TRUTH, None).status == "unknown"


def test_the_read_sample_goes_below_both_compactions_and_is_seeded() -> None:
    keys = (A, B, KEY_PREFIX + b"c", KEY_PREFIX + b"d")
    plan = sample_reads(random.Random(1), 40, 90, 120, keys)
    assert plan == sample_reads(random.Random(1), 40, 90, 120, keys)
    ranges = [r.revision for r in plan if r.kind == "range"]
    assert min(ranges) < 40 and 40 in ranges and 89 in ranges and 90 in ranges
    assert any(40 < r < 89 for r in ranges) and all(1 <= r <= 120 for r in ranges)
    histories = [r for r in plan if r.kind == "history"]
    assert len(histories) == 4 and all(40 <= r.revision < 90 and r.end == 120
                                       for r in histories)
    assert sample_reads(random.Random(1), 0, 0, 0, keys) == []
    assert all(r.revision >= 1 for r in sample_reads(random.Random(2), 0, 1, 3, keys))


def test_the_tier_checks_run_by_name_and_need_the_truth() -> None:
    out = run_checks(History(), ["blocks_exactly_once", "history_reads"], truth=TRUTH,
                     tier=clean(reads=(rng_read("range", 6, kvs=(TRUTH[2].kv,)),)))
    assert [(c.name, c.status) for c in out] == [("blocks_exactly_once", "ok"),
                                                 ("history_reads", "ok")]
    with pytest.raises(ValueError, match="needs the committed history"):
        run_checks(History(), ["history_reads"], tier=clean())


# ---- whole runs on sim ----------------------------------------------------------------------


def tier_library() -> dict[str, schema.Scenario]:
    return {s.name: s for s in schema.load_dir(LIBRARY) if s.cluster.blocks is not None}


def test_the_library_has_the_tier_scenarios() -> None:
    found = tier_library()
    assert set(TIER_SCENARIOS) <= set(found)
    for name in TIER_SCENARIOS:
        text = next(p for p in LIBRARY.glob("*.yaml") if schema.load(p).name == name).read_text()
        assert text.startswith("# Proves:"), name
        assert found[name].duration <= 12  # short enough to run every file in CI
        assert set(schema.TIER_CHECKS) <= set(found[name].checks)


def faults_of(r: RunResult, action: str) -> list[dict[str, Any]]:
    return [dict(f.detail) for f in r.history.faults
            if f.action == action and f.detail.get("phase") == "start"]


def evidence(name: str, r: RunResult) -> None:
    """What each scenario's faults must have done (beyond the checks passing)."""
    assert r.tier is not None and r.tier.samples and r.tier.reads
    assert r.tier.levels.get(1, 0) + r.tier.levels.get(2, 0) > 0 or r.tier.outcomes.get(
        "completed", 0) > 0, "no block was ever merged"
    cold = [x for x in r.tier.reads if x.error is None and x.revision <= r.tier.hot_from]
    assert cold, "no history read went below the KV's compaction"
    if name == "compaction-worker-killed-holding-lease":
        kills = faults_of(r, "kill_process")
        assert kills and all(k["hit"] for k in kills), kills
        assert r.tier.outcomes.get("reassigned", 0) >= 1, r.tier.outcomes
    elif name == "compaction-worker-paused-past-lease":
        pause = faults_of(r, "pause_process")
        assert pause and pause[0]["hit"], pause
        assert r.tier.outcomes.get("reassigned", 0) >= 1, r.tier.outcomes
        fenced = sum(r.tier.outcomes.get(k, 0) for k in ("cancelled", "refused", "abandoned"))
        assert fenced >= 1, r.tier.outcomes
    elif name == "metastore-leader-killed-mid-plan":
        assert len(faults_of(r, "kill_process")) == 2
    elif name == "flusher-killed-before-add":
        fired = [f for f in faults_of(r, "failpoint") if "missed" not in f]
        assert len(fired) >= 2, fired
        assert not [n for n in r.notes if "never fired" in n], r.notes
    elif name == "kv-leader-killed-flusher-behind":
        kill = faults_of(r, "kill_node")
        assert kill and kill[0]["hit"], kill
        assert max(s.cursor for s in r.tier.samples) > 0


@pytest.mark.slow
@pytest.mark.parametrize("name", TIER_SCENARIOS)
@pytest.mark.parametrize("seed", [0, 1])
def test_tier_scenario_passes_on_sim(name: str, seed: int, tmp_path: Path) -> None:
    r = run_scenario(tier_library()[name], "sim", seed, tmp_path / "run")
    assert r.error is None, r.error
    assert r.verdict == "pass", report.failure_text(r)
    evidence(name, r)


@pytest.mark.slow
def test_the_same_seed_replays_the_same_tier_run(tmp_path: Path) -> None:
    s = tier_library()["compaction-worker-killed-holding-lease"]
    first = run_scenario(s, "sim", 3, tmp_path / "a")
    again = run_scenario(s, "sim", 3, tmp_path / "b")
    assert first.verdict == "pass"
    assert first.history.to_json() == again.history.to_json()
    assert first.tier == again.tier


def short_tier_run(tmp_path: Path, **blocks: Any) -> RunResult:
    """A 3 s run with a tier that flushes and compacts fast, and no fault."""
    data: dict[str, Any] = {
        "name": "tiny-tier", "duration": 3, "cluster": {"nodes": 3, "settings": {
            "compaction_interval": 0.3, "election_timeout": [0.3, 0.6],
            "heartbeat_interval": 0.05}, "blocks": {"shards": 2, **blocks}},
        "traffic": {"clients": 2, "rate": 20, "keys": 4},
        "checks": ["blocks_exactly_once", "history_reads"],
    }
    return run_scenario(schema.load_dict(data), "sim", 0, tmp_path / "run")


@pytest.mark.slow
def test_a_flusher_that_skips_a_row_is_caught(monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    from sediment.actors.kv import store
    from sediment.actors.kv.history import FlushRows

    original = store.Store.history_rows

    def skipping(self: store.Store, lo: int, max_rows: int) -> FlushRows:
        got = original(self, lo, max_rows)
        return FlushRows(tuple(r for r in got.rows if r[0] % 7 != 3), got.through, got.more)

    monkeypatch.setattr(store.Store, "history_rows", skipping)
    r = short_tier_run(tmp_path)
    result = next(c for c in r.checks if c.name == "blocks_exactly_once")
    assert result.status == "violation", result.report()
    assert "lost:" in result.explanation and "flush cursor" in result.explanation


@pytest.mark.slow
def test_a_coordinator_that_ignores_the_flush_hold_is_caught(monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path: Path) -> None:
    from sediment.actors.kv import coordinator_core as cc

    original = cc._on_hold_reply

    def blind(state: Any, ev: Any) -> Any:
        return original(state, type(ev)(ev.cycle, 10**9, ev.now))

    monkeypatch.setattr(cc, "_on_hold_reply", blind)
    r = short_tier_run(tmp_path, flush={"max_rows": 0, "max_age": 2.5})
    result = next(c for c in r.checks if c.name == "blocks_exactly_once")
    assert result.status == "violation", result.report()
    assert "hold:" in " ".join([result.explanation, *result.details]), result.report()


@pytest.mark.slow
def test_a_history_read_with_a_wrong_value_is_caught(monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    from dataclasses import replace

    from sediment.actors.kv import history

    original = history.fill_range

    def corrupt(skeleton: history.RangeSkeleton, values: Any) -> Any:
        got = original(skeleton, values)
        kvs = [replace(kv, value=b"wrong") if i in skeleton.missing else kv
               for i, kv in enumerate(got.kvs)]
        return replace(got, kvs=kvs)

    monkeypatch.setattr(history, "fill_range", corrupt)
    r = short_tier_run(tmp_path)
    result = next(c for c in r.checks if c.name == "history_reads")
    assert result.status == "violation", result.report()
    assert "b'wrong'" in result.explanation and "the log says" in result.explanation


# ---- on ray (not run with -m "not ray") -------------------------------------------------


@pytest.mark.timeout(600)  # a whole tier on Ray: starting it alone takes a minute here
@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.ray, pytest.mark.slow])
                                  for n in RAY_TIER_SUBSET])
def test_tier_scenario_passes_on_ray(name: str, tmp_path: Path,
                                     request: pytest.FixtureRequest) -> None:
    request.getfixturevalue("ray_cluster")
    r = run_scenario(tier_library()[name], "ray", 0, tmp_path / "run")
    assert r.error is None, r.error
    assert r.verdict == "pass", report.failure_text(r)
