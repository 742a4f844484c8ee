"""etcd's gRPC codes, checked against a real etcd 3.4 (no Ray): each bad request below
is sent to etcd as raw gRPC, and the (code, description) etcd answers must be what
`actors/kv/rpctypes.py`'s table gives for that description, which is what Sediment's
server answers for the same error (`actors/etcd/status.py::status_of`). The differential
test compares the descriptions of the KV's errors; this pins the codes too, and the
auth errors, which it does not send."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from etcd_helpers import RealEtcd, require_etcd

from sediment.actors.etcd import status as st
from sediment.actors.etcd.pb import rpc_pb2 as _rpc_pb2
from sediment.actors.etcd.pb import rpc_pb2_grpc as _rpc_pb2_grpc
from sediment.actors.kv import rpctypes

pb: Any = _rpc_pb2
pbg: Any = _rpc_pb2_grpc


def _refusal(call: Callable[[], Any]) -> tuple[str, str]:
    with pytest.raises(grpc.RpcError) as err:
        call()
    return err.value.code().name, err.value.details()


@pytest.fixture(scope="module")
def stubs() -> Iterator[dict[str, Any]]:
    require_etcd()
    with RealEtcd() as etcd, grpc.insecure_channel(etcd.endpoint) as channel:
        yield {"kv": pbg.KVStub(channel), "lease": pbg.LeaseStub(channel),
               "auth": pbg.AuthStub(channel), "channel": channel}


def _put(key: bytes) -> Any:
    return pb.RequestOp(request_put=pb.PutRequest(key=key, value=b"v"))


def _kv_refusals(s: dict[str, Any]) -> dict[str, tuple[str, str]]:
    kv, lease = s["kv"], s["lease"]
    kv.Put(pb.PutRequest(key=b"k", value=b"1"), timeout=30)
    head = kv.Put(pb.PutRequest(key=b"k", value=b"2"), timeout=30).header.revision
    kv.Compact(pb.CompactionRequest(revision=head), timeout=30)
    lease.LeaseGrant(pb.LeaseGrantRequest(ID=7, TTL=30), timeout=30)
    return {
        "ErrEmptyKey": _refusal(lambda: kv.Put(pb.PutRequest(key=b"", value=b"v"),
                                               timeout=30)),
        "ErrFutureRev": _refusal(lambda: kv.Range(pb.RangeRequest(key=b"k",
                                                                  revision=head + 5),
                                                  timeout=30)),
        "ErrCompacted": _refusal(lambda: kv.Range(pb.RangeRequest(key=b"k", revision=1),
                                                  timeout=30)),
        "ErrTooManyOps": _refusal(lambda: kv.Txn(pb.TxnRequest(
            success=[_put(f"t{i}".encode()) for i in range(129)]), timeout=30)),
        "ErrDuplicateKey": _refusal(lambda: kv.Txn(pb.TxnRequest(
            success=[_put(b"d"), _put(b"d")]), timeout=30)),
        "ErrRequestTooLarge": _refusal(lambda: kv.Put(pb.PutRequest(
            key=b"big", value=b"x" * (1536 * 1024 + 1)), timeout=30)),
        "ErrLeaseNotFound": _refusal(lambda: kv.Put(pb.PutRequest(key=b"l", value=b"v",
                                                                  lease=99), timeout=30)),
        "ErrLeaseExist": _refusal(lambda: lease.LeaseGrant(pb.LeaseGrantRequest(ID=7, TTL=30),
                                                           timeout=30)),
        "ErrKeyNotFound": _refusal(lambda: kv.Put(pb.PutRequest(key=b"none",
                                                                ignore_value=True),
                                                  timeout=30)),
        "ErrAuthNotEnabled": _refusal(lambda: s["auth"].Authenticate(
            pb.AuthenticateRequest(name="root", password="pw"), timeout=30)),
    }


def _auth_refusals(s: dict[str, Any]) -> dict[str, tuple[str, str]]:
    auth, kv = s["auth"], s["kv"]
    out = {"ErrRootUserNotExist": _refusal(lambda: auth.AuthEnable(pb.AuthEnableRequest(),
                                                                   timeout=30))}
    auth.UserAdd(pb.AuthUserAddRequest(name="root", password="pw"), timeout=30)
    auth.RoleAdd(pb.AuthRoleAddRequest(name="root"), timeout=30)
    auth.UserGrantRole(pb.AuthUserGrantRoleRequest(user="root", role="root"), timeout=30)
    auth.UserAdd(pb.AuthUserAddRequest(name="alice", password="apw"), timeout=30)
    auth.AuthEnable(pb.AuthEnableRequest(), timeout=30)
    try:
        out["ErrUserEmpty"] = _refusal(lambda: kv.Put(pb.PutRequest(key=b"a", value=b"v"),
                                                      timeout=30))
        out["ErrAuthFailed"] = _refusal(lambda: auth.Authenticate(
            pb.AuthenticateRequest(name="alice", password="wrong"), timeout=30))
        token = auth.Authenticate(pb.AuthenticateRequest(name="alice", password="apw"),
                                  timeout=30).token
        out["ErrPermissionDenied"] = _refusal(lambda: kv.Put(
            pb.PutRequest(key=b"a", value=b"v"), timeout=30, metadata=[("token", token)]))
        out["ErrInvalidAuthToken"] = _refusal(lambda: kv.Put(
            pb.PutRequest(key=b"a", value=b"v"), timeout=30, metadata=[("token", "bogus")]))
    finally:
        root = auth.Authenticate(pb.AuthenticateRequest(name="root", password="pw"),
                                 timeout=30).token
        auth.AuthDisable(pb.AuthDisableRequest(), timeout=30, metadata=[("token", root)])
    return out


def test_etcds_codes_and_descriptions_are_the_tables_and_the_servers(
        stubs: dict[str, Any]) -> None:
    seen = {**_kv_refusals(stubs), **_auth_refusals(stubs)}
    for name, (code, details) in seen.items():
        assert rpctypes.name_of(details) == name, (name, details)
        assert rpctypes.code(name) == code, (name, code)
        assert st.status_of(st.EtcdStatus(name)) == (code, details)
