"""Minor and major compaction of a group's segments, crash-safe (Ra v3 protocol).

Why: a Ra-style snapshot omits the entries its machine still needs (live indexes), so
the log below the snapshot cannot simply be truncated. Minor compaction (after every
snapshot) deletes whole segments with no live entry; major compaction (every 8 minors
or on demand) rewrites groups of sparse, adjacent segments into one, keeping only the
live entries. Neither ever touches the newest (active) segment, and neither deletes a
referenced segment: the result goes to the raft server, which updates its refs
(`SegRefs.apply`) and only then calls `delete_unreferenced`.

Major compaction of one group ``[leader, X1, X2, ...]`` (oldest first), the shipped v3
protocol:

1. write the marker ``<leader>.compaction_group`` listing the group (file fsynced);
2. write ``<leader>.compacting`` (live entries copied verbatim, CRCs kept), seal, fsync
   it, then fsync the directory: the marker and the output are both durably named;
3. rename it to ``<leader>.segment``: the commit point (the directory is fsynced before
   step 4, so no symlink can outlive a lost rename);
4. for each other ``X``: ``symlink(leader, X.link)`` then ``rename(X.link, X.segment)``,
   then fsync the directory (the links are durable before the marker can go);
5. delete the marker; 6. fsync the directory.

The groups of one run go through these steps together (all markers and outputs, then
all renames, ...), so the directory is fsynced once per step rather than once per
group; each group still sees the steps in this order.

Planning opens each compactable segment once and keeps what it looked up (the reader,
the positions and lengths of the live records: a `Selection`); step 2 copies from
those, so no index is read or searched twice.

Renaming first means a reader that follows a symlink always finds the compacted data.
`recover_compaction` (at start, before the refs are rebuilt from the directory) handles
every state a crash can leave:

====================================================  =====================================
state found                                           action
====================================================  =====================================
no marker                                             nothing
corrupt marker                                        delete it (and any .compacting)
marker for a single segment                           delete .compacting and the marker
multi-segment marker, ``.compacting`` present         abort: delete both, originals intact
multi-segment marker, ``.compacting`` absent          recreate every symlink (idempotent),
                                                      delete the marker, report the result
====================================================  =====================================

One check beyond Ra: in the last row the leader must be this compaction's output (its
header names the group); otherwise the crash came before ``.compacting`` existed on
disk, and recovery aborts instead of linking segments to an uncompacted leader.

And one more: a committed group's dead neighbours. Segments with no live entry between
a group's members are unreferenced by the same result, and deleted only once the server
applied it. A crash in between leaves them as regular files overlapping the compacted
leader's range, and refs rebuilt from the directory would cut the leader off where the
first of them begins, hiding the live entries it took over from later members (found by
the log-compaction-failpoints scenario, sim seed 142: the member crash-looped on "live
entry 209 is in no log here"). Groups are adjacent among the segments with live
entries, so every regular segment numbered between a committed leader's first and last
member that is not a member was dead or orphaned then: recovery deletes it.

Modules: this one runs minor and major compaction (and allows one at a time); the plan
of a major is `compaction_plan.py`, crash recovery `compaction_recovery.py`, the marker,
link and deletion helpers `compaction_files.py`, the result `compaction_result.py`.
Every name is importable from here.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from sediment.log import get_logger

from .compaction_files import (
    _KIND_MARKER,
    COMPACTING_SUFFIX,
    LINK_SUFFIX,
    MARKER_SUFFIX,
    SYMLINK_KEEP_S,
    _link,
    _stem,
    delete_unreferenced,
    purge_dangling_symlinks,
    purge_symlinks,
)
from .compaction_plan import SegmentInfo, _close, _plan, compaction_groups, segment_infos
from .compaction_recovery import recover_compaction
from .compaction_result import CompactionResult, CompactionType
from .failpoints import Failpoint, no_fp
from .fsutil import (
    frame,
    fsync_dir,
    unlink_if_exists,
    write_file_durable,
)
from .segment import (
    DEFAULT_MAX_ENTRIES,
    DEFAULT_MAX_SIZE,
    SegmentWriter,
    Selection,
    copy_selections,
    list_segment_files,
)
from .segrefs import SegRef, SegRefs, compactable, segment_number
from .snapshot import SnapshotState

__all__ = [
    "COMPACTING_SUFFIX",
    "LINK_SUFFIX",
    "MARKER_SUFFIX",
    "SYMLINK_KEEP_S",
    "CompactionGuard",
    "CompactionResult",
    "CompactionType",
    "SegmentInfo",
    "compaction_groups",
    "delete_unreferenced",
    "major_compaction",
    "minor_compaction",
    "purge_dangling_symlinks",
    "purge_symlinks",
    "recover_compaction",
    "segment_infos",
]

_log = get_logger("sediment.log.storage.compaction")

DEFAULT_NUM_MINORS: Final = 8  # Ra's {num_minors, 8}


# -- only one at a time -----------------------------------------------------------------


class CompactionGuard:
    """One compaction per group at a time; minors promoted to a major every N.

    ``schedule`` returns the kind to run, or None when one is already running (the
    request is logged and ignored, as Ra does; the highest snapshot index asked for
    meanwhile is remembered and ``finish`` returns it so a follow-up minor can run).
    ``num_minors=None`` means majors only on demand.
    """

    def __init__(self, num_minors: int | None = DEFAULT_NUM_MINORS) -> None:
        self.num_minors = num_minors
        self._lock = threading.Lock()
        self._current: tuple[CompactionType, int] | None = None
        self._minors = 0
        self._pending: int | None = None

    @property
    def current(self) -> tuple[CompactionType, int] | None:
        return self._current

    @property
    def minor_count(self) -> int:
        return self._minors

    def schedule(self, kind: CompactionType, snapshot_index: int) -> CompactionType | None:
        with self._lock:
            if self._current is not None:
                _log.debug(
                    "compaction already running; request ignored",
                    requested=kind,
                    snapshot_index=snapshot_index,
                    running=self._current,
                )
                if self._pending is None or snapshot_index > self._pending:
                    self._pending = snapshot_index
                return None
            if kind == "minor" and self.num_minors is not None and self._minors >= self.num_minors:
                kind = "major"
            if kind == "major":
                self._minors = 0
            else:
                self._minors += 1
            self._current = (kind, snapshot_index)
            return kind

    def finish(self) -> int | None:
        """Mark the running compaction done. Returns a snapshot index to run a minor
        for, if a newer one was requested while this one ran."""
        with self._lock:
            cur, self._current = self._current, None
            pending, self._pending = self._pending, None
            if cur is not None and pending is not None and pending > cur[1]:
                return pending
            return None


# -- minor --------------------------------------------------------------------------------


def minor_compaction(refs: Iterable[SegRef], state: SnapshotState) -> CompactionResult:
    """Compactable segments with no live entry (all of them if nothing is live).

    Pure: nothing is read or deleted. Ra runs this in the server process.
    """
    comp = compactable(refs, state.snapshot_index)
    if not state.live_indexes:
        dead = [r.file for r in comp]
    else:
        dead = [r.file for r in comp if not state.has_live_in(r.first, r.last)]
    return CompactionResult("minor", unreferenced=tuple(dead))


# -- major: the protocol ------------------------------------------------------------------


@dataclass(slots=True)
class _Prepared:
    names: list[str]
    marker: str
    compacting: str
    ref: SegRef


def _prepare(
    seg_dir: str,
    group: Sequence[SegmentInfo],
    sels: Sequence[Selection],
    fp: Failpoint,
    verify: bool,
) -> _Prepared:
    """Steps 1-2 for one group: the marker, then the sealed, fsynced .compacting."""
    names = [g.ref.file for g in group]
    stem = _stem(names[0])
    marker = os.path.join(seg_dir, stem + MARKER_SUFFIX)
    compacting = os.path.join(seg_dir, stem + COMPACTING_SUFFIX)
    write_file_durable(marker, frame(_KIND_MARKER, json.dumps(names).encode()), sync_dir=False)
    fp("compaction.after_marker")
    unlink_if_exists(compacting)
    dst = SegmentWriter.create(
        compacting,
        sels[0].reader.group,
        max_entries=sum(len(s) for s in sels) + 1,
        max_size=1 << 62,
        origin=names,
        compacted=True,
    )
    try:
        copy_selections(sels, dst, verify=verify)
        dst.seal(fp, sync_dir=False)
    except BaseException:
        dst.abandon()
        raise
    ref = SegRef(names[0], sels[0].indexes[0], sels[-1].indexes[-1])
    return _Prepared(names, marker, compacting, ref)


def _compact_groups(
    seg_dir: str,
    groups: Sequence[Sequence[SegmentInfo]],
    sels: dict[str, Selection],
    fp: Failpoint,
    verify: bool,
) -> list[_Prepared]:
    """The protocol for every group of one run, step by step: each group goes through
    the steps in order, and the directory is fsynced once per step, not per group."""
    done = [_prepare(seg_dir, g, [sels[i.ref.file] for i in g], fp, verify) for g in groups]
    if not done:
        return done
    fsync_dir(seg_dir)  # every marker and .compacting durably named before any commit
    fp("compaction.after_compacting_sync")
    for p in done:  # the commit points
        os.rename(p.compacting, os.path.join(seg_dir, p.names[0]))
        fp("compaction.after_rename")
    fsync_dir(seg_dir)  # no symlink may outlive a lost rename
    fp("compaction.after_rename_sync")
    linked = False
    for p in done:
        for name in p.names[1:]:
            _link(seg_dir, p.names[0], name, fp)
            linked = True
    if linked:
        fsync_dir(seg_dir)  # links durable before their marker can go
    for p in done:
        fp("compaction.before_marker_delete")
        os.unlink(p.marker)
        fp("compaction.after_marker_delete")
    fsync_dir(seg_dir)
    fp("compaction.after_dir_sync")
    return done


def major_compaction(
    seg_dir: str,
    refs: Iterable[SegRef],
    state: SnapshotState,
    *,
    max_count: int = DEFAULT_MAX_ENTRIES,
    max_size: int = DEFAULT_MAX_SIZE,
    fp: Failpoint = no_fp,
    verify: bool = False,
) -> CompactionResult:
    """Run a major compaction over the group's compactable segments.

    ``refs``: all of the server's refs (the compactable ones are chosen here, never the
    newest). Deletes orphans (regular segment files at or below the newest compactable
    one that no ref names: overwritten segments), then compacts each group. Referenced
    files are never deleted here.

    Records are copied with their own CRCs, which every later read checks, so a
    damaged record stays detectably damaged (as in Ra, the copy does not re-check
    them). ``verify=True`` checks each one first: a damaged record then stops the
    compaction with CorruptSegment and the originals stay.
    """
    all_refs = SegRefs(refs)
    comp = all_refs.compactable(state.snapshot_index)
    if not comp:
        return CompactionResult("major")
    newest = comp[-1].number
    referenced = set(all_refs.files())
    orphans = [
        n
        for n in list_segment_files(seg_dir)
        if (segment_number(n) or 0) <= newest and n not in referenced
    ]
    for n in orphans:
        _log.info("deleting orphaned segment", file=n)
        unlink_if_exists(os.path.join(seg_dir, n))
    if orphans:
        fsync_dir(seg_dir)
        fp("compaction.after_orphan_delete")
    if not state.live_indexes:
        return CompactionResult("major", unreferenced=tuple(r.file for r in comp))
    dead, infos, sels = _plan(seg_dir, comp, state)
    compacted: list[SegRef] = []
    linked: list[str] = []
    try:
        for p in _compact_groups(
            seg_dir, compaction_groups(infos, max_count, max_size), sels, fp, verify
        ):
            compacted.append(p.ref)
            linked.extend(p.names[1:])
    finally:
        _close(sels)
    return CompactionResult("major", tuple(dead), tuple(linked), tuple(compacted))
