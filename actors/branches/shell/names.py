"""Registered names of the branch tier's processes."""

from __future__ import annotations

SENSOR_NAME = "branches-sensor"
COMPACTOR_NAME = "branches-compactor"

__all__ = ["COMPACTOR_NAME", "SENSOR_NAME"]
