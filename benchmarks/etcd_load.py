"""One etcd v3 load generator for both sides of a comparison: Sediment's gRPC endpoints
and a real etcd are driven by the very same client code, so a ratio measures the servers.

Each client is a thread with its own gRPC channel (an etcd client per goroutine, as the
etcd benchmark tool does); a request waits for its answer before the next one goes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import grpc

from sediment.actors.etcd.pb import rpc_pb2 as pb
from sediment.actors.etcd.pb import rpc_pb2_grpc as pbg

VALUE = b"v" * 100
TIMEOUT = 60.0  # seconds for one request


def key(i: int, keys: int) -> bytes:
    return b"bench/%08d" % (i % keys)


def _request(kind: str, k: bytes) -> Callable[[Any], Any]:
    if kind == "put":
        put = pb.PutRequest(key=k, value=VALUE)
        return lambda stub: stub.Put(put, timeout=TIMEOUT)
    rng = pb.RangeRequest(key=k, serializable=kind == "serializable")
    return lambda stub: stub.Range(rng, timeout=TIMEOUT)


def throughput(endpoint: str, kind: str, n: int, clients: int, keys: int) -> float:
    """Requests/s of `kind` ("put", "linearizable", "serializable") from `clients`
    concurrent clients sharing n requests; timing starts when every client is connected."""
    per = n // clients
    ready = threading.Barrier(clients + 1)
    errors: list[BaseException] = []

    def run(j: int) -> None:
        with grpc.insecure_channel(endpoint) as channel:
            stub = pbg.KVStub(channel)
            calls = [_request(kind, key(j * per + i, keys)) for i in range(per)]
            calls[0](stub)  # connected and warm before the clock starts
            ready.wait()
            try:
                for call in calls:
                    call(stub)
            except BaseException as err:  # noqa: BLE001 - reported by the caller
                errors.append(err)

    threads = [threading.Thread(target=run, args=(j,), daemon=True) for j in range(clients)]
    for t in threads:
        t.start()
    ready.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"{kind} x{clients} against {endpoint}: {errors[0]!r}")
    return per * clients / seconds


def watch_latency(write_endpoint: str, watch_endpoint: str, n: int,
                  pause: float = 0.005) -> dict[str, Any]:
    """A watch on `watch_endpoint`; one writer puts one key n times on `write_endpoint`.
    Per event: seconds from the put's invocation and from its acknowledgement to the
    event in the watching client's hands."""
    watched = b"watched"
    received: dict[int, float] = {}
    invoked: dict[int, float] = {}
    acked: dict[int, float] = {}
    created = threading.Event()
    done = threading.Event()

    def requests() -> Any:
        yield pb.WatchRequest(create_request=pb.WatchCreateRequest(key=watched))
        done.wait(TIMEOUT * 10)

    def watcher(channel: grpc.Channel) -> None:
        for resp in pbg.WatchStub(channel).Watch(requests()):
            now = time.perf_counter()
            if resp.created:
                created.set()
            for ev in resp.events:
                received.setdefault(ev.kv.mod_revision, now)
            if len(received) >= n:
                return

    with grpc.insecure_channel(watch_endpoint) as wch, \
            grpc.insecure_channel(write_endpoint) as pch:
        reader = threading.Thread(target=watcher, args=(wch,), daemon=True)
        reader.start()
        if not created.wait(TIMEOUT):
            raise RuntimeError(f"no watch created on {watch_endpoint}")
        kv = pbg.KVStub(pch)
        for i in range(n):
            t0 = time.perf_counter()
            resp = kv.Put(pb.PutRequest(key=watched, value=b"%d" % i), timeout=TIMEOUT)
            t1 = time.perf_counter()
            invoked[resp.header.revision], acked[resp.header.revision] = t0, t1
            time.sleep(pause)
        reader.join(TIMEOUT)
        done.set()
    missing = [r for r in invoked if r not in received]
    if missing:
        raise RuntimeError(f"{len(missing)} events never arrived on {watch_endpoint}")
    return {"events": n,
            "from_invoke": sorted(received[r] - invoked[r] for r in invoked),
            "from_ack": sorted(received[r] - acked[r] for r in invoked)}


def percentile(sorted_values: list[float], p: float) -> float:
    k = min(len(sorted_values) - 1, max(0, round(p / 100 * (len(sorted_values) - 1))))
    return sorted_values[k]


def rows(write_endpoint: str, watch_endpoint: str, puts: int, keys: int,
         watch_events: int) -> dict[str, Any]:
    """The comparison's rows against one cluster: puts, linearizable and serializable
    ranges at 1 and 16 clients, watch delivery latency (ms)."""
    out: dict[str, Any] = {}
    # warm up (not recorded): connections, the servers' first requests, the raft
    # channels between a fresh cluster's hosts
    throughput(write_endpoint, "put", 300, 16, keys)
    for kind in ("put", "linearizable", "serializable"):
        for clients in (1, 16):
            n = puts if kind == "put" else puts * 2
            out[f"{kind}/{clients}"] = throughput(write_endpoint, kind, n, clients, keys)
    lat = watch_latency(write_endpoint, watch_endpoint, watch_events)
    out["watch"] = {
        "events": lat["events"],
        "invoke_p50_ms": 1e3 * percentile(lat["from_invoke"], 50),
        "invoke_p99_ms": 1e3 * percentile(lat["from_invoke"], 99),
        "ack_p50_ms": 1e3 * percentile(lat["from_ack"], 50),
        "ack_p99_ms": 1e3 * percentile(lat["from_ack"], 99),
    }
    return out
