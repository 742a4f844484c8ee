"""The metarange merge as spans over files: what a merge in another process is asked
(`RangeMergeRequest`: the base metarange and a change file), the task each span runs
(on a Spark executor, or here: `run_task`) and the driver's part (`merge_by_spans`:
plan the spans, run them through a `RunAll`, stitch, write the metarange).

Why a change file: the changes come from the KV (the sealed staging tokens) into the
process that asked for the merge; a Parquet file under the repository's `scratch/`
directory lets every span read just its slice. The caller removes it after the merge;
one a crash left behind is collected by the garbage sweep after its grace period.

Files are read and written with `rangefile` exactly as the in-process merge does, and
the stitch gives `apply_changes`'s ranges (`spans.py`), so the metarange id is the one
the in-process merge writes. A span's typed error (a missing or corrupt base range, a
change file out of order) is returned as a value, so it crosses Spark unchanged and is
raised here.
"""

from __future__ import annotations

import contextlib
import math
import os
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sediment.actors.branches import names as nm
from sediment.actors.branches import rangefile as rf
from sediment.actors.branches.apply import ApplyStats, RangeRef, SplitRule
from sediment.actors.branches.entry import Entry, Record
from sediment.actors.branches.errors import BranchesError, MergeFailed
from sediment.actors.branches.spans import Span, SpanResult, plan_spans, run_span, stitch
from sediment.log import get_logger

if TYPE_CHECKING:
    from sediment.actors.branches.metarange import MetaRangeStore

_log = get_logger("sediment.branches.span_merge")

SCRATCH = "scratch"
CHANGES_SUFFIX = ".changes.parquet"
SPAN_WORK = 250_000  # entries of work (changes + entries of base ranges read) per span
MAX_SPANS = 64  # as the block merge's MAX_PARTITIONS
SPARK_THRESHOLD = 100_000  # base entries read from which Spark wins here (docs/branches.md)

RunAll = Callable[[Sequence["SpanTask"]], list["SpanResult | BranchesError"]]
"""Runs every task (on Spark executors, or one after the other here); the outcomes in
task order."""


def scratch_dir(root: str, repo: str) -> str:
    return os.path.join(rf.repo_dir(root, repo), SCRATCH)


def write_changes(root: str, repo: str, changes: Sequence[Record]) -> str:
    """`changes` (sorted, tombstones allowed) as a scratch Parquet file; its path."""
    directory = scratch_dir(root, repo)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{uuid.uuid4().hex}{CHANGES_SUFFIX}")
    if changes:
        data = rf.encode_range(changes)
    else:
        sink = pa.BufferOutputStream()
        pq.write_table(rf.RANGE_SCHEMA.empty_table(), sink)
        data = bytes(sink.getvalue().to_pybytes())
    tmp = path + ".tmp"
    with open(tmp, "wb") as out:
        out.write(data)
    os.replace(tmp, path)
    return path


def remove_changes(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _change_table(path: str) -> pa.Table:
    try:
        table = pq.read_table(path)
    except FileNotFoundError:
        raise MergeFailed(f"the change file {path} is gone") from None
    except (pa.ArrowException, OSError) as err:
        raise MergeFailed(f"the change file {path} does not read: {err}") from err
    if not table.schema.remove_metadata().equals(rf.RANGE_SCHEMA):
        raise MergeFailed(f"the change file {path} is not in the range schema")
    return table


def read_change_paths(path: str) -> list[str]:
    paths: list[str] = _change_table(path).column("path").to_pylist()
    return paths


def read_changes(path: str, lo: str, hi: str | None) -> list[Record]:
    """The changes of the file with paths in [lo, hi) (hi None: to the end)."""
    table = _change_table(path)
    column = table.column("path")
    keep = pc.greater_equal(column, lo)
    if hi is not None:
        keep = pc.and_(keep, pc.less(column, hi))
    try:
        return rf.decode_records(table.filter(keep))
    except ValueError as err:
        raise MergeFailed(f"the change file {path}: {err}") from err


def base_read(base: Sequence[RangeRef], change_paths: Sequence[str]) -> int:
    """The entries of every base range a change falls inside: what the merge reads and
    rewrites (a range with no change in it is reused unread)."""
    read = 0
    j = 0
    for r in base:
        while j < len(change_paths) and change_paths[j] < r.min_path:
            j += 1
        if j < len(change_paths) and change_paths[j] <= r.max_path:
            read += r.count
    return read


def merge_size(base: Sequence[RangeRef], change_paths: Sequence[str]) -> int:
    """The work of a merge: its changes plus the base entries it reads (`base_read`).
    How many spans it is cut into."""
    return len(change_paths) + base_read(base, change_paths)


def spark_pays(base: Sequence[RangeRef], change_paths: Sequence[str],
               threshold: int) -> bool:
    """Whether the merge should run on Spark: it reads at least `threshold` base
    entries, and has at most half as many changes. Measured (docs/branches.md): Spark
    wins on the base entries, which its tasks read and rewrite in parallel, and loses on
    the changes, which go through a file to the tasks (in process they are already
    objects): at one change per base entry read it was 1.3-2x slower."""
    read = base_read(base, change_paths)
    return read >= threshold and 2 * len(change_paths) <= read


def span_count(work: int, parallelism: int) -> int:
    """How many spans: one per `SPAN_WORK` entries of work, at least one per core the
    session has, at most `MAX_SPANS` (the block merge's sizing, per span)."""
    return max(1, min(MAX_SPANS, max(parallelism, math.ceil(work / SPAN_WORK))))


@dataclass(frozen=True, slots=True)
class RangeMergeRequest:
    """Apply the change file's changes onto metarange `base_id` of `repo` under the
    block store `root`, ranges cut by `rule`; `spans`: how many (None: `span_count`)."""

    root: str
    repo: str
    base_id: str
    changes_file: str
    rule: SplitRule = field(default_factory=SplitRule)
    spans: int | None = None

    @property
    def label(self) -> str:
        return f"{self.repo}:{self.base_id[:12]}"


@dataclass(frozen=True, slots=True)
class RangeMergeResult:
    metarange_id: str
    stats: ApplyStats
    spans: int


def check_range_request(request: object) -> str | None:
    """Why `request` is not a well-formed RangeMergeRequest, or None (it crossed a
    process boundary: every field is checked before a job is queued)."""
    if not isinstance(request, RangeMergeRequest):
        return f"not a RangeMergeRequest: {type(request).__name__}"
    for name in ("root", "changes_file"):
        value = getattr(request, name)
        if not isinstance(value, str) or not os.path.isabs(value):
            return f"{name} must be an absolute path, got {value!r:.200}"
    try:
        nm.check_repo(request.repo)
    except BranchesError as err:
        return str(err)
    if not isinstance(request.base_id, str) or len(request.base_id) != 64 or any(
            c not in "0123456789abcdef" for c in request.base_id):
        return f"bad base metarange id {request.base_id!r:.100}"
    if os.path.dirname(request.changes_file) != scratch_dir(request.root, request.repo):
        return "the change file must be in the repository's scratch directory"
    rule: object = request.rule
    if not isinstance(rule, SplitRule):
        return f"rule must be a SplitRule, got {type(rule).__name__}"
    spans = request.spans
    if spans is not None and (isinstance(spans, bool) or not isinstance(spans, int)
                              or not 1 <= spans <= MAX_SPANS):
        return f"spans must be None or 1..{MAX_SPANS}, got {spans!r}"
    return None


@dataclass(frozen=True, slots=True)
class _FileSink:
    root: str
    repo: str

    def write(self, entries: Sequence[tuple[str, Entry]]) -> RangeRef:
        records: list[Record] = list(entries)
        return rf.write_range(self.root, self.repo, records)


@dataclass(frozen=True, slots=True)
class SpanTask:
    """One span's work, sent to where it runs (pickled): the whole base list (spans
    index into it), the span, where the changes and files are."""

    root: str
    repo: str
    base: tuple[RangeRef, ...]
    span: Span
    changes_file: str
    rule: SplitRule


def run_task(task: SpanTask) -> SpanResult | BranchesError:
    """Run one span (on an executor): its result, or the tier's typed error."""
    try:
        return run_span(task.base, task.span, _loader(task.root, task.repo),
                        read_changes(task.changes_file, task.span.lo, task.span.hi),
                        task.rule, _FileSink(task.root, task.repo))
    except BranchesError as err:
        return err
    except ValueError as err:  # changes out of order: not what a merge is given
        return MergeFailed(f"span {task.span.index}: {err}")


def run_here(tasks: Sequence[SpanTask]) -> list[SpanResult | BranchesError]:
    """Every task in this process, one after the other (tests, and no Spark)."""
    return [run_task(t) for t in tasks]


def _loader(root: str, repo: str) -> Callable[[RangeRef], list[Record]]:
    def load(r: RangeRef) -> list[Record]:
        return rf.read_range(root, repo, r.id)
    return load


def merge_by_spans(request: RangeMergeRequest, run_all: RunAll,
                   parallelism: int = 1) -> RangeMergeResult:
    """Plan the spans, run them with `run_all`, stitch them here and write the
    metarange: the id and stats the in-process merge gives for the same inputs."""
    problem = check_range_request(request)
    if problem is not None:
        raise MergeFailed(f"bad merge request: {problem}")
    root, repo = request.root, request.repo
    base = rf.read_metarange(root, repo, request.base_id)
    paths = read_change_paths(request.changes_file)
    count = request.spans or span_count(merge_size(base, paths), parallelism)
    spans = plan_spans(base, paths, count)
    tasks = [SpanTask(root, repo, tuple(base), s, request.changes_file, request.rule)
             for s in spans]
    outcomes = run_all(tasks)
    if len(outcomes) != len(tasks):
        raise MergeFailed(f"{len(outcomes)} span results for {len(tasks)} spans")
    results: list[SpanResult] = []
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
        results.append(outcome)

    def changes_of(span: Span) -> Iterable[Record]:
        return read_changes(request.changes_file, span.lo, span.hi)

    ranges, stats = stitch(base, spans, results, _loader(root, repo), changes_of,
                           request.rule, _FileSink(root, repo))
    metarange = rf.write_metarange(root, repo, ranges)
    _log.info("metarange merged by spans", repo=repo, spans=len(spans), changes=stats.changes,
              loaded=stats.loaded, reused=stats.reused, written=stats.written)
    return RangeMergeResult(metarange, stats, len(spans))


class SpanMerge:
    """A `MergeBackend` that merges by spans run by `run_all` (`run_here`: in this
    process, one after the other, for tests; `spark_merge.SparkMerge`: on Spark)."""

    def __init__(self, run_all: RunAll = run_here, parallelism: int = 1,
                 spans: int | None = None) -> None:
        self.run_all = run_all
        self.parallelism = parallelism
        self.spans = spans

    def apply(self, store: MetaRangeStore, repo: str, base_id: str,
              changes: Iterable[Record]) -> tuple[str, ApplyStats]:
        result = merge_changes(store, repo, base_id, changes, self.run_all,
                               self.parallelism, self.spans)
        return result.metarange_id, result.stats


def merge_changes(store: MetaRangeStore, repo: str, base_id: str, changes: Iterable[Record],
                  run_all: RunAll, parallelism: int = 1,
                  spans: int | None = None) -> RangeMergeResult:
    """Write the change file, merge by spans, remove the file."""
    path = write_changes(store.root, repo, list(changes))
    try:
        return merge_by_spans(RangeMergeRequest(store.root, repo, base_id, path, store.rule,
                                                spans), run_all, parallelism)
    finally:
        remove_changes(path)


__all__ = [
    "CHANGES_SUFFIX",
    "MAX_SPANS",
    "SCRATCH",
    "SPARK_THRESHOLD",
    "SPAN_WORK",
    "RangeMergeRequest",
    "RangeMergeResult",
    "RunAll",
    "SpanMerge",
    "SpanTask",
    "check_range_request",
    "merge_by_spans",
    "merge_changes",
    "base_read",
    "merge_size",
    "read_change_paths",
    "read_changes",
    "remove_changes",
    "run_here",
    "run_task",
    "scratch_dir",
    "span_count",
    "spark_pays",
    "write_changes",
]
