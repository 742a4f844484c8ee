"""The branch tier's metrics, through `sediment.metrics` (Ray's metrics API on Ray,
Prometheus through the dashboard; a local registry elsewhere)."""

from __future__ import annotations

from sediment.metrics import Counter, Gauge, Histogram

COMPACTION_SECONDS = Histogram("branch_compaction_seconds",
                               "staging compaction time, step 1 to step 3", ("repo",))
COMPACTIONS = Counter("branch_compactions", "staging compactions by outcome",
                      ("repo", "outcome"))
SEALED_TOKENS = Gauge("branch_sealed_tokens", "sealed staging tokens per branch",
                      ("repo", "branch"))
SENSOR_TRIGGERS = Counter("branch_sensor_triggers", "delete-sensor triggers by fate",
                          ("reason", "fate"))
SETIF_CONFLICTS = Counter("branch_setif_conflicts", "branch SetIf races lost", ("kind",))
MERGES = Counter("branch_merges", "metarange merges by backend and outcome",
                 ("backend", "outcome"))
STAGED_WRITE_RETRIES = Counter("branch_staged_write_retries",
                               "staged writes retried because the branch changed", ())

__all__ = ["COMPACTIONS", "COMPACTION_SECONDS", "MERGES", "SEALED_TOKENS", "SENSOR_TRIGGERS",
           "SETIF_CONFLICTS", "STAGED_WRITE_RETRIES"]
