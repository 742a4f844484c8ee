"""The tables cluster is assembled in the wiring layer: `actors/tables` and
`actors/catalog` build their own processes and start no runtime or tree, and the public
`TablesCluster` is the wiring layer's (read from the source, as test_wiring_layers)."""

from __future__ import annotations

from pathlib import Path

from import_scan import imports_of

import sediment
from sediment.wiring.tables import TablesCluster

ROOT = Path(__file__).resolve().parent.parent
# what assembles a cluster: a runtime started, a top supervisor, a node's log tree
ASSEMBLY = ("sediment.runtime.api", "sediment.supervision.start_top",
            "sediment.actors.log.shell.cluster.node_children", "sediment.wiring")


_imports = imports_of


def test_the_tables_tier_assembles_no_cluster() -> None:
    found = {str(path.relative_to(ROOT)): bad
             for package in ("actors/tables", "actors/catalog")
             for path in sorted((ROOT / package).rglob("*.py"))
             if (bad := sorted(m for m in _imports(path) if m.startswith(ASSEMBLY)))}
    assert found == {}


def test_the_tables_tier_keeps_only_its_parts() -> None:
    # the API, the transactions and the node trees moved out; what is left is small
    assert not (ROOT / "actors/tables/transaction.py").exists()
    assert not (ROOT / "actors/tables/node_tree.py").exists()
    cluster = ROOT / "actors/tables/shell/cluster.py"
    assert len(cluster.read_text(encoding="utf-8").splitlines()) < 100


def test_the_public_tables_cluster_is_the_wiring_layers() -> None:
    assert sediment.TablesCluster is TablesCluster
    assert "TablesCluster" in sediment.__all__
