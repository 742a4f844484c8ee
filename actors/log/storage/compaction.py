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
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from sediment.log import get_logger

from .errors import CompactionError, CorruptSegment
from .failpoints import Failpoint, no_fp
from .fsutil import (
    FrameError,
    frame,
    fsync_dir,
    is_regular,
    is_symlink,
    list_dir,
    read_file,
    unframe,
    unlink_if_exists,
    write_file_durable,
)
from .segment import (
    DEFAULT_MAX_ENTRIES,
    DEFAULT_MAX_SIZE,
    FLAG_COMPACTED,
    SegmentReader,
    SegmentWriter,
    Selection,
    copy_selections,
    list_segment_files,
    read_header,
)
from .segrefs import SEGMENT_SUFFIX, SegRef, SegRefs, compactable, segment_number
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

CompactionType = Literal["minor", "major"]
MARKER_SUFFIX: Final = ".compaction_group"
COMPACTING_SUFFIX: Final = ".compacting"
LINK_SUFFIX: Final = ".link"
SYMLINK_KEEP_S: Final = 60  # Ra's SYMLINK_KEEPFOR_S
DEFAULT_NUM_MINORS: Final = 8  # Ra's {num_minors, 8}
GROUPING_THRESHOLD: Final = 0.5
_KIND_MARKER: Final = b"CGRP"
_KNOWN_SUFFIXES: Final = (SEGMENT_SUFFIX, MARKER_SUFFIX, COMPACTING_SUFFIX, LINK_SUFFIX)


@dataclass(frozen=True, slots=True)
class CompactionResult:
    """What a compaction did (Ra's ``#compaction_result{}``).

    ``unreferenced``: segment files with no live entry; the server drops their refs,
    then deletes them (`delete_unreferenced`). ``linked``: files now symlinks to a
    compacted leader; drop their refs (the links are purged later). ``compacted_segrefs``:
    the new refs of the compacted leaders; they replace the leaders' refs.
    """

    type: CompactionType = "minor"
    unreferenced: tuple[str, ...] = ()
    linked: tuple[str, ...] = ()
    compacted_segrefs: tuple[SegRef, ...] = ()

    @property
    def is_empty(self) -> bool:
        return not (self.unreferenced or self.linked or self.compacted_segrefs)

    def apply_to(self, refs: SegRefs) -> SegRefs:
        """The server's refs after this result (do this before deleting files)."""
        return refs.apply(self.unreferenced, self.linked, self.compacted_segrefs)


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


# -- major: planning ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """A compactable segment with live entries: what grouping decides on."""

    ref: SegRef
    num_entries: int  # every record in the file
    data_size: int  # bytes of every record in the file
    live: tuple[int, ...]  # live indexes the file holds inside the ref's range
    live_size: int  # bytes of those records

    @property
    def sparse(self) -> bool:
        """Fewer than half its entries, or under half its bytes, are live."""
        if self.num_entries == 0 or self.data_size == 0:
            return True
        return (
            len(self.live) / self.num_entries < GROUPING_THRESHOLD
            or self.live_size / self.data_size < GROUPING_THRESHOLD
        )


def compaction_groups(
    infos: Sequence[SegmentInfo], max_count: int, max_size: int
) -> list[list[SegmentInfo]]:
    """Groups of adjacent sparse segments whose live entries fit one segment.

    Ra's ``take_group``: oldest first, a sparse segment joins the current group while
    the group's live count stays <= ``max_count`` and its live bytes <= ``max_size``; a
    segment that would overflow closes the group (and starts the next one); a dense
    segment closes the group and is skipped; a sparse segment too big to fit even an
    empty group is skipped (PR #590: it used to loop forever).
    """
    groups: list[list[SegmentInfo]] = []
    cur: list[SegmentInfo] = []
    cnt = size = 0
    k = 0
    while k < len(infos):
        info = infos[k]
        n, s = len(info.live), info.live_size
        if not info.sparse:
            if cur:
                groups.append(cur)
                cur, cnt, size = [], 0, 0
            k += 1
            continue
        if cnt + n > max_count or size + s > max_size:
            if not cur:
                k += 1  # alone it does not fit: skip it
                continue
            groups.append(cur)
            cur, cnt, size = [], 0, 0
            continue  # reconsider this segment for a new group
        cur.append(info)
        cnt += n
        size += s
        k += 1
    if cur:
        groups.append(cur)
    return groups


def segment_infos(
    seg_dir: str, refs: Sequence[SegRef], state: SnapshotState
) -> tuple[list[str], list[SegmentInfo]]:
    """Split ``refs`` into files with no live entry and infos of those with some."""
    dead, infos, sels = _plan(seg_dir, refs, state)
    _close(sels)
    return dead, infos


def _close(sels: dict[str, Selection]) -> None:
    for s in sels.values():
        s.reader.close()


def _plan(
    seg_dir: str, refs: Sequence[SegRef], state: SnapshotState
) -> tuple[list[str], list[SegmentInfo], dict[str, Selection]]:
    """`segment_infos`, keeping each live segment's selection (its reader open, its
    live records looked up once) for the copy."""
    dead: list[str] = []
    infos: list[SegmentInfo] = []
    sels: dict[str, Selection] = {}
    try:
        for ref in refs:
            live = state.live_in(ref.first, ref.last)
            sel = _select(seg_dir, ref, live) if live else None
            if sel is None:
                dead.append(ref.file)
                continue
            sels[ref.file] = sel
            r = sel.reader
            present = live if len(sel) == len(live) else tuple(sel.indexes)
            infos.append(SegmentInfo(ref, r.num_entries, r.data_size, present, sel.size))
    except BaseException:
        _close(sels)
        raise
    return dead, infos, sels


def _select(seg_dir: str, ref: SegRef, live: tuple[int, ...]) -> Selection | None:
    """The live records ``ref``'s file holds (its reader open), None if there are none."""
    r = SegmentReader.open(os.path.join(seg_dir, ref.file))
    try:
        sel = r.select(live)
    except BaseException:
        r.close()
        raise
    if len(sel) != len(live):
        _log.warning(
            "live indexes missing from their segment",
            file=ref.file,
            missing=len(live) - len(sel),
        )
    if not sel.positions:
        r.close()
        return None
    return sel


# -- major: the protocol ------------------------------------------------------------------


def _stem(name: str) -> str:
    return name.split(".", 1)[0]


def _read_marker(path: str) -> list[str]:
    names = json.loads(unframe(_KIND_MARKER, read_file(path)))
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise ValueError("marker is not a non-empty list of file names")
    return names


def _link(seg_dir: str, leader: str, name: str, fp: Failpoint) -> None:
    """Replace segment ``name`` by a symlink to ``leader``: X.link, then rename."""
    link = os.path.join(seg_dir, _stem(name) + LINK_SUFFIX)
    unlink_if_exists(link)
    os.symlink(leader, link)  # relative: the directory may move
    fp("compaction.after_symlink")
    os.rename(link, os.path.join(seg_dir, name))
    fp("compaction.after_link_rename")


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


# -- recovery -----------------------------------------------------------------------------


def _recover_marker(seg_dir: str, marker_name: str, fp: Failpoint) -> CompactionResult:
    stem = marker_name[: -len(MARKER_SUFFIX)]
    marker = os.path.join(seg_dir, marker_name)
    compacting = os.path.join(seg_dir, stem + COMPACTING_SUFFIX)
    leader = stem + SEGMENT_SUFFIX
    try:
        names = _read_marker(marker)
        if names[0] != leader:
            raise ValueError(f"marker names {names[0]}, not {leader}")
    except (FrameError, ValueError, UnicodeDecodeError) as exc:
        _log.warning("corrupt compaction marker deleted", file=marker_name, reason=str(exc))
        unlink_if_exists(compacting)
        os.unlink(marker)
        return CompactionResult("major")
    if len(names) == 1:
        # Single segment: either state is consistent (the name never changes).
        unlink_if_exists(compacting)
        os.unlink(marker)
        return CompactionResult("major")
    if os.path.lexists(compacting):
        _log.warning("interrupted compaction aborted; originals intact", group=names)
        os.unlink(compacting)
        os.unlink(marker)
        return CompactionResult("major")
    # .compacting absent: the rename (commit point) happened, unless it never existed.
    leader_path = os.path.join(seg_dir, leader)
    try:
        with SegmentReader.open(leader_path) as r:
            ours = r.compacted and list(r.origin) == names
            ref = r.segref()
    except FileNotFoundError:
        raise CompactionError(f"{marker}: group leader {leader} is missing") from None
    except CorruptSegment as exc:
        raise CompactionError(f"{marker}: group leader is damaged: {exc}") from exc
    if not ours:
        if any(is_symlink(os.path.join(seg_dir, n)) for n in names[1:]):
            raise CompactionError(f"{marker}: symlinks exist but {leader} is not compacted")
        _log.warning("compaction stopped before its output existed; aborted", group=names)
        os.unlink(marker)
        return CompactionResult("major")
    for name in names[1:]:
        path = os.path.join(seg_dir, name)
        if is_symlink(path) and os.readlink(path) == leader:
            continue
        _link(seg_dir, leader, name, fp)
    os.unlink(marker)
    _log.info("interrupted compaction completed", group=names)
    compacted = (ref,) if ref is not None else ()
    return CompactionResult("major", linked=tuple(names[1:]), compacted_segrefs=compacted)


def _finish_committed(seg_dir: str, fp: Failpoint) -> list[CompactionResult]:
    """Complete committed compactions whose marker is gone or was unreadable.

    A compacted leader names its group in its header; once any member is a symlink to
    it, the rename (commit point) happened, so members still regular files are
    originals that must become symlinks too. (With the marker intact `_recover_marker`
    already did this; this covers a marker lost or damaged after the commit.)
    """
    out: list[CompactionResult] = []
    for name, origin in _group_outputs(seg_dir, list_segment_files(seg_dir)):
        path = os.path.join(seg_dir, name)
        members = [os.path.join(seg_dir, n) for n in origin[1:]]
        if not any(is_symlink(m) and os.readlink(m) == name for m in members):
            continue
        pending = [n for n, m in zip(origin[1:], members, strict=True) if is_regular(m)]
        if not pending:
            continue
        _log.warning("committed compaction finished without its marker", group=origin)
        for n in pending:
            _link(seg_dir, name, n, fp)
        with SegmentReader.open(path) as r:
            ref = r.segref()
        out.append(
            CompactionResult(
                "major", linked=tuple(origin[1:]), compacted_segrefs=(ref,) if ref else ()
            )
        )
    return out


def _group_outputs(seg_dir: str, names: Iterable[str]) -> Iterator[tuple[str, list[str]]]:
    """(name, group) of each of `names` that is a multi-segment compaction's output: its
    header names the group, itself first (unreadable headers are skipped)."""
    for name in names:
        try:
            _group, flags, origin = read_header(os.path.join(seg_dir, name))
        except CorruptSegment:
            continue
        if flags & FLAG_COMPACTED and len(origin) >= 2 and origin[0] == name:
            yield name, list(origin)


def _drop_dead_between(seg_dir: str) -> list[str]:
    """Delete the regular segments numbered between a committed compaction's members
    that are not members (see the module doc: they had no live entry)."""
    names = list_segment_files(seg_dir)
    dead: set[str] = set()
    for _name, origin in _group_outputs(seg_dir, names):
        lo, hi = segment_number(origin[0]), segment_number(origin[-1])
        if lo is None or hi is None:
            continue
        dead.update(n for n in names if n not in origin
                    and lo < (segment_number(n) or 0) < hi)
    for n in sorted(dead):
        _log.warning("dead segment a committed compaction left behind deleted", file=n)
        unlink_if_exists(os.path.join(seg_dir, n))
    return sorted(dead)


def recover_compaction(seg_dir: str, fp: Failpoint = no_fp) -> CompactionResult:
    """Bring ``seg_dir`` to "originals intact" or "compaction complete" after a crash.

    Run at start, before `segment.recover_segrefs`. Also removes leftovers no marker
    explains (``.compacting`` files, ``.link`` symlinks); unknown files are left alone
    with a warning. Returns the completed compactions' result to apply to the refs.
    """
    linked: list[str] = []
    compacted: list[SegRef] = []
    changed = False
    for name in list_dir(seg_dir):
        if name.endswith(MARKER_SUFFIX):
            res = _recover_marker(seg_dir, name, fp)
            linked.extend(res.linked)
            compacted.extend(res.compacted_segrefs)
            changed = True
    for res in _finish_committed(seg_dir, fp):
        linked.extend(res.linked)
        compacted.extend(res.compacted_segrefs)
        changed = True
    if _drop_dead_between(seg_dir):
        changed = True
    for name in list_dir(seg_dir):
        path = os.path.join(seg_dir, name)
        if name.endswith(COMPACTING_SUFFIX) or (name.endswith(LINK_SUFFIX) and is_symlink(path)):
            _log.warning("leftover compaction file deleted", file=name)
            os.unlink(path)
            changed = True
        elif not name.endswith(_KNOWN_SUFFIXES) or segment_number(name) is None:
            _log.warning("unknown file in segment directory left alone", file=name)
    if changed:
        fsync_dir(seg_dir)
    if not (linked or compacted):
        return CompactionResult("major") if changed else CompactionResult()
    return CompactionResult("major", linked=tuple(linked), compacted_segrefs=tuple(compacted))


# -- deleting -----------------------------------------------------------------------------


def delete_unreferenced(seg_dir: str, files: Iterable[str], fp: Failpoint = no_fp) -> list[str]:
    """Delete segment files the server no longer references, then dangling symlinks.

    Call only after the server applied the result to its refs. A crash part-way leaves
    unreferenced files behind; they are harmless (no live entry) and the next minor
    compaction or major orphan pass removes them.
    """
    files = [f for f in files if f.endswith(SEGMENT_SUFFIX) and os.sep not in f]
    if not files:
        return []
    fp("minor.before_delete")
    deleted = [f for f in files if unlink_if_exists(os.path.join(seg_dir, f))]
    purge_dangling_symlinks(seg_dir)
    fsync_dir(seg_dir)
    fp("minor.after_delete")
    return deleted


def purge_dangling_symlinks(seg_dir: str) -> list[str]:
    """Delete ``*.segment`` symlinks whose target is gone."""
    out = []
    for name in list_dir(seg_dir):
        path = os.path.join(seg_dir, name)
        if name.endswith(SEGMENT_SUFFIX) and is_symlink(path) and not os.path.exists(path):
            os.unlink(path)
            out.append(name)
    return out


def purge_symlinks(seg_dir: str, older_than_s: float = SYMLINK_KEEP_S, *, now: float) -> list[str]:
    """Delete ``*.segment`` symlinks created more than ``older_than_s`` before ``now``.

    The delay lets readers that still use an old segment name finish. ``now`` is passed
    in (seconds since the epoch, the clock of the file system's ctime).
    """
    out = []
    for name in list_dir(seg_dir):
        path = os.path.join(seg_dir, name)
        if not name.endswith(SEGMENT_SUFFIX) or not is_symlink(path):
            continue
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        if now - st.st_ctime > older_than_s:
            os.unlink(path)
            out.append(name)
    if out:
        fsync_dir(seg_dir)
    return out


def is_segment_file(seg_dir: str, name: str) -> bool:
    """A regular segment file (not a compaction symlink)."""
    return name.endswith(SEGMENT_SUFFIX) and is_regular(os.path.join(seg_dir, name))
