"""The block tier's flusher reads committed history through a port (`HistorySource`) the
wiring layer fills with the KV's (`sediment/wiring/kv_history.py`): checked values, and
the wiring passes the KV's to the tier. The end-to-end read is
`tests/test_kv_blocks_tier.py::test_flush_hold_failover_and_history_reads`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sediment.actors.blocks.flusher_core import FlushConfig
from sediment.actors.blocks.meta import FlushPolicy
from sediment.actors.blocks.shell.flusher import FlusherConfig
from sediment.actors.blocks.shell.history_source import HistorySource
from sediment.actors.blocks.shell.tier import BlockTier, tier_parts
from sediment.actors.kv.names import KV_GROUP
from sediment.wiring.kv_history import KV_HISTORY, read_kv_history


async def _read(ctx: Any, lo: int, max_rows: int, timeout: float) -> object:
    return None


def test_a_history_source_is_a_group_and_a_read_function() -> None:
    with pytest.raises(ValueError, match="group"):
        HistorySource("", _read)
    with pytest.raises(ValueError, match="read"):
        HistorySource("kv", "not a function")  # type: ignore[arg-type]
    assert "_read" not in repr(HistorySource("kv", _read))  # no address in reprs


def test_the_flusher_needs_a_history_source() -> None:
    flush = FlushConfig(2, FlushPolicy(), 10, 100, 1.0)
    with pytest.raises(ValueError, match="history"):
        FlusherConfig(("n1",), "/tmp/x", flush, "kv")  # type: ignore[arg-type]
    assert FlusherConfig(("n1",), "/tmp/x", flush, HistorySource("g", _read)).history.group == "g"


def test_the_wiring_gives_the_tier_the_kvs_history(tmp_path: Path) -> None:
    assert KV_HISTORY.group == KV_GROUP and KV_HISTORY.read is read_kv_history
    parts = tier_parts(("n1", "n2", "n3"), str(tmp_path), BlockTier(), KV_HISTORY)
    assert parts.flusher.history is KV_HISTORY
