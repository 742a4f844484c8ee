"""The catalog as the metastore group's raft machine: commands through raft entries,
typed rejections that change nothing, queries, and a snapshot that is the same bytes in
any process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sediment.actors.catalog import ddl, errors, machine
from sediment.actors.catalog.descriptors import Catalog, Column
from sediment.actors.catalog.hlc import hts
from sediment.actors.log.raft.types import Entry

K = Column("k", "int", nullable=False)

SCRIPT = """
from sediment.actors.catalog import ddl, machine
from sediment.actors.catalog.descriptors import Column
from sediment.actors.catalog.hlc import hts
from sediment.actors.log.raft.types import Entry
m = machine.CatalogMachine()
k = Column("k", "int", nullable=False)
batches = [(ddl.CreateZone("Z", 3, 2), ddl.CreateZone("Y", 1, 1)),
           (ddl.CreateTable("T", "Z", (k, Column("v", "str")), ("k",)),),
           (ddl.CreateIndex("I", "T", ("v", "k")),), (ddl.AddColumn("T", Column("w", "bytes")),)]
for i, batch in enumerate(batches, 1):
    m.apply(Entry(i, 1, 0.0, machine.ExecuteDdl(batch, hts(1000 * i), 10)))
m.apply(Entry(9, 1, 0.0, machine.CompactCatalog(2)))
import sys; sys.stdout.write(m.snapshot()[0].hex())
"""


def entry(i: int, command: object) -> Entry:
    return Entry(i, 1, 0.0, command)


def test_commands_and_queries() -> None:
    m = machine.CatalogMachine()
    assert m.apply(entry(1, None)) is None and m.applied == 1  # a leader's no-op
    r = m.apply(entry(2, machine.ExecuteDdl((ddl.CreateZone("Z"),
                                             ddl.CreateTable("T", "Z", (K,), ("k",))),
                                            hts(100), 250)))
    assert r == machine.DdlApplied(1, hts(350))
    r = m.apply(entry(3, machine.ExecuteDdl((ddl.DropZone("Z"),), hts(400))))
    assert r == machine.Rejected(errors.ZoneInUse("Z", "T")) and m.applied == 3
    assert m.status() == {"earliest_version": 0, "latest_version": 1, "log_size": 2}
    at = m.query(machine.CatalogAtQuery(hts(349)))
    assert isinstance(at, Catalog) and at.version == 0
    assert m.query(machine.CatalogVersionQuery(1)).table_named("T") is not None
    assert m.apply(entry(4, machine.CompactCatalog(1))) == machine.SnapshotSaved(True, 1)
    assert m.apply(entry(5, machine.CompactCatalog(1))) == machine.SnapshotSaved(False, 1)
    assert m.query(machine.CatalogVersionQuery(0)) == machine.Rejected(
        errors.CatalogVersionCompacted("version 0", 1))
    assert m.query(machine.VersionsQuery()) == machine.Versions(1, hts(350), 1, hts(350), 1)
    assert m.query("what") == machine.Rejected(errors.InvalidCommand("query str"))


@pytest.mark.parametrize("command", [
    ("put", "k", "v"),
    machine.ExecuteDdl(("not a command",), hts(1)),  # type: ignore[arg-type]
    machine.ExecuteDdl([ddl.CreateZone("Z")], hts(1)),  # type: ignore[arg-type]
    machine.ExecuteDdl((ddl.CreateZone("Z"),), 5),  # type: ignore[arg-type]
    machine.ExecuteDdl((ddl.CreateZone("Z"),), hts(1), -3),
    machine.ExecuteDdl((), hts(1)),
    machine.CompactCatalog(7),
    machine.CompactCatalog(-1),
    machine.CompactCatalog("1"),  # type: ignore[arg-type]
])
def test_bad_commands_are_rejected_and_change_nothing(command: object) -> None:
    m = machine.CatalogMachine()
    before = m.log
    result = m.apply(entry(1, command))
    assert isinstance(result, machine.Rejected)
    assert m.log is before and m.applied == 1


def test_snapshot_bytes_are_the_same_in_any_process() -> None:
    root = Path(__file__).resolve().parent.parent
    outs = set()
    for seed in ("0", "1", "random"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, cwd=root, check=True,
                             capture_output=True, text=True).stdout
        outs.add(out)
    assert len(outs) == 1
    data = bytes.fromhex(outs.pop())
    m = machine.CatalogMachine()
    m.restore(data, 9, lambda i: None)
    assert m.log.earliest_version == 2 and m.log.latest_version == 4
    assert m.snapshot()[0] == data
