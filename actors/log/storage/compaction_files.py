"""The files compaction leaves in a segment directory, and deleting them.

A major compaction writes a marker (``<leader>.compaction_group``, the group's file
names, framed), an output (``<leader>.compacting``) and symlinks (``X.link`` renamed over
``X.segment``); `compaction.py` has the protocol and `compaction_recovery.py` what a
crash leaves. Files are deleted only once the server dropped their refs
(`delete_unreferenced`); symlinks are purged when they dangle or are old enough
(Ra's ``SYMLINK_KEEPFOR_S``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Final

from .failpoints import Failpoint, no_fp
from .fsutil import (
    fsync_dir,
    is_regular,
    is_symlink,
    list_dir,
    read_file,
    unframe,
    unlink_if_exists,
)
from .segrefs import SEGMENT_SUFFIX

MARKER_SUFFIX: Final = ".compaction_group"
COMPACTING_SUFFIX: Final = ".compacting"
LINK_SUFFIX: Final = ".link"
SYMLINK_KEEP_S: Final = 60  # Ra's SYMLINK_KEEPFOR_S
_KIND_MARKER: Final = b"CGRP"
_KNOWN_SUFFIXES: Final = (SEGMENT_SUFFIX, MARKER_SUFFIX, COMPACTING_SUFFIX, LINK_SUFFIX)


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
