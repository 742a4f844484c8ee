"""etcd v3 protobuf (etcdserverpb, compiled stubs in `sediment.actors.etcd.pb`) <-> the KV's types.

Both directions for requests and results, so one mapping serves the client that talks to
an etcd endpoint (`etcd_client.py`: a real etcd, or Sediment's own gRPC server later) and
that server. What the types cannot say is refused with a typed error rather than
guessed: an empty RequestOp is etcd's ErrKeyNotFound (what etcd answers), an unknown
enum number an InvalidRequest. A compare whose union is not its target's compares
against 0 (etcd's compareKV reads the union of the target's type, absent: 0).
Header ids (cluster, member, raft term) are the server's business: results carry only
the revision.
"""

from __future__ import annotations

from typing import Any

from sediment.actors.etcd.pb import kv_pb2, rpc_pb2
from sediment.actors.kv.errors import ErrKeyNotFound, InvalidRequest
from sediment.actors.kv.types import (
    Compact,
    CompactResult,
    Compare,
    DeleteRange,
    DeleteResult,
    Event,
    KeyValue,
    Put,
    PutResult,
    Range,
    RangeResult,
    Txn,
    TxnOp,
    TxnResponse,
    TxnResult,
)

pb = rpc_pb2

SORT_ORDERS = ("none", "ascend", "descend")  # RangeRequest.SortOrder numbers
SORT_TARGETS = ("key", "version", "create", "mod", "value")  # RangeRequest.SortTarget
COMPARE_OPS = ("=", ">", "<", "!=")  # Compare.CompareResult numbers
COMPARE_TARGETS = ("version", "create_revision", "mod_revision", "value", "lease")
_UNION = {"version": "version", "create_revision": "create_revision",
          "mod_revision": "mod_revision", "value": "value", "lease": "lease"}

Request = Put | DeleteRange | Range | Txn | Compact
Result = PutResult | DeleteResult | RangeResult | TxnResult | CompactResult


# ---- requests: types -> protobuf -------------------------------------------------------


def _end(range_end: bytes | None) -> bytes:
    return b"" if range_end is None else range_end


def range_pb(r: Range) -> Any:
    return pb.RangeRequest(
        key=r.key, range_end=_end(r.range_end), limit=r.limit, revision=r.revision,
        sort_order=SORT_ORDERS.index(r.sort_order), sort_target=SORT_TARGETS.index(r.sort_target),
        serializable=r.serializable, keys_only=r.keys_only, count_only=r.count_only,
        min_mod_revision=r.min_mod_revision, max_mod_revision=r.max_mod_revision,
        min_create_revision=r.min_create_revision, max_create_revision=r.max_create_revision)


def put_pb(p: Put) -> Any:
    return pb.PutRequest(key=p.key, value=p.value, prev_kv=p.prev_kv, lease=p.lease,
                         ignore_value=p.ignore_value, ignore_lease=p.ignore_lease)


def delete_pb(d: DeleteRange) -> Any:
    return pb.DeleteRangeRequest(key=d.key, range_end=_end(d.range_end), prev_kv=d.prev_kv)


def compare_pb(c: Compare) -> Any:
    out = pb.Compare(result=COMPARE_OPS.index(c.op), target=COMPARE_TARGETS.index(c.target),
                     key=c.key, range_end=_end(c.range_end))
    setattr(out, _UNION[c.target], c.value)
    return out


def op_pb(op: TxnOp) -> Any:
    if isinstance(op, Range):
        return pb.RequestOp(request_range=range_pb(op))
    if isinstance(op, Put):
        return pb.RequestOp(request_put=put_pb(op))
    if isinstance(op, DeleteRange):
        return pb.RequestOp(request_delete_range=delete_pb(op))
    return pb.RequestOp(request_txn=txn_pb(op))


def txn_pb(t: Txn) -> Any:
    return pb.TxnRequest(compare=[compare_pb(c) for c in t.compare],
                         success=[op_pb(o) for o in t.success],
                         failure=[op_pb(o) for o in t.failure])


def compact_pb(c: Compact) -> Any:
    return pb.CompactionRequest(revision=c.revision, physical=c.physical)


def request_pb(r: Request) -> tuple[str, Any]:
    """(the KV service's method name, its request message)."""
    if isinstance(r, Range):
        return "Range", range_pb(r)
    if isinstance(r, Put):
        return "Put", put_pb(r)
    if isinstance(r, DeleteRange):
        return "DeleteRange", delete_pb(r)
    if isinstance(r, Txn):
        return "Txn", txn_pb(r)
    return "Compact", compact_pb(r)


# ---- requests: protobuf -> types -------------------------------------------------------


def _enum(names: tuple[str, ...], number: int, what: str) -> Any:
    if not 0 <= number < len(names):
        raise InvalidRequest(f"unknown {what} {number}")
    return names[number]


def _range_end(raw: bytes) -> bytes | None:
    return raw or None


def range_from_pb(m: Any) -> Range:
    return Range(m.key, _range_end(m.range_end), m.revision, m.limit, m.count_only,
                 m.keys_only, _enum(SORT_ORDERS, m.sort_order, "sort_order"),
                 _enum(SORT_TARGETS, m.sort_target, "sort_target"), m.min_mod_revision,
                 m.max_mod_revision, m.min_create_revision, m.max_create_revision,
                 m.serializable)


def put_from_pb(m: Any) -> Put:
    return Put(m.key, m.value, m.prev_kv, m.lease, m.ignore_value, m.ignore_lease)


def delete_from_pb(m: Any) -> DeleteRange:
    return DeleteRange(m.key, _range_end(m.range_end), m.prev_kv)


def compare_from_pb(m: Any) -> Compare:
    target = _enum(COMPARE_TARGETS, m.target, "compare target")
    op = _enum(COMPARE_OPS, m.result, "compare result")
    union = m.WhichOneof("target_union")
    absent: bytes | int = b"" if target == "value" else 0
    value: bytes | int = getattr(m, union) if union == _UNION[target] else absent
    return Compare(m.key, target, op, value, _range_end(m.range_end))


def op_from_pb(m: Any) -> TxnOp:
    which = m.WhichOneof("request")
    if which == "request_range":
        return range_from_pb(m.request_range)
    if which == "request_put":
        return put_from_pb(m.request_put)
    if which == "request_delete_range":
        return delete_from_pb(m.request_delete_range)
    if which == "request_txn":
        return txn_from_pb(m.request_txn)
    raise ErrKeyNotFound()  # etcd: "empty op / nil entry"


def txn_from_pb(m: Any) -> Txn:
    return Txn(tuple(compare_from_pb(c) for c in m.compare),
               tuple(op_from_pb(o) for o in m.success), tuple(op_from_pb(o) for o in m.failure))


def compact_from_pb(m: Any) -> Compact:
    return Compact(m.revision, m.physical)


# ---- results ---------------------------------------------------------------------------


def kv_from_pb(m: Any) -> KeyValue:
    return KeyValue(m.key, m.value, m.create_revision, m.mod_revision, m.version, m.lease)


def event_from_pb(m: Any) -> Event:
    """A watch event as etcd sends it (mvccpb.Event: type 0 is PUT, 1 DELETE)."""
    return Event("put" if m.type == 0 else "delete", kv_from_pb(m.kv),
                 kv_from_pb(m.prev_kv) if m.HasField("prev_kv") else None)


def kv_pb(kv: KeyValue) -> Any:
    return kv_pb2.KeyValue(key=kv.key, value=kv.value, create_revision=kv.create_revision,
                           mod_revision=kv.mod_revision, version=kv.version, lease=kv.lease)


def _header(revision: int) -> Any:
    return pb.ResponseHeader(revision=revision)


def result_from_pb(m: Any) -> Result:
    """A KV response message as the KV's result type."""
    name = type(m).__name__
    rev = m.header.revision
    if name == "RangeResponse":
        return RangeResult([kv_from_pb(k) for k in m.kvs], m.count, m.more, rev)
    if name == "PutResponse":
        return PutResult(rev, kv_from_pb(m.prev_kv) if m.HasField("prev_kv") else None)
    if name == "DeleteRangeResponse":
        return DeleteResult(rev, m.deleted, [kv_from_pb(k) for k in m.prev_kvs])
    if name == "TxnResponse":
        return TxnResult(m.succeeded, [_response_op_from_pb(r) for r in m.responses], rev)
    if name == "CompactionResponse":
        return CompactResult(rev)
    raise TypeError(f"not a KV response: {name}")


def _response_op_from_pb(m: Any) -> TxnResponse:
    which = m.WhichOneof("response")
    result = result_from_pb(getattr(m, which))
    assert not isinstance(result, CompactResult)
    return result


def result_pb(r: Result) -> Any:
    """A result as its KV response message (the header's ids left for the server)."""
    if isinstance(r, RangeResult):
        return pb.RangeResponse(header=_header(r.revision), kvs=[kv_pb(k) for k in r.kvs],
                                more=r.more, count=r.count)
    if isinstance(r, PutResult):
        out = pb.PutResponse(header=_header(r.revision))
        if r.prev_kv is not None:
            out.prev_kv.CopyFrom(kv_pb(r.prev_kv))
        return out
    if isinstance(r, DeleteResult):
        return pb.DeleteRangeResponse(header=_header(r.revision), deleted=r.deleted,
                                      prev_kvs=[kv_pb(k) for k in r.prev_kvs])
    if isinstance(r, TxnResult):
        return pb.TxnResponse(header=_header(r.revision), succeeded=r.succeeded,
                              responses=[_response_op_pb(x) for x in r.responses])
    return pb.CompactionResponse(header=_header(r.revision))


def _response_op_pb(r: TxnResponse) -> Any:
    field = {RangeResult: "response_range", PutResult: "response_put",
             DeleteResult: "response_delete_range", TxnResult: "response_txn"}[type(r)]
    return pb.ResponseOp(**{field: result_pb(r)})


__all__ = [
    "COMPARE_OPS", "COMPARE_TARGETS", "SORT_ORDERS", "SORT_TARGETS", "compact_from_pb",
    "compare_from_pb", "kv_from_pb", "kv_pb", "op_from_pb", "request_pb", "result_from_pb",
    "result_pb", "txn_from_pb",
]
