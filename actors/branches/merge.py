"""Read resolution across layers (pure): k-way merges of sorted record streams.

A branch is read through layers, newest first: the staging token, the sealed tokens in
order, then the compacted metarange if set, else the commit's metarange. Every layer
is a stream of `Record`s sorted strictly by path; a tombstone (entry None) in a layer
hides the path in every older one. `merge_layers` gives, for each path, the record of
the newest layer that has it (tombstones included: the caller decides whether it
lists them, as a listing does not and a diff must). The same function is the commit's
and the compactor's "changes" stream (staging layers only) and the listing's view
(staging layers over the base).

Listing pages over the KV come in windows (`window_bound`): each staging layer is
fetched in batches, and a window ends at the smallest last path among the layers that
have more; everything at or below it is complete in every layer, so merging it is
exact, and the next window starts after it.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Sequence

from sediment.actors.branches.entry import Entry, Record


def merge_layers(layers: Sequence[Iterable[Record]]) -> Iterator[Record]:
    """One record per path, in path order, from the newest (first) layer holding it."""
    tagged = [_tag(layer, i) for i, layer in enumerate(layers)]
    last: str | None = None
    for path, _, rec in heapq.merge(*tagged):
        if path != last:
            last = path
            yield rec


def _tag(layer: Iterable[Record], i: int) -> Iterator[tuple[str, int, Record]]:
    for rec in layer:
        yield rec[0], i, rec


def visible(records: Iterable[Record]) -> Iterator[tuple[str, Entry]]:
    """The records that are entries (tombstones dropped)."""
    for path, entry in records:
        if entry is not None:
            yield path, entry


def in_prefix(records: Iterable[Record], prefix: str) -> Iterator[Record]:
    """Records whose path starts with `prefix`, stopping at the first one past it
    (the stream is sorted, so nothing after it can match)."""
    for rec in records:
        if rec[0].startswith(prefix):
            yield rec
        elif rec[0] > prefix:
            return


def start_after(prefix: str, after: str) -> str:
    """The first path a listing of `prefix` after `after` may return (inclusive)."""
    successor = after + "\0" if after else ""
    return max(prefix, successor)


def page(items: Iterable[tuple[str, Entry]], amount: int) -> tuple[list[tuple[str, Entry]], bool]:
    """The first `amount` items and whether there are more."""
    out: list[tuple[str, Entry]] = []
    for item in items:
        if len(out) == amount:
            return out, True
        out.append(item)
    return out, False


def window_bound(fetched: Sequence[tuple[Sequence[Record], bool]]) -> str | None:
    """Up to which path a window of batches is complete: the smallest last path of the
    layers that have more (`(records, more)` per layer), None if none has more."""
    bound: str | None = None
    for records, more in fetched:
        if more:
            if not records:
                raise ValueError("a layer with more records fetched none")
            last = records[-1][0]
            bound = last if bound is None or last < bound else bound
    return bound


def split_at(records: Sequence[Record], bound: str | None) -> tuple[list[Record], list[Record]]:
    """(records at or below `bound`, the rest); None takes everything."""
    if bound is None:
        return list(records), []
    lo, hi = 0, len(records)
    while lo < hi:
        mid = (lo + hi) // 2
        if records[mid][0] <= bound:
            lo = mid + 1
        else:
            hi = mid
    return list(records[:lo]), list(records[lo:])


def check_sorted(records: Sequence[Record]) -> bool:
    """Whether paths strictly increase."""
    return all(records[i][0] < records[i + 1][0] for i in range(len(records) - 1))


__all__ = [
    "check_sorted",
    "in_prefix",
    "merge_layers",
    "page",
    "split_at",
    "start_after",
    "visible",
    "window_bound",
]
