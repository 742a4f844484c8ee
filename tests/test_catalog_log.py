"""The catalog update log against a model: a hypothesis state machine of DDL (good and
bad), compaction (Ignite's conditional saveSnapshot) and reads by version and by
timestamp, with the catalog machine's snapshot/restore checked on the way."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from sediment.actors.catalog import catalog_log, codec, ddl, errors, machine
from sediment.actors.catalog.descriptors import Catalog, Column
from sediment.actors.catalog.hlc import HybridTimestamp, hts

ZONES = ["Z1", "Z2", "Z3"]
TABLES = ["A", "B", "C"]
INDEXES = ["I1", "I2"]
K = Column("k", "int", nullable=False)


@dataclass(frozen=True)
class ModelVersion:
    activation: int
    zones: frozenset[str]
    tables: tuple[tuple[str, str], ...]  # (table, zone), sorted
    indexes: frozenset[str]


@dataclass
class Model:
    versions: list[ModelVersion] = field(default_factory=lambda: [
        ModelVersion(0, frozenset(), (), frozenset())])
    earliest: int = 0

    @property
    def latest(self) -> ModelVersion:
        return self.versions[-1]


def shape(c: Catalog) -> ModelVersion:
    zones = {z.id: z.name for z in c.zones.values()}
    return ModelVersion(
        c.activation.value, frozenset(zones.values()),
        tuple(sorted((t.name, zones[t.zone_id]) for t in c.tables.values())),
        frozenset(i.name for i in c.indexes.values()))


class CatalogLogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.log = catalog_log.initial()
        self.model = Model()
        self.columns = 0

    # ---- DDL ----------------------------------------------------------------------

    def _ddl(self, cmd: ddl.DdlCommand, expected_error: type[errors.CatalogError] | None,
             nxt: ModelVersion | None, ts: int, delay: int) -> None:
        before = self.log
        try:
            self.log, cat = catalog_log.execute(self.log, (cmd,), hts(ts), delay)
        except errors.CatalogError as err:
            assert expected_error is not None, f"{cmd} rejected: {err!r}"
            assert isinstance(err, expected_error), f"{cmd}: {err!r} not {expected_error}"
            assert self.log is before
            return
        assert expected_error is None, f"{cmd} accepted, expected {expected_error}"
        assert nxt is not None
        activation = max(hts(ts).add_physical(delay).value, self.model.latest.activation + 1)
        self.model.versions.append(ModelVersion(activation, nxt.zones, nxt.tables, nxt.indexes))
        assert cat.version == len(self.model.versions) - 1
        assert shape(cat) == self.model.latest

    @rule(name=st.sampled_from(ZONES), ts=st.integers(0, 50), delay=st.sampled_from([0, 5]))
    def create_zone(self, name: str, ts: int, delay: int) -> None:
        m = self.model.latest
        err = errors.ZoneExists if name in m.zones else None
        self._ddl(ddl.CreateZone(name, 2, 1), err,
                  ModelVersion(0, m.zones | {name}, m.tables, m.indexes), ts, delay)

    @rule(name=st.sampled_from(ZONES), ts=st.integers(0, 50))
    def drop_zone(self, name: str, ts: int) -> None:
        m = self.model.latest
        err: type[errors.CatalogError] | None = None
        if name not in m.zones:
            err = errors.ZoneNotFound
        elif any(z == name for _, z in m.tables):
            err = errors.ZoneInUse
        self._ddl(ddl.DropZone(name), err,
                  ModelVersion(0, m.zones - {name}, m.tables, m.indexes), ts, 0)

    @rule(name=st.sampled_from(TABLES), zone=st.sampled_from(ZONES), ts=st.integers(0, 50))
    def create_table(self, name: str, zone: str, ts: int) -> None:
        m = self.model.latest
        err: type[errors.CatalogError] | None = None
        if zone not in m.zones:
            err = errors.ZoneNotFound
        elif any(t == name for t, _ in m.tables):
            err = errors.TableExists
        self._ddl(ddl.CreateTable(name, zone, (K,), ("k",)), err,
                  ModelVersion(0, m.zones, tuple(sorted((*m.tables, (name, zone)))),
                               m.indexes | {name + "_PK"}), ts, 0)

    @rule(name=st.sampled_from(TABLES), ts=st.integers(0, 50))
    def drop_table(self, name: str, ts: int) -> None:
        m = self.model.latest
        err = None if any(t == name for t, _ in m.tables) else errors.TableNotFound
        gone = {name + "_PK"} | {i for i in m.indexes if i.endswith("@" + name)}
        self._ddl(ddl.DropTable(name), err,
                  ModelVersion(0, m.zones, tuple(x for x in m.tables if x[0] != name),
                               m.indexes - gone), ts, 0)

    @rule(name=st.sampled_from(INDEXES), table=st.sampled_from(TABLES), ts=st.integers(0, 50))
    def create_index(self, name: str, table: str, ts: int) -> None:
        m = self.model.latest
        full = f"{name}@{table}"  # the index name says its table (for drop_table's model)
        err: type[errors.CatalogError] | None = None
        if not any(t == table for t, _ in m.tables):
            err = errors.TableNotFound
        elif full in m.indexes:
            err = errors.IndexExists
        self._ddl(ddl.CreateIndex(full, table, ("k",)), err,
                  ModelVersion(0, m.zones, m.tables, m.indexes | {full}), ts, 0)

    @rule(table=st.sampled_from(TABLES), ts=st.integers(0, 50))
    def add_column(self, table: str, ts: int) -> None:
        m = self.model.latest
        err = None if any(t == table for t, _ in m.tables) else errors.TableNotFound
        self.columns += 1
        self._ddl(ddl.AddColumn(table, Column(f"c{self.columns}", "int")), err, m, ts, 0)

    # ---- compaction and reads -----------------------------------------------------

    @rule(data=st.data())
    def compact(self, data: st.DataObject) -> None:
        version = data.draw(st.integers(0, len(self.model.versions)))
        latest = len(self.model.versions) - 1
        if version > latest:
            try:
                catalog_log.save_snapshot(self.log, version)
            except errors.CatalogVersionNotFound:
                return
            raise AssertionError("compaction above the latest version accepted")
        self.log, saved = catalog_log.save_snapshot(self.log, version)
        assert saved == (version > self.model.earliest)
        self.model.earliest = max(self.model.earliest, version)

    @rule(data=st.data())
    def read_version(self, data: st.DataObject) -> None:
        version = data.draw(st.integers(0, len(self.model.versions) + 1))
        try:
            cat = catalog_log.catalog(self.log, version)
        except errors.CatalogVersionCompacted:
            assert version < self.model.earliest
            return
        except errors.CatalogVersionNotFound:
            assert version >= len(self.model.versions)
            return
        assert self.model.earliest <= version < len(self.model.versions)
        assert cat.version == version and shape(cat) == self.model.versions[version]

    @rule(data=st.data())
    def read_at(self, data: st.DataObject) -> None:
        top = self.model.latest.activation + 3
        ts = HybridTimestamp(data.draw(st.integers(0, top)))
        live = range(self.model.earliest, len(self.model.versions))
        candidates = [v for v in live if self.model.versions[v].activation <= ts.value]
        try:
            cat = catalog_log.catalog_at(self.log, ts)
        except errors.CatalogVersionCompacted:
            assert not candidates
            return
        assert candidates and cat.version == max(candidates)
        prior = catalog_log.catalog_prior_to_version_at(self.log, ts)
        expect_prior = cat.version - 1 if cat.version - 1 >= self.model.earliest else None
        assert (prior.version if prior else None) == expect_prior

    @rule()
    def machine_snapshot_round_trip(self) -> None:
        m = machine.CatalogMachine()
        m.log = self.log
        data, live = m.snapshot()
        assert live == []
        again = machine.CatalogMachine()
        again.restore(data, 7, lambda i: None)
        assert again.log == self.log and again.applied == 7
        assert codec.encode_log(again.log) == data

    @invariant()
    def bounds(self) -> None:
        assert self.log.earliest_version == self.model.earliest
        assert self.log.latest_version == len(self.model.versions) - 1
        assert catalog_log.log_size(self.log) == len(self.model.versions) - self.model.earliest


TestCatalogLog = CatalogLogMachine.TestCase
TestCatalogLog.settings = settings(max_examples=150, stateful_step_count=40, deadline=None,
                                   suppress_health_check=[HealthCheck.too_slow])
