"""etcd's auth model as replicated state (users, roles, key-range permissions, the auth
switch), pure: `change` and `permitted` decide, the machine persists the result.

Users hold roles; roles hold permissions (READ, WRITE or READWRITE on [key, range_end):
an empty range_end is the key alone, "\\0" every key from it). The `root` role may do
everything, and managing auth needs it once auth is on. Every change moves the auth
revision; a request checked against an older revision is ErrAuthOldRevision at apply
(etcd's AuthInfo revision), so a permission revoked meanwhile is never used.
Passwords arrive hashed (the server hashes with a salt before it proposes: the apply is
the same on every member). Simple tokens are the machine's memory, not this state.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass, field, replace
from typing import Any

from sediment.actors.kv.errors import KvError
from sediment.actors.kv.rpctypes import code, message

ROOT = "root"
READ, WRITE, READWRITE = 0, 1, 2  # authpb.Permission.Type
HASH_ITERATIONS = 20_000


class AuthError(KvError):
    """An etcd auth error by its rpctypes name (ErrPermissionDenied, ErrUserNotFound...)."""

    def __init__(self, name: str) -> None:
        super().__init__(message(name))
        self.name = name
        self.code = code(name)


@dataclass(frozen=True)
class AuthState:
    enabled: bool = False
    revision: int = 1
    users: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> password, roles
    roles: dict[str, list[list[Any]]] = field(default_factory=dict)  # name -> [type, key, end]

    def to_json(self) -> str:
        return json.dumps({"enabled": self.enabled, "revision": self.revision,
                           "users": self.users, "roles": self.roles}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> AuthState:
        if not text:
            return cls()
        doc = json.loads(text)
        return cls(bool(doc["enabled"]), int(doc["revision"]), doc["users"], doc["roles"])


@dataclass(frozen=True)
class AuthChange:
    """One auth management request as a raft command: `op` names it (etcd's RPC), `args`
    its fields (a password only as its salted hash)."""

    op: str
    args: tuple[Any, ...] = ()


@dataclass(frozen=True)
class Wire:
    """A client request that came in over the etcd API with the user its token named
    (None: no token) and the auth revision the server saw; the machine checks it."""

    user: str | None
    revision: int
    request: Any


def hash_password(password: str, salt: str | None = None) -> str:
    salt = salt or secrets.token_hex(8)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), bytes.fromhex(salt),
                                 HASH_ITERATIONS).hex()
    return f"pbkdf2-sha256${HASH_ITERATIONS}${salt}${digest}"


def password_ok(stored: str, password: str) -> bool:
    try:
        _, iterations, salt, digest = stored.split("$")
    except ValueError:
        return False
    got = hashlib.pbkdf2_hmac("sha256", password.encode(), bytes.fromhex(salt),
                              int(iterations)).hex()
    return hmac.compare_digest(got, digest)


def _bump(state: AuthState, **changes: Any) -> AuthState:
    return replace(state, revision=state.revision + 1, **changes)


def change(state: AuthState, op: str, args: tuple[Any, ...]) -> tuple[AuthState, Any]:
    """Apply one management request: (the new state, its answer). Raises AuthError and
    changes nothing for a request etcd refuses."""
    users, roles = state.users, state.roles
    if op == "enable":
        if state.enabled:
            return state, None
        if ROOT not in users:
            raise AuthError("ErrRootUserNotExist")
        if ROOT not in users[ROOT]["roles"]:
            raise AuthError("ErrRootRoleNotExist")
        return _bump(state, enabled=True), None
    if op == "disable":
        return (_bump(state, enabled=False), None) if state.enabled else (state, None)
    if op == "user_add":
        name, hashed = args
        if not name:
            raise AuthError("ErrUserEmpty")
        if name in users:
            raise AuthError("ErrUserAlreadyExist")
        return _bump(state, users={**users, name: {"password": hashed, "roles": []}}), None
    if op == "user_delete":
        (name,) = args
        _user(state, name)
        if state.enabled and name == ROOT:
            raise AuthError("ErrInvalidAuthMgmt")
        return _bump(state, users={k: v for k, v in users.items() if k != name}), None
    if op == "user_change_password":
        name, hashed = args
        user = _user(state, name)
        return _bump(state, users={**users, name: {**user, "password": hashed}}), None
    if op == "user_grant_role":
        name, role = args
        user = _user(state, name)
        if role != ROOT and role not in roles:
            raise AuthError("ErrRoleNotFound")
        granted = sorted({*user["roles"], role})
        return _bump(state, users={**users, name: {**user, "roles": granted}}), None
    if op == "user_revoke_role":
        name, role = args
        user = _user(state, name)
        if role not in user["roles"]:
            raise AuthError("ErrRoleNotGranted")
        if state.enabled and name == ROOT and role == ROOT:
            raise AuthError("ErrInvalidAuthMgmt")
        kept = [r for r in user["roles"] if r != role]
        return _bump(state, users={**users, name: {**user, "roles": kept}}), None
    if op == "role_add":
        (name,) = args
        if not name:
            raise AuthError("ErrRoleEmpty")
        if name in roles:
            raise AuthError("ErrRoleAlreadyExist")
        return _bump(state, roles={**roles, name: []}), None
    if op == "role_delete":
        (name,) = args
        if name not in roles:
            raise AuthError("ErrRoleNotFound")
        if state.enabled and name == ROOT:
            raise AuthError("ErrInvalidAuthMgmt")
        kept_users = {u: {**v, "roles": [r for r in v["roles"] if r != name]}
                      for u, v in users.items()}
        return _bump(state, roles={k: v for k, v in roles.items() if k != name},
                     users=kept_users), None
    if op == "role_grant_permission":
        name, kind, key, end = args
        if name not in roles:
            raise AuthError("ErrRoleNotFound")
        perms = [p for p in roles[name] if (p[1], p[2]) != (key, end)] + [[kind, key, end]]
        return _bump(state, roles={**roles, name: sorted(perms, key=lambda p: (p[1], p[2]))}), None
    if op == "role_revoke_permission":
        name, key, end = args
        if name not in roles:
            raise AuthError("ErrRoleNotFound")
        kept_perms = [p for p in roles[name] if (p[1], p[2]) != (key, end)]
        if len(kept_perms) == len(roles[name]):
            raise AuthError("ErrPermissionNotGranted")
        return _bump(state, roles={**roles, name: kept_perms}), None
    raise AuthError("ErrInvalidAuthMgmt")


def _user(state: AuthState, name: str) -> dict[str, Any]:
    if not name:
        raise AuthError("ErrUserEmpty")
    user = state.users.get(name)
    if user is None:
        raise AuthError("ErrUserNotFound")
    return user


def is_admin(state: AuthState, user: str | None) -> bool:
    return user is not None and ROOT in state.users.get(user, {}).get("roles", [])


def _covers(perm_key: bytes, perm_end: bytes, key: bytes, end: bytes | None) -> bool:
    """Whether the permission's range holds the whole request range."""
    if not perm_end:  # one key
        return end is None and key == perm_key
    if key < perm_key:
        return False
    if perm_end == b"\0":
        return True
    if end is None:
        return key < perm_end
    return end != b"\0" and end <= perm_end and key < end


def permitted(state: AuthState, user: str | None, key: bytes, end: bytes | None,
              write: bool) -> bool:
    """Whether `user` may read (or write) every key of [key, end): one permission of one
    of its roles must hold the whole range (etcd merges a role's ranges first; a
    request spanning two adjacent grants is refused here)."""
    if user is None or user not in state.users:
        return False
    if is_admin(state, user):
        return True
    wanted = WRITE if write else READ
    for role in state.users[user]["roles"]:
        for kind, k, e in state.roles.get(role, []):
            if kind in (wanted, READWRITE) and _covers(bytes.fromhex(k), bytes.fromhex(e),
                                                        key, end):
                return True
    return False


__all__ = ["READ", "READWRITE", "ROOT", "WRITE", "AuthChange", "AuthError", "AuthState", "Wire",
           "change", "hash_password", "is_admin", "password_ok", "permitted"]
