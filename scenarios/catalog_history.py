"""The tables cluster's recorded history types, re-exported for the scenario side.

They moved to `actors/tables/recorded_history.py` (the product's recorder produces them;
a product module must not import the harness). Code under `scenarios/` and the tests
import them from there; this name stays for callers written against it.
"""

from __future__ import annotations

from sediment.actors.tables.recorded_history import (
    CatalogCompacted,
    CatalogHistory,
    Cell,
    Pin,
    PinKind,
    ReadRecord,
    TxOutcome,
    TxRecord,
    VersionActivated,
    replay_pins,
)

__all__ = [
    "CatalogCompacted",
    "CatalogHistory",
    "Cell",
    "Pin",
    "PinKind",
    "ReadRecord",
    "TxOutcome",
    "TxRecord",
    "VersionActivated",
    "replay_pins",
]
