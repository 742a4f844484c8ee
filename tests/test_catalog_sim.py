"""The seeded pure simulation of the whole design (`catalog_sim.World`): over many seeds
no catalog version is compacted while a transaction, a partition's replay, an index
build or a rebalance needs it, and every read sees committed transactions whole and
aborted ones never. A node that ignores its partitions' published times (reports only
its low watermark) is caught by the same checker. The nodes follow one cluster low
watermark, as the table nodes do (`cluster_lwm.py`): every value a node announces is one
the metastore committed, never above the committed value then, and the nodes meet on
the same values (fails with each node ticking its own, `unsafe="own_lwm"`)."""

from __future__ import annotations

from collections import Counter

from catalog_sim import World

from sediment.scenarios.checkers.catalog_compaction import atomic_visibility, compaction_safety

SEEDS = range(30)
STEPS = 1500


def test_compaction_is_safe_and_visibility_atomic_over_seeds() -> None:
    outcomes: Counter[str] = Counter()
    compactions = reads = 0
    for seed in SEEDS:
        world = World(seed)
        history = world.run(STEPS)
        for result in (compaction_safety(history), atomic_visibility(history)):
            assert result.ok, f"seed {seed}: {result.report()}"
        outcomes.update(world.outcomes)
        compactions += len(history.compactions)
        reads += len(history.reads)
    # Not vacuous: compaction happened, reads were checked, and every way an iteration
    # can end was taken somewhere.
    assert compactions >= 10 and reads >= 1000
    assert outcomes["committed"] > 500 and outcomes["aborted"] > 300
    for outcome in ("compacted", "nothing_to_compact", "index_building", "nodes_missing",
                    "partitions_missing", "dropped_table_in_use", "timeout"):
        assert outcomes[outcome] > 0, (outcome, outcomes)


def test_a_seed_replays_exactly() -> None:
    assert World(7).run(600) == World(7).run(600)


def test_the_checker_catches_a_node_that_ignores_its_partitions() -> None:
    broken = [seed for seed in range(20)
              if not compaction_safety(World(seed, unsafe="no_partition_times").run(STEPS)).ok]
    assert broken, "no violation found with the broken participant"


def _follows_the_cluster_value(world: World) -> list[str]:
    """What is wrong with the nodes' announced watermarks, as the cluster value goes."""
    problems = [f"{node} announced {value} with the committed value {committed}"
                for node, value, committed in world.lwm_seen
                if committed is None or value > committed]
    committed = set(world.lwm_committed)
    problems += [f"{node} announced {value}, never committed"
                 for node, value, _ in world.lwm_seen if value not in committed]
    by_value: dict[object, set[str]] = {}
    for node, value, _ in world.lwm_seen:
        by_value.setdefault(value, set()).add(node)
    if not any(len(nodes) == len(world.nodes) for nodes in by_value.values()):
        problems.append("no value was announced by every node")
    return problems


def test_the_nodes_follow_one_cluster_low_watermark() -> None:
    for seed in range(10):
        world = World(seed)
        world.run(STEPS)
        assert len(world.lwm_committed) >= 10, (seed, world.lwm_committed)
        assert _follows_the_cluster_value(world) == [], seed


def test_nodes_ticking_their_own_watermark_are_caught() -> None:
    world = World(0, unsafe="own_lwm")
    world.run(STEPS)
    assert _follows_the_cluster_value(world)
