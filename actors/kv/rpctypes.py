"""etcd 3.4's server errors as a client sees them: gRPC code and description, by name.

One table for the whole KV: the store's typed errors (`errors.py`) take their messages
from it, and the gRPC server (a later part of issue 16) takes the code. Clients match
errors by the exact description (the Go client's `rpctypes.Error` looks the string up),
so these strings are etcd's, byte for byte (etcd 3.4 `api/v3rpc/rpctypes/error.go`;
checked against a real etcd 3.4.23 in `tests/test_etcd_differential.py`). Pure: no grpc
import; a code is the name of a `grpc.StatusCode` member. The two MVCC descriptions are
`actors/mvcc_errors.py`'s (the block tier raises those errors too).
"""

from __future__ import annotations

from dataclasses import dataclass

from sediment.actors.mvcc_errors import COMPACTED, FUTURE_REV


@dataclass(frozen=True, slots=True)
class RpcError:
    """One etcd server error: gRPC status code name and description."""

    code: str
    message: str


_TABLE: dict[str, tuple[str, str]] = {
    # the KV
    "ErrEmptyKey": ("INVALID_ARGUMENT", "etcdserver: key is not provided"),
    "ErrKeyNotFound": ("INVALID_ARGUMENT", "etcdserver: key not found"),
    "ErrValueProvided": ("INVALID_ARGUMENT", "etcdserver: value is provided"),
    "ErrLeaseProvided": ("INVALID_ARGUMENT", "etcdserver: lease is provided"),
    "ErrTooManyOps": ("INVALID_ARGUMENT", "etcdserver: too many operations in txn request"),
    "ErrDuplicateKey": ("INVALID_ARGUMENT", "etcdserver: duplicate key given in txn request"),
    "ErrCompacted": ("OUT_OF_RANGE", COMPACTED),
    "ErrFutureRev": ("OUT_OF_RANGE", FUTURE_REV),
    "ErrNoSpace": ("RESOURCE_EXHAUSTED", "etcdserver: mvcc: database space exceeded"),
    "ErrRequestTooLarge": ("INVALID_ARGUMENT", "etcdserver: request is too large"),
    "ErrTooManyRequests": ("RESOURCE_EXHAUSTED", "etcdserver: too many requests"),
    # leases
    "ErrLeaseNotFound": ("NOT_FOUND", "etcdserver: requested lease not found"),
    "ErrLeaseExist": ("FAILED_PRECONDITION", "etcdserver: lease already exists"),
    "ErrLeaseTTLTooLarge": ("OUT_OF_RANGE", "etcdserver: too large lease TTL"),
    # watches
    "ErrWatchCanceled": ("CANCELLED", "etcdserver: watch canceled"),
    # membership
    "ErrMemberExist": ("FAILED_PRECONDITION", "etcdserver: member ID already exist"),
    "ErrPeerURLExist": ("FAILED_PRECONDITION", "etcdserver: Peer URLs already exists"),
    "ErrMemberNotEnoughStarted": (
        "FAILED_PRECONDITION",
        "etcdserver: re-configuration failed due to not enough started members"),
    "ErrMemberBadURLs": ("INVALID_ARGUMENT", "etcdserver: given member URLs are invalid"),
    "ErrMemberNotFound": ("NOT_FOUND", "etcdserver: member not found"),
    "ErrMemberNotLearner": ("FAILED_PRECONDITION",
                            "etcdserver: can only promote a learner member"),
    "ErrLearnerNotReady": (
        "FAILED_PRECONDITION",
        "etcdserver: can only promote a learner member which is in sync with leader"),
    "ErrTooManyLearners": ("FAILED_PRECONDITION",
                           "etcdserver: too many learner members in cluster"),
    # auth
    "ErrRootUserNotExist": ("FAILED_PRECONDITION", "etcdserver: root user does not exist"),
    "ErrRootRoleNotExist": ("FAILED_PRECONDITION",
                            "etcdserver: root user does not have root role"),
    "ErrUserAlreadyExist": ("FAILED_PRECONDITION", "etcdserver: user name already exists"),
    "ErrUserEmpty": ("INVALID_ARGUMENT", "etcdserver: user name is empty"),
    "ErrUserNotFound": ("FAILED_PRECONDITION", "etcdserver: user name not found"),
    "ErrRoleAlreadyExist": ("FAILED_PRECONDITION", "etcdserver: role name already exists"),
    "ErrRoleNotFound": ("FAILED_PRECONDITION", "etcdserver: role name not found"),
    "ErrRoleEmpty": ("INVALID_ARGUMENT", "etcdserver: role name is empty"),
    "ErrAuthFailed": ("INVALID_ARGUMENT",
                      "etcdserver: authentication failed, invalid user ID or password"),
    "ErrPermissionDenied": ("PERMISSION_DENIED", "etcdserver: permission denied"),
    "ErrRoleNotGranted": ("FAILED_PRECONDITION", "etcdserver: role is not granted to the user"),
    "ErrPermissionNotGranted": ("FAILED_PRECONDITION",
                                "etcdserver: permission is not granted to the role"),
    "ErrAuthNotEnabled": ("FAILED_PRECONDITION", "etcdserver: authentication is not enabled"),
    "ErrInvalidAuthToken": ("UNAUTHENTICATED", "etcdserver: invalid auth token"),
    "ErrInvalidAuthMgmt": ("INVALID_ARGUMENT", "etcdserver: invalid auth management"),
    "ErrAuthOldRevision": ("INVALID_ARGUMENT", "etcdserver: revision of auth store is old"),
    # the server and its raft
    "ErrNoLeader": ("UNAVAILABLE", "etcdserver: no leader"),
    "ErrNotLeader": ("FAILED_PRECONDITION", "etcdserver: not leader"),
    "ErrLeaderChanged": ("UNAVAILABLE", "etcdserver: leader changed"),
    "ErrNotCapable": ("UNAVAILABLE", "etcdserver: not capable"),
    "ErrStopped": ("UNAVAILABLE", "etcdserver: server stopped"),
    "ErrTimeout": ("UNAVAILABLE", "etcdserver: request timed out"),
    "ErrTimeoutDueToLeaderFail": (
        "UNAVAILABLE", "etcdserver: request timed out, possibly due to previous leader failure"),
    "ErrTimeoutDueToConnectionLost": (
        "UNAVAILABLE", "etcdserver: request timed out, possibly due to connection lost"),
    "ErrTimeoutWaitAppliedIndex": (
        "UNAVAILABLE",
        "etcdserver: request timed out, waiting for the applied index took too long"),
    "ErrUnhealthy": ("UNAVAILABLE", "etcdserver: unhealthy cluster"),
    "ErrCorrupt": ("DATA_LOSS", "etcdserver: corrupt cluster"),
    "ErrNotSupportedForLearner": ("UNAVAILABLE", "etcdserver: rpc not supported for learner"),
    "ErrBadLeaderTransferee": ("FAILED_PRECONDITION", "etcdserver: bad leader transferee"),
}

ERRORS: dict[str, RpcError] = {name: RpcError(code, msg) for name, (code, msg) in _TABLE.items()}
BY_MESSAGE: dict[str, str] = {e.message: name for name, e in ERRORS.items()}


def message(name: str) -> str:
    """etcd's description of the error `name` (KeyError for a name etcd has not)."""
    return ERRORS[name].message


def code(name: str) -> str:
    return ERRORS[name].code


def name_of(description: str) -> str | None:
    """The error name for an exact etcd description (what a client maps), or None."""
    return BY_MESSAGE.get(description)


__all__ = ["BY_MESSAGE", "ERRORS", "RpcError", "code", "message", "name_of"]
