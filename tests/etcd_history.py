"""Record a history from a real etcd 3.4: concurrent clients sending seeded random
requests (`etcd_requests.RequestGen`: txns whose other branch holds reads that did not
run, reads at future and compacted revisions, Compacts) and a watch stream (watches from
now, from recent revisions and from compacted ones), in the checkers' format
(`scenarios/history.py`). The committed fixtures under tests/fixtures/ come from here:

    .venv/bin/python tests/etcd_history.py --seed 1 --ops 150 > tests/fixtures/etcd_history_1.json

Times are seconds since the start (time.monotonic); every operation of real etcd got
an answer, so none is indeterminate. The recorder is shared by the threads under a lock.
"""

from __future__ import annotations

import argparse
import queue
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from etcd_helpers import RealEtcd  # noqa: E402
from etcd_requests import RequestGen  # noqa: E402

from sediment.actors.kv import wire  # noqa: E402
from sediment.actors.kv.errors import KvError  # noqa: E402
from sediment.actors.kv.etcd_client import EtcdClient  # noqa: E402
from sediment.actors.kv.types import (  # noqa: E402
    Compact,
    DeleteRange,
    Event,
    KeyValue,
    Put,
    Range,
    Txn,
)
from sediment.scenarios.history import History  # noqa: E402
from sediment.scenarios.history_recorder import HistoryRecorder  # noqa: E402

KIND = {Put: "put", DeleteRange: "delete", Range: "range", Txn: "txn", Compact: "compact"}
WATCH_KEYS = [(b"a", b"b"), (b"\0", b"\0"), (b"b", None)]
PACE = 0.005  # seconds between a client's requests: the watches open among them
FINAL_CLIENT = 8


class Recording:
    def __init__(self) -> None:
        self.rec = HistoryRecorder()
        self.lock = threading.Lock()
        self.t0 = time.monotonic()

    def now(self) -> float:
        return time.monotonic() - self.t0


def _client(r: Recording, endpoint: str, client: int, seed: int, n: int,
            plain: bool) -> None:
    gen = RequestGen(seed, big=False, plain=plain)
    with EtcdClient(endpoint) as etcd:
        for _ in range(n):
            request = gen.next()
            if not isinstance(request, tuple(KIND)):
                continue
            with r.lock:
                h = r.rec.invoke(client, KIND[type(request)], request, r.now())  # type: ignore[arg-type]
            try:
                result: Any = etcd.request(request)
                outcome = "ok"
            except KvError as err:
                result, outcome = err, "fail"
            with r.lock:
                r.rec.complete(h, outcome, r.now(), result)  # type: ignore[arg-type]
            if outcome == "ok":
                gen.observe(result)
                if isinstance(request, Compact):
                    gen.compacted_at(request.revision)
            time.sleep(PACE)


def _event(e: Any) -> Event:
    kv = wire.kv_from_pb(e.kv)
    prev = wire.kv_from_pb(e.prev_kv) if e.HasField("prev_kv") else None
    if e.type == 1:  # DELETE
        return Event("delete", KeyValue(kv.key, b"", 0, kv.mod_revision, 0), prev)
    return Event("put", kv, prev)


def _watcher(r: Recording, endpoint: str, seed: int, stop: threading.Event,
             plan: list[tuple[float, int]]) -> None:
    """One stream; at each (delay, how) a watch: how 0 from now, -1 from the newest
    revision seen, -2 from revision 2 (compacted by then, usually)."""
    import grpc

    from sediment.actors.etcd.pb import rpc_pb2 as pb
    from sediment.actors.etcd.pb import rpc_pb2_grpc

    requests: queue.Queue[Any] = queue.Queue()
    pending: list[int] = []  # handles awaiting their created response, in order
    handles: dict[int, int] = {}  # etcd watch id -> handle

    def send() -> Any:
        while True:
            item = requests.get()
            if item is None:
                return
            yield item

    channel = grpc.insecure_channel(endpoint)
    stream = rpc_pb2_grpc.WatchStub(channel).Watch(send())
    head = [1]

    def opener() -> None:
        for i, (delay, how) in enumerate(plan):
            if stop.wait(delay):
                return
            key, end = WATCH_KEYS[i % len(WATCH_KEYS)]
            start = {0: 0, -1: max(1, head[0]), -2: 2}[how]
            prev_kv = i % 2 == 0
            with r.lock:
                handle = r.rec.watch_open(9, key, r.now(), range_end=end,
                                          start_revision=start, prev_kv=prev_kv)
                pending.append(handle)
            requests.put(pb.WatchRequest(create_request=pb.WatchCreateRequest(
                key=key, range_end=end or b"", start_revision=start, prev_kv=prev_kv)))

    threading.Thread(target=opener, daemon=True).start()
    try:
        for resp in stream:
            t = r.now()
            head[0] = max(head[0], resp.header.revision)
            with r.lock:
                if resp.created:
                    handle = pending.pop(0)
                    handles[resp.watch_id] = handle
                    start = r.rec.history().watches[handle].start_revision
                    r.rec.watch_created(handle, t, start or resp.header.revision + 1)
                if resp.watch_id not in handles:
                    continue
                handle = handles[resp.watch_id]
                if resp.canceled:
                    reason = "compacted" if resp.compact_revision else "canceled"
                    r.rec.watch_end(handle, t, reason, resp.compact_revision)
                    del handles[resp.watch_id]
                elif resp.events:
                    r.rec.watch_response(handle, t, resp.header.revision,
                                         [_event(e) for e in resp.events])
    except grpc.RpcError:
        pass  # the stream was closed at the end
    finally:
        requests.put(None)
        channel.close()


def record(endpoint: str, seed: int, ops: int, clients: int = 3,
           plain: bool = False) -> History:
    """A history of `ops` requests per client against the (fresh) etcd at `endpoint`;
    `plain`: no nested txns and no sort/filter options."""
    r = Recording()
    stop = threading.Event()
    plan = [(0.05, 0), (0.3, -1), (0.3, -2), (0.3, -1), (0.3, -2), (0.3, 0)]
    watcher = threading.Thread(target=_watcher, args=(r, endpoint, seed, stop, plan))
    watcher.start()
    threads = [threading.Thread(target=_client,
                                args=(r, endpoint, c, seed * 10 + c, ops, plain))
               for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    time.sleep(0.5)  # the last events reach the watches
    stop.set()
    with EtcdClient(endpoint) as etcd:  # the final read: what no_lost_writes compares
        every = Range(b"\0", b"\0")
        with r.lock:
            h = r.rec.invoke(FINAL_CLIENT, "range", every, r.now())
        result = etcd.request(every)
        with r.lock:
            r.rec.complete(h, "ok", r.now(), result)
    with r.lock:  # the watches still open stay open (the stream ends when etcd stops)
        return r.rec.history()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--ops", type=int, default=150)
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--plain", action="store_true",
                        help="no nested txns, no sort/filter options")
    args = parser.parse_args(argv)
    with RealEtcd() as etcd:
        history = record(etcd.endpoint, args.seed, args.ops, args.clients, args.plain)
    print(history.to_json())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
