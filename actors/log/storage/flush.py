"""The segment writer's job for one group: flush WAL entries into segment files.

Why: the WAL is shared by every group and deleted once flushed, so each group's
entries must first land, synced, in that group's own segments. This module decides,
per entry, whether it is needed at all (`SnapshotState.keeps`: below the smallest live
index, or at or below the snapshot index and not live, it is dropped), whether it is
already there (a WAL file flushed again after a crash: same index and term), or whether
it overwrites older entries (a new leader truncated the log: a new segment starts at it,
and the server's refs limit the older segments), and when a segment is full.

Order the segment writer process follows per closed WAL file: ``flush`` every group
(it syncs before returning), tell each raft server its new refs (``SegRefs.update``),
then ``Wal.delete_files_upto``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from sediment.log import get_logger

from .failpoints import Failpoint, no_fp
from .fsutil import list_dir, makedirs_durable
from .records import Entry, encode
from .segment import (
    SegmentConfig,
    SegmentReader,
    SegmentWriter,
    list_segment_files,
    recover_segrefs,
)
from .segrefs import SegRef, SegRefs, segment_file_name, segment_number
from .snapshot import SnapshotState

__all__ = ["GroupSegmentWriter"]

_log = get_logger("sediment.log.storage.flush")


class GroupSegmentWriter:
    """One group's active segment and the writer's view of its segments.

    Open it after `compaction.recover_compaction` has run on ``seg_dir``: it rebuilds
    the refs from the directory and continues the newest segment if it is unsealed.
    """

    def __init__(
        self,
        seg_dir: str,
        group: str,
        config: SegmentConfig | None = None,
        fp: Failpoint = no_fp,
    ) -> None:
        makedirs_durable(seg_dir)
        self.seg_dir = seg_dir
        self.group = group
        self.config = config or SegmentConfig()
        self.refs: SegRefs = recover_segrefs(seg_dir)
        numbers = [n for name in list_dir(seg_dir) if (n := segment_number(name)) is not None]
        self._next_number = max(numbers, default=0) + 1
        self._readers: dict[str, SegmentReader] = {}
        self._active: SegmentWriter | None = None
        files = list_segment_files(seg_dir)
        if files:
            newest = os.path.join(seg_dir, files[-1])
            with SegmentReader.open(newest) as r:
                sealed = r.sealed
            if not sealed:
                self._active = SegmentWriter.reopen(
                    newest,
                    max_entries=self.config.max_entries,
                    max_size=self.config.max_size,
                    fp=fp,
                )

    # -- lookups -------------------------------------------------------------------------

    @property
    def active(self) -> SegmentWriter | None:
        return self._active

    def set_refs(self, refs: SegRefs) -> None:
        """Adopt the server's refs (after it applied a compaction result)."""
        self.refs = refs
        self._close_readers()

    def last_index(self) -> int | None:
        rng = self.refs.range()
        last = rng[1] if rng else None
        a = self._active.last_index if self._active is not None else None
        if a is None:
            return last
        return a if last is None else max(a, last)

    def term_of(self, index: int) -> int | None:
        """The term of the entry at ``index`` in this group's segments, if present."""
        if self._active is not None:
            t = self._active.term(index)
            if t is not None:
                return t
        ref = self.refs.find(index)
        if ref is None:
            return None
        if self._active is not None and ref.file == self._active.name:
            return None
        reader = self._readers.get(ref.file)
        if reader is None:
            try:
                reader = SegmentReader.open(os.path.join(self.seg_dir, ref.file))
            except FileNotFoundError:
                return None
            self._readers[ref.file] = reader
        return reader.term(index)

    # -- flushing ------------------------------------------------------------------------

    def _start_segment(self, fp: Failpoint) -> SegmentWriter:
        name = segment_file_name(self._next_number)
        self._next_number += 1
        w = SegmentWriter.create(
            os.path.join(self.seg_dir, name),
            self.group,
            max_entries=self.config.max_entries,
            max_size=self.config.max_size,
            fp=fp,
        )
        self._active = w
        return w

    def _seal_active(self, touched: dict[str, SegRef], fp: Failpoint) -> None:
        w = self._active
        if w is None:
            return
        self._active = None
        if w.count == 0:
            w.close()
            return
        ref = w.seal(fp)
        assert ref is not None
        touched[ref.file] = ref

    def flush(
        self, entries: Iterable[Entry], state: SnapshotState, fp: Failpoint = no_fp
    ) -> list[SegRef]:
        """Write the needed entries (ascending, as the WAL gives them) and sync.

        Returns the refs of every segment written to, oldest first (the same files'
        earlier refs are superseded); ``self.refs`` is updated with them.
        """
        touched: dict[str, SegRef] = {}
        appended = False
        last = self.last_index()
        for e in entries:
            i = e.index
            if not state.keeps(i):
                continue
            if last is not None and i <= last:
                t = self.term_of(i)
                if t == e.term:
                    continue  # already in a segment (a WAL file flushed again)
                if t is None:
                    _log.warning(
                        "entry below the log's last index is missing; rewriting it",
                        group=self.group,
                        index=i,
                        last=last,
                    )
                # An overwrite: entries >= i are replaced; start a new segment at i.
                if self._active is not None and self._active.count == 0:
                    w = self._active
                else:
                    self._seal_active(touched, fp)
                    w = self._start_segment(fp)
            else:
                w = self._active if self._active is not None else self._start_segment(fp)
            raw = encode(i, e.term, e.timestamp, e.payload)
            if not w.has_room(len(raw)):
                self._seal_active(touched, fp)
                w = self._start_segment(fp)
            first_in_segment = w.count == 0
            w.append_raw(raw, i, e.term)
            appended = True
            if first_in_segment:
                # publish the start at once so later lookups see older refs limited
                self.refs, _ = self.refs.update([SegRef(w.name, i, i)])
            last = i
        if appended and self._active is not None and self._active.count:
            self._active.sync(fp)
            ref = self._active.ref()
            assert ref is not None
            touched[ref.file] = ref
        out = sorted(touched.values(), key=lambda r: r.number)
        if out:
            self.refs, _ = self.refs.update(out)
        return out

    def roll(self, fp: Failpoint = no_fp) -> SegRef | None:
        """Seal the active segment now (the next flush starts a new one)."""
        touched: dict[str, SegRef] = {}
        self._seal_active(touched, fp)
        return next(iter(touched.values()), None)

    def _close_readers(self) -> None:
        for r in self._readers.values():
            r.close()
        self._readers.clear()

    def close(self) -> None:
        """Close files; the active segment stays unsealed (continued on reopen)."""
        self._close_readers()
        if self._active is not None:
            self._active.close()
            self._active = None

    def abandon(self) -> None:
        """Drop everything without writing buffered entries (a simulated crash)."""
        self._close_readers()
        if self._active is not None:
            self._active.abandon()
            self._active = None
