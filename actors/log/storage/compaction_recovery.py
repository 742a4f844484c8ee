"""Recovering a segment directory after a crash during compaction (at start, before
the refs are rebuilt): every state the protocol of `compaction.py` can leave, and what
recovery does with it, is the table in that module's docstring.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator

from sediment.log import get_logger

from .compaction_files import (
    _KNOWN_SUFFIXES,
    COMPACTING_SUFFIX,
    LINK_SUFFIX,
    MARKER_SUFFIX,
    _link,
    _read_marker,
)
from .compaction_result import CompactionResult
from .errors import CompactionError, CorruptSegment
from .failpoints import Failpoint, no_fp
from .fsutil import (
    FrameError,
    fsync_dir,
    is_regular,
    is_symlink,
    list_dir,
    unlink_if_exists,
)
from .segment import (
    FLAG_COMPACTED,
    SegmentReader,
    list_segment_files,
    read_header,
)
from .segrefs import SEGMENT_SUFFIX, SegRef, segment_number

_log = get_logger("sediment.log.storage.compaction")


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
