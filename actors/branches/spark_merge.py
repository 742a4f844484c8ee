"""The metarange merge on Spark: the spans of `span_merge` run as the tasks of one Spark
job, in the same session the block compaction service uses (`actors/spark/session.py`,
reached through the Spark bridge process in a cluster).

The job is an RDD of `SpanTask`s, one partition each, mapped by `span_merge.run_task`
in the executors' Python workers (this interpreter: `PYSPARK_PYTHON`). Each task reads
its base ranges and its slice of the change file and writes its ranges into the block
store, which every executor shares (local files, as the block merge assumes). The
driver stitches and writes the metarange: the same files and id as the in-process
merge (`spans.py`). A Spark failure (a lost executor, a cancelled job) is
`MergeFailed`; a span's typed error (a missing or corrupt range) comes back as it is.

pyspark is imported by nothing here: a session is passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from sediment.actors.branches.apply import ApplyStats
from sediment.actors.branches.entry import Record
from sediment.actors.branches.errors import BranchesError, MergeFailed
from sediment.actors.branches.span_merge import (
    RangeMergeRequest,
    RangeMergeResult,
    RunAll,
    SpanTask,
    merge_by_spans,
    merge_changes,
    run_task,
)
from sediment.actors.branches.spans import SpanResult

if TYPE_CHECKING:
    from sediment.actors.branches.metarange import MetaRangeStore


def spark_run_all(spark: Any, label: str = "metarange merge") -> RunAll:
    """Run the tasks as one Spark job on `spark`, one partition per task."""

    def run(tasks: Sequence[SpanTask]) -> list[SpanResult | BranchesError]:
        context = spark.sparkContext
        context.setJobDescription(f"sediment {label}")  # this thread's jobs
        try:
            outcomes = context.parallelize(list(tasks), len(tasks)).map(run_task).collect()
        except Exception as exc:  # noqa: BLE001 - Py4J/Spark errors are not picklable values
            text = str(exc).strip()
            first = text.splitlines()[0][:500] if text else ""
            raise MergeFailed(f"Spark failed the {label}: {type(exc).__name__}: {first}") \
                from None
        return list(outcomes)

    return run


def parallelism(spark: Any) -> int:
    """The cores the session's executors have (Spark's default parallelism)."""
    try:
        return max(1, int(spark.sparkContext.defaultParallelism))
    except Exception:  # noqa: BLE001 - a session being stopped
        return 1


def spark_apply(spark: Any, request: RangeMergeRequest) -> RangeMergeResult:
    """Run `request` on `spark` (what the Spark bridge does with a "merge_ranges")."""
    return merge_by_spans(request, spark_run_all(spark, f"merge {request.label}"),
                          parallelism(spark))


class SparkMerge:
    """A `MergeBackend` on a Spark session in this process (`session()` gives it, e.g.
    `actors/spark/session.spark_session`): the driver API and benchmarks. Processes of
    a cluster reach the cluster's one session through the bridge instead
    (`shell/merging.py`)."""

    def __init__(self, session: Callable[[], Any], spans: int | None = None) -> None:
        self.session = session
        self.spans = spans

    def apply(self, store: MetaRangeStore, repo: str, base_id: str,
              changes: Iterable[Record]) -> tuple[str, ApplyStats]:
        spark = self.session()
        result = merge_changes(store, repo, base_id, changes,
                               spark_run_all(spark, f"merge {repo}:{base_id[:12]}"),
                               parallelism(spark), self.spans)
        return result.metarange_id, result.stats


__all__ = ["SparkMerge", "parallelism", "spark_apply", "spark_run_all"]
