"""One scripted etcd Watch stream, as raw gRPC, told as a transcript that does not depend
on which server answered: run against a real etcd 3.4 (`tests/test_etcd_watch_stream.py`
pins etcd's answers) and against a Sediment endpoint (`tests/test_etcd_wire.py`: the same
transcript).

The script: writes under a fresh prefix (a txn putting two keys in the opposite of key
order: its events must come in op order), then on ONE stream: a watch from the first
write with prev_kv, a second with the NODELETE filter, a progress request once both are
synced, a cancel of the first, a live write, another progress request. Revisions are
told relative to the first write and watch ids by creation order; how events are
grouped into responses is etcd's business (etcd sends a replay as one response, Sediment
in pages), so the transcript keeps each watch's events in order and only checks that no
revision is split between two responses.
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

pb: Any = _rpc_pb2
pbg: Any = _rpc_pb2_grpc
kv_pb2: Any = _kv_pb2
WAIT = 60.0  # seconds for one expected response (a loaded 2-core machine)
NODELETE = 1


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
        finally:
            stream.close()
    return _tell(stream.seen, first, [w1, w2])


def _is_progress(r: Any) -> bool:
    return not (r.created or r.canceled or r.events)


def _tell(responses: list[Any], first: int, ids: list[int]) -> dict[str, Any]:
    def rel(rev: int) -> int | None:
        return rev - first if rev else None  # 0 (a delete's create revision) stays apart

    def kv(k: Any) -> tuple[Any, ...]:
        return (k.key, k.value, rel(k.create_revision), rel(k.mod_revision), k.version)

    name = {wid: f"w{i + 1}" for i, wid in enumerate(ids)}
    out: dict[str, Any] = {"stream": [], "events": {n: [] for n in name.values()},
                           "split_revisions": [], "header_behind_events": []}
    revs_in: dict[str, list[set[int]]] = {n: [] for n in name.values()}
    for r in responses:
        who = name.get(r.watch_id, r.watch_id)
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
