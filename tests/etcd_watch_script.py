"""One scripted etcd Watch stream, as raw gRPC, told as a transcript that does not depend
on which server answered: run against a real etcd 3.4 (`tests/test_etcd_watch_stream.py`
pins etcd's answers) and against a Sediment endpoint (`tests/test_etcd_wire.py`: the same
transcript).

The script: writes under a fresh prefix (a txn putting two keys in the opposite of key
order: its events must come in op order), then on ONE stream: a watch from the first
write with prev_kv, a second with the NODELETE filter, a progress request once both are
synced, a cancel of the first, a live write, another progress request; then a quiet
watch with `progress_notify` (the transcript records that a notify with the watch's own
id and the head came while nothing was written, not how many: that is the clock's), and
a watch with `fragment` and prev_kv that sees one txn of three large puts, a response
over the server's fragmenting size (`FRAGMENT_AT`: the request limit `LIMIT` plus etcd's
512 KiB of gRPC overhead; the limit the same on both: `ETCD_ARGS` for etcd, Sediment's
default `Limits`), so it comes as one event per response, all but the last marked
fragment. Revisions are told relative to the first write and watch ids by
creation order; how events are grouped into responses is etcd's business (etcd sends a
replay as one response, Sediment in pages), so the transcript keeps each watch's events
in order and only checks that no revision is split between two responses (a fragmented
response aside, told response by response).

The progress interval must be short on both servers: etcd's
`--experimental-watch-progress-notify-interval` (`ETCD_ARGS`), Sediment's
`Cluster.start(progress_interval=PROGRESS_INTERVAL)`.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

import grpc

from sediment.actors.etcd.pb import kv_pb2 as _kv_pb2
from sediment.actors.etcd.pb import rpc_pb2 as _rpc_pb2
from sediment.actors.etcd.pb import rpc_pb2_grpc as _rpc_pb2_grpc
from sediment.actors.kv.store import prefix_end
from sediment.actors.kv.validation import DEFAULT_MAX_REQUEST_BYTES

pb: Any = _rpc_pb2
pbg: Any = _rpc_pb2_grpc
kv_pb2: Any = _kv_pb2
WAIT = 60.0  # seconds for one expected response (a loaded 2-core machine)
NODELETE = 1
LIMIT = DEFAULT_MAX_REQUEST_BYTES  # a request's limit (--max-request-bytes)
FRAGMENT_AT = LIMIT + 512 * 1024  # etcd fragments a watch response above the limit + 512 KiB
PROGRESS_INTERVAL = 1.0  # seconds between progress notifies of a quiet watch
ETCD_ARGS = (f"--max-request-bytes={LIMIT}",
             f"--experimental-watch-progress-notify-interval={int(PROGRESS_INTERVAL)}s")
BIG = LIMIT * 3 // 10  # three of them fit in one txn
PREV = LIMIT // 2  # the values they overwrite: one event with prev_kv is below FRAGMENT_AT,
# two are above it


def _events_done(responses: list[Any], watch_id: int, revision: int) -> bool:
    return any(r.watch_id == watch_id and any(e.kv.mod_revision >= revision for e in r.events)
               for r in responses)


class _Stream:
    def __init__(self, channel: grpc.Channel) -> None:
        self.requests: queue.Queue[Any] = queue.Queue()
        self.responses: queue.Queue[Any] = queue.Queue()
        self.seen: list[Any] = []
        self.call = pbg.WatchStub(channel).Watch(iter(self.requests.get, None), timeout=300)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for r in self.call:
                self.responses.put(r)
        except grpc.RpcError:
            pass
        self.responses.put(None)

    def send(self, request: Any) -> None:
        self.requests.put(request)

    def until(self, done: Callable[[list[Any]], bool]) -> None:
        while not done(self.seen):
            item = self.responses.get(timeout=WAIT)
            if item is None:
                raise AssertionError(f"the stream ended; seen: {self.seen!r:.2000}")
            self.seen.append(item)

    def close(self) -> None:
        self.requests.put(None)
        self.call.cancel()


def watch_transcript(endpoint: str, prefix: bytes) -> dict[str, Any]:
    """Run the script against `endpoint` ("host:port"); the transcript (see above)."""
    end = prefix_end(prefix)
    with grpc.insecure_channel(endpoint) as channel:
        kv = pbg.KVStub(channel)
        first = kv.Put(pb.PutRequest(key=prefix + b"a", value=b"1"), timeout=WAIT).header.revision
        kv.Put(pb.PutRequest(key=prefix + b"b", value=b"2"), timeout=WAIT)
        kv.DeleteRange(pb.DeleteRangeRequest(key=prefix + b"a"), timeout=WAIT)
        txn = kv.Txn(pb.TxnRequest(success=[
            pb.RequestOp(request_put=pb.PutRequest(key=prefix + b"d", value=b"4")),
            pb.RequestOp(request_put=pb.PutRequest(key=prefix + b"c", value=b"3"))]),
            timeout=WAIT)
        head = txn.header.revision
        stream = _Stream(channel)
        try:
            stream.send(pb.WatchRequest(create_request=pb.WatchCreateRequest(
                key=prefix, range_end=end, start_revision=first, prev_kv=True)))
            stream.until(lambda s: any(r.created for r in s))
            w1 = next(r.watch_id for r in stream.seen if r.created)
            stream.until(lambda s: _events_done(s, w1, head))
            stream.send(pb.WatchRequest(create_request=pb.WatchCreateRequest(
                key=prefix, range_end=end, start_revision=first, filters=[NODELETE])))
            stream.until(lambda s: sum(r.created for r in s) == 2)
            w2 = [r.watch_id for r in stream.seen if r.created][1]
            stream.until(lambda s: _events_done(s, w2, head))
            stream.send(pb.WatchRequest(progress_request=pb.WatchProgressRequest()))
            stream.until(lambda s: _is_progress(s[-1]))
            stream.send(pb.WatchRequest(cancel_request=pb.WatchCancelRequest(watch_id=w1)))
            stream.until(lambda s: any(r.canceled and r.watch_id == w1 for r in s))
            live = kv.Put(pb.PutRequest(key=prefix + b"e", value=b"5"),
                          timeout=WAIT).header.revision
            stream.until(lambda s: _events_done(s, w2, live))
            mark = len(stream.seen)
            stream.send(pb.WatchRequest(progress_request=pb.WatchProgressRequest()))
            stream.until(lambda s: len(s) > mark and _is_progress(s[-1]))
            w3 = _create(stream, 3, key=prefix + b"quiet/",
                         range_end=prefix_end(prefix + b"quiet/"), progress_notify=True)
            stream.until(lambda s: any(_is_notify(r, w3) for r in s))
            w4 = _fragmented(kv, stream, _sibling(prefix))
        finally:
            stream.close()
    return _tell(stream.seen, first, [w1, w2, w3, w4])


def _create(stream: _Stream, n: int, **create: Any) -> int:
    """Create the stream's n-th watch; its id."""
    stream.send(pb.WatchRequest(create_request=pb.WatchCreateRequest(**create)))
    stream.until(lambda s: sum(r.created for r in s) == n)
    return int([r.watch_id for r in stream.seen if r.created][n - 1])


def _sibling(prefix: bytes) -> bytes:
    """A prefix outside [prefix, prefix_end(prefix)): the large values stay out of the
    other watches' events ("/script/" -> "/script-big/")."""
    return prefix.rstrip(b"/") + b"-big/"


def _fragmented(kv: Any, stream: _Stream, big: bytes) -> int:
    """Three large keys, then a fragment watch with prev_kv, then one txn overwriting all
    three: one revision of three events, each with its prev_kv, over `FRAGMENT_AT`."""
    keys = [big + k for k in (b"x", b"y", b"z")]
    for k in keys:
        kv.Put(pb.PutRequest(key=k, value=b"1" * PREV), timeout=WAIT)
    w4 = _create(stream, 4, key=big, range_end=prefix_end(big), prev_kv=True, fragment=True)
    txn = kv.Txn(pb.TxnRequest(success=[
        pb.RequestOp(request_put=pb.PutRequest(key=k, value=b"2" * BIG)) for k in keys]),
        timeout=WAIT)
    rev = txn.header.revision

    def whole(seen: list[Any]) -> bool:  # the last part (not marked fragment) came
        mine = [r for r in seen if r.watch_id == w4 and r.events]
        return bool(mine) and not mine[-1].fragment and mine[-1].events[-1].kv.mod_revision >= rev

    stream.until(whole)
    return w4


def _is_notify(r: Any, watch_id: int) -> bool:
    """A progress notify: the watch's own id, no events (a progress request's answer has
    id -1)."""
    return r.watch_id == watch_id and not (r.created or r.canceled or r.events)


def _is_progress(r: Any) -> bool:
    return not (r.created or r.canceled or r.events)


def _tell(responses: list[Any], first: int, ids: list[int]) -> dict[str, Any]:
    def rel(rev: int) -> int | None:
        return rev - first if rev else None  # 0 (a delete's create revision) stays apart

    def kv(k: Any) -> tuple[Any, ...]:
        return (k.key, k.value, rel(k.create_revision), rel(k.mod_revision), k.version)

    name = {wid: f"w{i + 1}" for i, wid in enumerate(ids)}
    notify, fragmented = ids[2], ids[3]
    out: dict[str, Any] = {"stream": [], "events": {n: [] for n in name.values()},
                           "split_revisions": [], "header_behind_events": [],
                           "progress_notify": None, "fragments": []}
    revs_in: dict[str, list[set[int]]] = {n: [] for n in name.values()}
    for r in responses:
        who = name.get(r.watch_id, r.watch_id)
        if _is_notify(r, notify):  # how many came is the clock's: the first one told
            if out["progress_notify"] is None:
                out["progress_notify"] = (who, rel(r.header.revision))
            continue
        if r.watch_id == fragmented and r.events:  # one response per part, sizes not bytes
            out["fragments"].append((r.fragment, [
                (e.type, e.kv.key, len(e.kv.value), rel(e.kv.mod_revision),
                 len(e.prev_kv.value) if e.HasField("prev_kv") else None) for e in r.events]))
            continue
        if r.created or r.canceled or not r.events:
            out["stream"].append({"watch": who, "created": r.created, "canceled": r.canceled,
                                  "compact_revision": r.compact_revision,
                                  "cancel_reason": r.cancel_reason, "fragment": r.fragment,
                                  "revision": rel(r.header.revision) if not (
                                      r.created or r.canceled) else None})
            continue
        revs = {e.kv.mod_revision for e in r.events}
        if any(revs & earlier for earlier in revs_in[who]):
            out["split_revisions"].append((who, sorted(x - first for x in revs)))
        revs_in[who].append(revs)
        if r.header.revision < max(revs):
            out["header_behind_events"].append((who, rel(r.header.revision)))
        for e in r.events:
            out["events"][who].append(
                ("put" if e.type == kv_pb2.Event.PUT else "delete", kv(e.kv),
                 kv(e.prev_kv) if e.HasField("prev_kv") else None))
    return out


__all__ = ["watch_transcript"]
