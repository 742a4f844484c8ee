"""etcd 3.4's Range options over the keys alive at a revision (pure; the store and the
checkers' model share it, so both answer a Range the same way).

Order of etcd's applier: `count` is every key in the range (before the filters); the
min/max mod/create revision filters drop keys (0 is "no filter"); a sort_target other
than "key" with sort_order "none" sorts ascending; then `limit` (> 0) cuts the list and
sets `more`; keys_only drops the values last (a sort by value still sees them). One
etcd quirk kept: without a sort order or a filter in the request, etcd reads only the
first limit + 1 keys, so a sort_target alone (order "none") sorts just those.
Count-only answers the count alone. Ties of a sort keep key order (etcd sorts with Go's
sort.Sort, which for the few keys of a test is an insertion sort: stable; for more than
twelve keys Go's order among equal keys is not specified, ours stays key order).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from sediment.actors.kv.types import KeyValue, Range, RangeResult

_SORT_KEYS: dict[str, Callable[[KeyValue], bytes | int]] = {
    "key": lambda kv: kv.key,
    "version": lambda kv: kv.version,
    "create": lambda kv: kv.create_revision,
    "mod": lambda kv: kv.mod_revision,
    "value": lambda kv: kv.value,
}


def _kept(kv: KeyValue, r: Range) -> bool:
    return not (
        (r.max_mod_revision != 0 and kv.mod_revision > r.max_mod_revision)
        or (r.min_mod_revision != 0 and kv.mod_revision < r.min_mod_revision)
        or (r.max_create_revision != 0 and kv.create_revision > r.max_create_revision)
        or (r.min_create_revision != 0 and kv.create_revision < r.min_create_revision)
    )


def _filtered(r: Range) -> bool:
    return bool(r.min_mod_revision or r.max_mod_revision or r.min_create_revision
                or r.max_create_revision)


def shape(kvs: Sequence[KeyValue], r: Range, header: int) -> tuple[RangeResult, list[int]]:
    """The RangeResult for `kvs` (the keys alive in r's range, by key) and which of them
    it returns (their indexes in `kvs`, in the answer's order)."""
    count = len(kvs)
    if r.count_only:
        return RangeResult([], count, False, header), []
    picked = [i for i, kv in enumerate(kvs) if _kept(kv, r)]
    if r.limit > 0 and r.sort_order == "none" and not _filtered(r):
        # etcd reads only limit + 1 keys (by key) unless the request asked for a sort
        # order or a filter, and sorts those: a sort_target alone sorts the first ones
        picked = picked[: r.limit + 1]
    order = r.sort_order
    if r.sort_target != "key" and order == "none":
        order = "ascend"
    if order != "none":
        key = _SORT_KEYS[r.sort_target]
        picked.sort(key=lambda i: key(kvs[i]), reverse=order == "descend")
    more = False
    if r.limit > 0 and len(picked) > r.limit:
        picked, more = picked[: r.limit], True
    out = [kvs[i] for i in picked]
    if r.keys_only:
        out = [replace(kv, value=b"") for kv in out]
    return RangeResult(out, count, more, header), picked


__all__ = ["shape"]
