"""Sediment's etcd v3 gRPC API on Ray, driven by the real `etcdctl` 3.4 and by gRPC.

One 3-node cluster with the etcd API serves the module (the session's Ray cluster);
etcdctl talks to the leader's endpoint and to followers' (a follower forwards writes and
linearizable reads). Bad input goes over the wire as raw gRPC: etcd's error, the server
stays up, nothing is written. The differential test sends one seed's random requests
through the same client to a real etcd 3.4 and to a fresh Sediment cluster's endpoint.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from etcd_helpers import RealEtcd, require_etcd
from etcd_watch_script import ETCD_ARGS, PROGRESS_INTERVAL

from sediment.actors.branches.shell import sensor_wire as sw
from sediment.actors.etcd.pb import rpc_pb2 as pb
from sediment.actors.etcd.pb import rpc_pb2_grpc as pbg
from sediment.actors.etcd.shell.server import EtcdWire
from sediment.actors.etcd.shell.watch_stream import MAX_QUEUED
from sediment.wiring.cluster import Cluster

pytestmark = pytest.mark.ray
ETCDCTL = shutil.which("etcdctl")


def _need_etcdctl() -> str:
    if ETCDCTL is None:
        pytest.skip("etcdctl (Debian etcd-client) is not installed")
    return ETCDCTL


@pytest.fixture(scope="module")
def wire(ray_cluster: Any) -> Iterator[Cluster]:
    from sediment.runtime import api

    data = tempfile.mkdtemp(prefix="sediment-wire-")
    rt = api.start("ray", nodes=("n1", "n2", "n3"), reap_delay=1.0, warm_pool=0)
    try:
        cluster = Cluster.start(runtime=rt, data_dir=data, etcd=EtcdWire(),
                                compaction_interval=3600.0, progress_interval=PROGRESS_INTERVAL)
        yield cluster
    finally:
        rt.shutdown()
        shutil.rmtree(data, ignore_errors=True)


def _leader_url(c: Cluster) -> str:
    leader = c.wait_ready()
    return c.endpoints()[leader]


def _follower_url(c: Cluster) -> str:
    leader = c.wait_ready()
    return next(url for node, url in c.endpoints().items() if node != leader)


def ctl(url: str, *args: str, stdin: str | None = None, check: bool = True) -> str:
    done = subprocess.run([_need_etcdctl(), f"--endpoints={url}", *args], input=stdin,
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "ETCDCTL_API": "3"})
    if check:
        assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout + done.stderr


def _stub(url: str) -> tuple[grpc.Channel, Any]:
    channel = grpc.insecure_channel(url.removeprefix("http://"))
    return channel, pbg.KVStub(channel)


def _head(url: str) -> int:
    channel, kv = _stub(url)
    with channel:
        return int(kv.Range(pb.RangeRequest(key=b"\0", count_only=True), timeout=30)
                   .header.revision)


# ---- etcdctl -------------------------------------------------------------------------


def test_put_get_delete_with_prefixes_on_leader_and_follower(wire: Cluster) -> None:
    leader, follower = _leader_url(wire), _follower_url(wire)
    assert ctl(leader, "put", "/app/a", "1").strip() == "OK"
    assert ctl(follower, "put", "/app/b", "2").strip() == "OK"  # forwarded to the leader
    assert ctl(follower, "get", "--prefix", "/app/").split() == ["/app/a", "1", "/app/b", "2"]
    assert ctl(leader, "get", "/app/", "--prefix", "--keys-only").split() == ["/app/a",
                                                                            "/app/b"]
    assert ctl(follower, "get", "/app/a", "--consistency=s").split() == ["/app/a", "1"]
    assert ctl(follower, "del", "--prefix", "/app/").strip() == "2"
    assert ctl(leader, "get", "--prefix", "/app/").strip() == ""


def test_txn_as_etcdctl_sends_it(wire: Cluster) -> None:
    url = _leader_url(wire)
    ctl(url, "put", "/txn/k", "v1")
    out = ctl(url, "txn", stdin='value("/txn/k") = "v1"\n\nput /txn/k v2\n\nput /txn/k no\n\n')
    assert out.split()[:2] == ["SUCCESS", "OK"]
    out = ctl(url, "txn", stdin='value("/txn/k") = "v1"\n\nput /txn/k v3\n\nget /txn/k\n\n')
    assert out.split() == ["FAILURE", "/txn/k", "v2"]


def test_watch_streams_and_a_compacted_start_is_canceled(wire: Cluster) -> None:
    url, follower = _leader_url(wire), _follower_url(wire)
    first = int(ctl(url, "put", "/w/k", "a", "-w", "json").split('"revision":')[1].split(",")[0])
    ctl(url, "put", "/w/k", "b")
    watch = subprocess.Popen([_need_etcdctl(), f"--endpoints={follower}", "watch", "--prefix",
                              "/w/", f"--rev={first}"], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    try:
        assert watch.stdout is not None
        seen = [watch.stdout.readline().strip() for _ in range(6)]  # replay
        assert seen == ["PUT", "/w/k", "a", "PUT", "/w/k", "b"]
        ctl(url, "put", "/w/k", "c")  # live
        assert [watch.stdout.readline().strip() for _ in range(3)] == ["PUT", "/w/k", "c"]
    finally:
        watch.kill()
        watch.wait()
    head = _head(url)
    ctl(url, "compact", str(head))
    out = ctl(follower, "watch", "/w/k", f"--rev={first}", check=False)
    assert "required revision has been compacted" in out, out


def test_compact_then_reads_below_it_fail_as_in_etcd(wire: Cluster) -> None:
    url = _leader_url(wire)
    ctl(url, "put", "/c/k", "1")
    rev = _head(url)
    ctl(url, "put", "/c/k", "2")
    assert "compacted revision" in ctl(url, "compact", str(rev))
    out = ctl(url, "get", "/c/k", f"--rev={rev - 1}", check=False)
    assert "required revision has been compacted" in out
    assert ctl(url, "get", "/c/k", f"--rev={rev}").split() == ["/c/k", "1"]


def test_endpoint_status_and_member_list(wire: Cluster) -> None:
    urls = list(wire.endpoints().values())
    status = ctl(",".join(urls), "endpoint", "status", "-w", "json")
    assert status.count('"leader"') == 3 and "3.4.23" in status
    members = ctl(urls[0], "member", "list")
    for node, url in wire.endpoints().items():
        assert f"{node}, sediment://{node}, {url}" in members
    assert "is healthy" in ctl(urls[1], "endpoint", "health")


def test_alarm_list_hashkv_and_the_headers_ids_and_term(wire: Cluster) -> None:
    """Maintenance Alarm (none is ever raised), HashKV (members that applied the same
    entries hash the same), Hash (not served: UNIMPLEMENTED), and the ids in every
    header: one cluster id, a member id per node (MemberList's), the raft term."""
    urls = list(wire.endpoints().values())
    every = ",".join(urls)
    assert ctl(every, "alarm", "list").strip() == ""
    ctl(urls[0], "put", "/hash/k", "v")
    head = _head(urls[0])
    hashes: set[int] = set()
    for _ in range(120):  # bounded: until each follower applied head and compacted alike
        done = subprocess.run([_need_etcdctl(), f"--endpoints={every}", "endpoint", "hashkv",
                               f"--rev={head}", "-w", "json"], capture_output=True, text=True,
                              timeout=60, env={**os.environ, "ETCDCTL_API": "3"})
        if done.returncode == 0:
            answers = json.loads(done.stdout)
            hashes = {a["HashKV"]["hash"] for a in answers}
            if len(answers) == 3 and len(hashes) == 1:
                break
        wire.rt.sleep(0.5)
    assert len(hashes) == 1 and 0 not in hashes, hashes
    status = json.loads(ctl(every, "endpoint", "status", "-w", "json"))
    headers = [s["Status"]["header"] for s in status]
    members = json.loads(ctl(urls[0], "member", "list", "-w", "json"))
    assert len({h["cluster_id"] for h in headers}) == 1
    assert headers[0]["cluster_id"] == members["header"]["cluster_id"]
    assert {h["member_id"] for h in headers} == {m["ID"] for m in members["members"]}
    assert all(h["raft_term"] >= 1 and h["revision"] >= head for h in headers)
    assert {s["Status"]["leader"] for s in status} <= {m["ID"] for m in members["members"]}
    channel = grpc.insecure_channel(urls[0].removeprefix("http://"))
    with channel, pytest.raises(grpc.RpcError) as err:
        pbg.MaintenanceStub(channel).Hash(pb.HashRequest(), timeout=30)
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_one_watch_stream_as_etcd_answers_it(wire: Cluster) -> None:
    """The scripted stream of `tests/etcd_watch_script.py` on a follower (its writes
    forwarded, its watches served by the follower's node) and on a real etcd 3.4: the
    same transcript (events of a txn in op order, prev_kv, a filter, progress requests,
    a cancel, a progress notify while idle, a response over the request limit in
    fragments; revisions relative to the first write). The fixture's cluster has the
    script's progress interval; the request limit is both servers' default."""
    require_etcd()
    from etcd_watch_script import watch_transcript

    with RealEtcd(extra_args=ETCD_ARGS) as etcd:
        want = watch_transcript(etcd.endpoint, b"/script/")
    got = watch_transcript(_follower_url(wire).removeprefix("http://"), b"/script/")
    assert got == want


def _granted(out: str) -> str:
    assert "granted with TTL" in out, out
    return out.split()[1]  # "lease 694d77aa9e38260f granted with TTL(30s)"


def test_lease_grant_attach_keep_alive_time_to_live_and_revoke(wire: Cluster) -> None:
    url, follower = _leader_url(wire), _follower_url(wire)
    lease = _granted(ctl(follower, "lease", "grant", "30"))
    ctl(url, "put", "/lease/a", "1", f"--lease={lease}")
    ctl(follower, "put", "/lease/b", "2", f"--lease={lease}")
    assert lease in ctl(url, "lease", "list")
    ttl = ctl(follower, "lease", "timetolive", lease, "--keys")
    assert "granted with TTL(30s)" in ttl and "/lease/a" in ttl and "/lease/b" in ttl, ttl
    assert "keepalived with TTL(30)" in ctl(follower, "lease", "keep-alive", "--once", lease)
    before = _head(url)
    assert "revoked" in ctl(follower, "lease", "revoke", lease)
    assert ctl(url, "get", "--prefix", "/lease/").strip() == ""
    assert _head(url) == before + 1  # both keys deleted in one revision
    assert "already expired" in ctl(url, "lease", "timetolive", lease)


def test_an_expired_lease_is_revoked_by_the_leader(wire: Cluster) -> None:
    url = _leader_url(wire)
    lease = _granted(ctl(url, "lease", "grant", "1"))  # etcd's minimum TTL applies: 2 s
    ctl(url, "put", "/expire/k", "v", f"--lease={lease}")
    for _ in range(600):  # bounded: the leader checks deadlines every half second
        if ctl(url, "get", "/expire/k").strip() == "":
            break
        wire.rt.sleep(0.1)
    assert ctl(url, "get", "/expire/k").strip() == ""
    assert "already expired" in ctl(url, "lease", "timetolive", lease)


def test_a_lease_that_does_not_exist_writes_nothing(wire: Cluster) -> None:
    url = _leader_url(wire)
    before = _head(url)
    out = ctl(url, "put", "/l/k", "v", "--lease=1234", check=False)
    assert "requested lease not found" in out
    assert _head(url) == before


def test_auth_on_and_off_with_etcdctl(wire: Cluster) -> None:
    url, follower = _leader_url(wire), _follower_url(wire)
    root, alice = "--user=root:rootpw", "--user=alice:apw"
    ctl(url, "user", "add", "root:rootpw")
    ctl(url, "role", "add", "reader")
    ctl(url, "role", "grant-permission", "reader", "read", "/auth/", "--prefix=true")
    ctl(url, "user", "add", "alice:apw")
    ctl(url, "user", "grant-role", "alice", "reader")
    assert "Authentication Enabled" in ctl(url, "auth", "enable")
    try:
        assert "user name is empty" in ctl(url, "put", "/auth/k", "v", check=False)
        assert ctl(follower, root, "put", "/auth/k", "v").strip() == "OK"
        assert ctl(follower, alice, "get", "/auth/k").split() == ["/auth/k", "v"]
        head = int(ctl(url, root, "get", "/auth/k", "-w", "json")
                   .split('"revision":')[1].split(",")[0])
        assert "permission denied" in ctl(url, alice, "put", "/auth/k", "x", check=False)
        assert "permission denied" in ctl(url, alice, "get", "/other", check=False)
        assert "authentication failed" in ctl(url, "--user=alice:wrong", "get", "/auth/k",
                                              check=False)
        assert "permission denied" in ctl(url, alice, "user", "list", check=False)
        assert "alice" in ctl(url, root, "user", "list")
        after = int(ctl(url, root, "get", "/auth/k", "-w", "json")
                    .split('"revision":')[1].split(",")[0])
        assert after == head  # the denied put wrote nothing
        assert ctl(url, root, "get", "/auth/k").split() == ["/auth/k", "v"]
        # a branch writer's delete report is judged as the writes it counts
        assert "user name is empty" in str(_report(url))
        assert "invalid auth token" in str(_report(url, "nope"))
        assert "permission denied" in str(_report(url, _token(url, "alice", "apw")))
        assert _report(follower, _token(follower, "root", "rootpw")) == (
            "the cluster runs no delete sensor")  # let through: this cluster has none
    finally:
        assert "Authentication Disabled" in ctl(url, root, "auth", "disable")
    assert ctl(url, "put", "/auth/k2", "v").strip() == "OK"


def _token(url: str, name: str, password: str) -> str:
    with grpc.insecure_channel(url.removeprefix("http://")) as channel:
        return str(pbg.AuthStub(channel).Authenticate(
            pb.AuthenticateRequest(name=name, password=password), timeout=30).token)


def _report(url: str, token: str | None = None) -> str | None:
    """One delete report (`sediment branches rm` sends it) with `token`: why it was not
    counted, or None."""
    reporter = sw.DeleteReporter([url.removeprefix("http://")], timeout=30,
                                 metadata=[("token", token)] if token else ())
    reporter("demo", "dev", "0123456789abcdef0123456789abcdef", 0)
    return reporter.flush()


# ---- bad input over the wire ----------------------------------------------------------


def test_bad_requests_get_etcds_errors_and_write_nothing(wire: Cluster) -> None:
    url = _leader_url(wire)
    channel, kv = _stub(url)
    with channel:
        before = _head(url)
        big = b"x" * (1536 * 1024 + 1)  # above --max-request-bytes, within gRPC's limit
        with pytest.raises(grpc.RpcError) as err:
            kv.Put(pb.PutRequest(key=b"big", value=big), timeout=30)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details() == "etcdserver: request is too large"
        huge = b"x" * (3 * 1024 * 1024)  # above the gRPC limit: refused before decoding
        with pytest.raises(grpc.RpcError) as err:
            kv.Put(pb.PutRequest(key=b"huge", value=huge), timeout=30)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        with pytest.raises(grpc.RpcError) as err:
            kv.Put(pb.PutRequest(key=b"", value=b"v"), timeout=30)
        assert err.value.details() == "etcdserver: key is not provided"
        raw = channel.unary_unary("/etcdserverpb.KV/Put", request_serializer=None,
                                  response_deserializer=None)
        with pytest.raises(grpc.RpcError) as err:
            raw(b"\xff\xff\xff\xff garbage", timeout=30)  # not a PutRequest
        assert err.value.code() in (grpc.StatusCode.INTERNAL, grpc.StatusCode.INVALID_ARGUMENT)
        # etcd's answers for odd but valid ranges: empty, and a read at head
        backwards = kv.Range(pb.RangeRequest(key=b"b", range_end=b"a"), timeout=30)
        assert backwards.count == 0 and not backwards.kvs
        negative = kv.Range(pb.RangeRequest(key=b"x", revision=-5), timeout=30)
        assert negative.header.revision == before
        with pytest.raises(grpc.RpcError) as err:
            kv.Range(pb.RangeRequest(key=b"x", revision=before + 100), timeout=30)
        assert err.value.details() == "etcdserver: mvcc: required revision is a future revision"
        assert _head(url) == before  # nothing was written
        assert kv.Put(pb.PutRequest(key=b"after", value=b"ok"), timeout=30).header.revision \
            == before + 1  # and the server is still up


def test_thousands_of_watches_on_one_stream_and_a_client_that_never_reads(
        wire: Cluster) -> None:
    url = _leader_url(wire)
    channel = grpc.insecure_channel(url.removeprefix("http://"))
    with channel:
        watch = pbg.WatchStub(channel)
        n = 2000
        requests = [pb.WatchRequest(create_request=pb.WatchCreateRequest(
            key=f"/many/{i}".encode())) for i in range(n)]
        stream = watch.Watch(iter(requests), timeout=120)
        for created, response in enumerate(stream, start=1):
            assert response.created and not response.canceled, response
            if created == n:
                break
        stream.cancel()
        # a stream whose client never reads while its watch gets a flood of events
        _, kv = _stub(url)
        lazy = watch.Watch(iter([pb.WatchRequest(create_request=pb.WatchCreateRequest(
            key=b"/flood/", range_end=b"/flood0"))]), timeout=600)
        value = b"v" * 4096
        for i in range(MAX_QUEUED * 4):
            kv.Put(pb.PutRequest(key=f"/flood/{i % 16}".encode(), value=value), timeout=30)
        lazy.cancel()
    assert _head(url) > 0  # the server is still up and answers
    assert wire.node(wire.wait_ready()).status() is not None


# ---- the differential test over the wire ---------------------------------------------


def test_the_same_client_gets_the_same_answers_from_etcd_and_from_sediment(
        ray_cluster: Any) -> None:
    """One seed's random requests (leases among them) through one EtcdClient to a real
    etcd 3.4 and to a fresh Sediment cluster's endpoint; every field compared (header
    ids aside). More seeds by hand: `tests/test_etcd_differential.py --target wire`."""
    require_etcd()
    from test_etcd_differential import compare_seed, sediment_wire

    from sediment.actors.kv.etcd_client import EtcdClient

    with sediment_wire() as url, RealEtcd() as etcd, EtcdClient(etcd.endpoint) as real, \
            EtcdClient(url, timeout=30) as ours:
        diffs = compare_seed(real.request, ours.request, 11, 150, big=False, max_diffs=1)
    assert not diffs, "\n".join(diffs)


# ---- sediment.connect ----------------------------------------------------------------


def test_connect_puts_gets_watches_and_leases(wire: Cluster) -> None:
    from sediment import ErrCompacted, connect
    from sediment.actors.kv.types import Compare, Put

    urls = list(wire.endpoints().values())
    with connect(urls) as etcd:
        first = etcd.put("/py/a", "1").revision
        etcd.put(b"/py/b", b"2")
        assert [kv.key for kv in etcd.get_prefix("/py/").kvs] == [b"/py/a", b"/py/b"]
        assert etcd.value("/py/a") == b"1" and etcd.value("/py/none") is None
        done = etcd.txn([Compare(b"/py/a", "value", "=", b"1")], [Put(b"/py/a", b"3")])
        assert done.succeeded
        with etcd.watch("/py/", prefix=True, start_revision=first) as watch:
            got = [(e.kind, e.kv.key, e.kv.value) for e in watch.events(3)]
            assert got == [("put", b"/py/a", b"1"), ("put", b"/py/b", b"2"),
                           ("put", b"/py/a", b"3")]
            etcd.delete("/py/b")
            assert [(e.kind, e.kv.key) for e in watch.events(1)] == [("delete", b"/py/b")]
        lease = etcd.lease_grant(30)
        etcd.put("/py/leased", "x", lease=lease)
        assert etcd.lease_keep_alive_once(lease) == 30
        assert etcd.lease_time_to_live(lease, keys=True).keys == (b"/py/leased",)
        etcd.lease_revoke(lease)
        assert etcd.value("/py/leased") is None
        etcd.compact(etcd.get("/py/a").revision)
        with pytest.raises(ErrCompacted), etcd.watch("/py/", prefix=True,
                                                     start_revision=first) as old:
            old.events(1)
        assert len(etcd.members()) == 3


# ---- TLS -------------------------------------------------------------------------------


def test_tls_with_client_certificates(ray_cluster: Any, tmp_path: Any) -> None:
    from tls_helpers import make_certs

    from sediment import connect
    from sediment.actors.etcd.shell.server import TlsFiles
    from sediment.runtime import api

    certs = make_certs(tmp_path)
    rt = api.start("ray", nodes=("n1", "n2", "n3"), reap_delay=1.0, warm_pool=0)
    try:
        cluster = Cluster.start(runtime=rt, data_dir=str(tmp_path / "kv"),
                                compaction_interval=3600.0, etcd=EtcdWire(
                                    tls=TlsFiles(certs["server"], certs["server_key"],
                                                 client_ca=certs["ca"])))
        urls = list(cluster.endpoints().values())
        assert all(u.startswith("https://127.0.0.1:") for u in urls)
        auth = [f"--cacert={certs['ca']}", f"--cert={certs['client']}",
                f"--key={certs['client_key']}"]
        assert ctl(urls[1], *auth, "put", "/tls/k", "v").strip() == "OK"
        assert ctl(urls[0], *auth, "get", "/tls/k").split() == ["/tls/k", "v"]
        no_cert = ctl(urls[0], f"--cacert={certs['ca']}", "--dial-timeout=3s",
                      "--command-timeout=5s", "get", "/tls/k", check=False)
        assert "/tls/k" not in no_cert  # the handshake needs a client certificate
        plain = ctl(urls[0].replace("https", "http"), "--dial-timeout=3s",
                    "--command-timeout=5s", "get", "/tls/k", check=False)
        assert "/tls/k" not in plain
        with connect(urls, ca_cert=certs["ca"], cert=certs["client"],
                     key=certs["client_key"]) as etcd:
            assert etcd.value("/tls/k") == b"v"
    finally:
        rt.shutdown()
