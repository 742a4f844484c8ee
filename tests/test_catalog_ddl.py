"""DDL validation: what each command produces, and bad input (typed error, nothing
changed) as a table."""

from __future__ import annotations

from typing import Any

import pytest

from sediment.actors.catalog import catalog_log, ddl, errors
from sediment.actors.catalog.catalog_log import CatalogLog
from sediment.actors.catalog.descriptors import Column, IndexStatus
from sediment.actors.catalog.hlc import hts

K = Column("k", "int", nullable=False)
V = Column("v", "str")
W = Column("w", "float")


def build(*batches: tuple[ddl.DdlCommand, ...]) -> CatalogLog:
    log = catalog_log.initial()
    for i, batch in enumerate(batches):
        log, _ = catalog_log.execute(log, batch, hts(1000 + 10 * i), 0)
    return log


def base() -> CatalogLog:
    return build(
        (ddl.CreateZone("Z", partitions=4, replicas=2),),
        (ddl.CreateTable("T", "Z", (K, V), ("k",)),),
        (ddl.CreateIndex("T_V", "T", ("v",)),),
    )


def test_create_zone_table_index_ids_and_versions() -> None:
    log = base()
    c = log.latest
    assert c.version == 3
    zone = c.zone_named("Z")
    table = c.table_named("T")
    assert zone is not None and table is not None
    assert (zone.id, zone.partitions, zone.replicas) == (0, 4, 2)
    assert (table.id, table.zone_id, table.primary_key, table.schema_version) == (1, 0, ("k",), 1)
    pk = c.index_named("T_PK")
    idx = c.index_named("T_V")
    assert pk is not None and pk.status is IndexStatus.AVAILABLE and pk.unique
    assert idx is not None and idx.status is IndexStatus.REGISTERED
    assert (idx.id, idx.created_version, idx.status_version) == (3, 3, 3)
    assert c.object_id_gen == 4


def test_index_lifecycle_and_alters() -> None:
    log = base()
    idx = log.latest.index_named("T_V")
    assert idx is not None
    log, c = catalog_log.execute(log, (ddl.StartBuildingIndex(idx.id),), hts(2000), 0)
    assert c.index(idx.id) is not None and c.index(idx.id).status is IndexStatus.BUILDING  # type: ignore[union-attr]
    log, c = catalog_log.execute(log, (ddl.MakeIndexAvailable(idx.id),), hts(2001), 0)
    built = c.index(idx.id)
    assert built is not None and built.status is IndexStatus.AVAILABLE
    assert built.status_version == c.version
    log, c = catalog_log.execute(log, (ddl.AddColumn("T", W), ddl.AlterZone("Z", 3)), hts(2002), 0)
    table = c.table_named("T")
    assert table is not None and table.schema_version == 2 and table.column("w") == W
    assert c.zone_named("Z").replicas == 3  # type: ignore[union-attr]
    log, c = catalog_log.execute(log, (ddl.DropColumn("T", "w"),), hts(2003), 0)
    assert c.table_named("T").schema_version == 3  # type: ignore[union-attr]
    log, c = catalog_log.execute(log, (ddl.DropIndex("T_V"),), hts(2004), 0)
    assert c.index_named("T_V") is None
    log, c = catalog_log.execute(log, (ddl.DropTable("T"), ddl.DropZone("Z")), hts(2005), 0)
    assert not c.tables and not c.zones and not c.indexes


def test_ids_are_never_reused_after_drop_and_recreate() -> None:
    log = build((ddl.CreateZone("Z"),), (ddl.CreateTable("T", "Z", (K,), ("k",)),),
                (ddl.DropTable("T"),), (ddl.CreateTable("T", "Z", (K,), ("k",)),))
    table = log.latest.table_named("T")
    assert table is not None and table.id == 3  # 1 and 2 went to the first T and its PK


def test_a_batch_sees_its_own_earlier_commands() -> None:
    log = build((ddl.CreateZone("Z"), ddl.CreateTable("T", "Z", (K,), ("k",)),
                 ddl.CreateIndex("I", "T", ("k",))),)
    assert log.latest_version == 1
    assert log.latest.index_named("I") is not None


def test_activation_is_ts_plus_delay_and_always_increases() -> None:
    log, c1 = catalog_log.execute(catalog_log.initial(), (ddl.CreateZone("A"),), hts(1000), 500)
    assert c1.activation == hts(1500)
    # A proposer whose clock lags: still after the previous activation.
    log, c2 = catalog_log.execute(log, (ddl.CreateZone("B"),), hts(900), 500)
    assert c2.activation == hts(1500, 1)


BAD: list[tuple[str, tuple[Any, ...], type[errors.CatalogError]]] = [
    ("table in a missing zone", (ddl.CreateTable("X", "nope", (K,), ("k",)),), errors.ZoneNotFound),
    ("alter a missing zone", (ddl.AlterZone("nope", 2),), errors.ZoneNotFound),
    ("drop a missing zone", (ddl.DropZone("nope"),), errors.ZoneNotFound),
    ("drop a zone in use", (ddl.DropZone("Z"),), errors.ZoneInUse),
    ("duplicate zone", (ddl.CreateZone("Z"),), errors.ZoneExists),
    ("duplicate table", (ddl.CreateTable("T", "Z", (K,), ("k",)),), errors.TableExists),
    ("duplicate index", (ddl.CreateIndex("T_V", "T", ("k",)),), errors.IndexExists),
    ("index named like a PK", (ddl.CreateIndex("T_PK", "T", ("k",)),), errors.IndexExists),
    ("duplicate column", (ddl.AddColumn("T", V),), errors.ColumnExists),
    ("add column to a missing table", (ddl.AddColumn("nope", W),), errors.TableNotFound),
    ("drop a missing table", (ddl.DropTable("nope"),), errors.TableNotFound),
    ("index on a missing table", (ddl.CreateIndex("I", "nope", ("k",)),), errors.TableNotFound),
    ("index on a missing column", (ddl.CreateIndex("I", "T", ("zz",)),), errors.ColumnNotFound),
    ("drop a missing column", (ddl.DropColumn("T", "zz"),), errors.ColumnNotFound),
    ("drop a PK column", (ddl.DropColumn("T", "k"),), errors.InvalidDdl),
    ("drop an indexed column", (ddl.DropColumn("T", "v"),), errors.InvalidDdl),
    ("drop a missing index", (ddl.DropIndex("nope"),), errors.IndexNotFound),
    ("drop the PK index", (ddl.DropIndex("T_PK"),), errors.InvalidDdl),
    ("available before building", (ddl.MakeIndexAvailable(3),), errors.InvalidDdl),
    ("building a built index", (ddl.StartBuildingIndex(2),), errors.InvalidDdl),
    ("building a missing index", (ddl.StartBuildingIndex(99),), errors.IndexNotFound),
    ("zero partitions", (ddl.CreateZone("Y", partitions=0),), errors.InvalidDdl),
    ("too many replicas", (ddl.CreateZone("Y", replicas=99),), errors.InvalidDdl),
    ("bool partitions", (ddl.CreateZone("Y", partitions=True),), errors.InvalidDdl),
    ("empty name", (ddl.CreateZone(""),), errors.InvalidDdl),
    ("no columns", (ddl.CreateTable("X", "Z", (), ("k",)),), errors.InvalidDdl),
    ("unknown type", (ddl.CreateTable("X", "Z", (Column("k", "blob", False),), ("k",)),),
     errors.InvalidDdl),
    ("twice the same column", (ddl.CreateTable("X", "Z", (K, K), ("k",)),), errors.InvalidDdl),
    ("no primary key", (ddl.CreateTable("X", "Z", (K,), ()),), errors.InvalidDdl),
    ("PK over a missing column", (ddl.CreateTable("X", "Z", (K,), ("q",)),), errors.ColumnNotFound),
    ("nullable PK", (ddl.CreateTable("X", "Z", (V,), ("v",)),), errors.InvalidDdl),
    ("index with no columns", (ddl.CreateIndex("I", "T", ()),), errors.InvalidDdl),
    ("empty batch", (), errors.InvalidDdl),
    # The whole batch goes when its last command is bad: the zone is not created.
    ("batch with a bad tail", (ddl.CreateZone("NEW"), ddl.DropTable("nope")), errors.TableNotFound),
]


@pytest.mark.parametrize(("commands", "error"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_ddl_is_a_typed_error_and_changes_nothing(
        commands: tuple[ddl.DdlCommand, ...], error: type[errors.CatalogError]) -> None:
    log = base()
    with pytest.raises(error):
        catalog_log.execute(log, commands, hts(5000), 0)
    # Nothing changed: same versions, same counter, and the next command gets the next
    # version and the next id as if the bad one never came.
    assert log == base()
    log2, c = catalog_log.execute(log, (ddl.CreateZone("NEW2"),), hts(5000), 0)
    assert c.version == 4 and c.zone_named("NEW2").id == 4  # type: ignore[union-attr]


def test_bad_delay_is_rejected() -> None:
    with pytest.raises(errors.InvalidDdl):
        catalog_log.execute(base(), (ddl.CreateZone("Y"),), hts(5000), -1)


def test_errors_pickle_and_compare() -> None:
    import pickle

    err = errors.ZoneInUse("Z", "T")
    again = pickle.loads(pickle.dumps(err))
    assert again == err and (again.zone, again.table) == ("Z", "T")
    assert errors.TableNotFound("a") != errors.ZoneNotFound("a")
