"""The auth part of the KV machine: where `auth_store`'s decisions meet the store.

`AuthKeeper` holds the replicated auth state (persisted as one JSON row of the store's
SQLite `auth` table, declared in `actors/schemas/kv_file.py`, committed with `applied`),
the simple tokens (memory only, as etcd's: a restarted member forgets them and their
clients authenticate again), and checks a `Wire` request against both before the machine
executes it: with auth off every request runs; with auth on a request without a user is
ErrUserEmpty, one checked against an older auth revision ErrAuthOldRevision, one the
user's roles do not cover ErrPermissionDenied, and nothing changes.
"""

from __future__ import annotations

from typing import Any

from sediment.actors.kv import auth_store as au
from sediment.actors.kv.queries import WriteCheck
from sediment.actors.kv.store import Store
from sediment.actors.kv.types import (
    Compact,
    DeleteRange,
    LeaseCheckpoint,
    LeaseGrant,
    LeaseRevoke,
    Put,
    Range,
    Txn,
)

MAX_TOKENS = 100_000  # simple tokens kept; the oldest are dropped beyond it


class AuthKeeper:
    def __init__(self, store: Store) -> None:
        self.store = store
        row = store._db.execute("SELECT doc FROM auth WHERE id = 1").fetchone()
        self.state = au.AuthState.from_json(row[0] if row else None)
        self.tokens: dict[str, str] = {}

    # -- changes ---------------------------------------------------------------------

    def change(self, cmd: au.AuthChange, applied: int | None) -> Any:
        if cmd.op == "token":  # an authenticated user's simple token (memory only)
            token, user = cmd.args
            if not self.state.enabled:
                raise au.AuthError("ErrAuthNotEnabled")
            if user not in self.state.users:
                raise au.AuthError("ErrAuthFailed")
            if len(self.tokens) >= MAX_TOKENS:
                self.tokens.pop(next(iter(self.tokens)))
            self.tokens[token] = user
            return token
        state, answer = au.change(self.state, cmd.op, tuple(cmd.args))
        if state is not self.state:
            self.save(state, applied)
        return answer

    def save(self, state: au.AuthState, applied: int | None) -> None:
        with self.store.transaction():
            self.store._db.execute(
                "INSERT INTO auth (id, doc) VALUES (1, ?) ON CONFLICT(id) DO UPDATE "
                "SET doc = excluded.doc", (state.to_json(),))
            if applied is not None:
                self.store._set_meta("applied", applied)
        if not state.enabled or state.revision != self.state.revision:
            # etcd drops every simple token when auth turns off; a deleted user's and a
            # changed password's tokens go too
            self.tokens = {t: u for t, u in self.tokens.items()
                           if state.enabled and u in state.users
                           and state.users[u]["password"] == self.state.users.get(u, {})
                           .get("password")}
        self.state = state

    # -- checks ------------------------------------------------------------------------

    def check(self, wire: au.Wire) -> None:
        """Raise the etcd error that refuses `wire`, if any (auth off: none)."""
        s = self.state
        if not s.enabled:
            return
        if wire.user is None:
            raise au.AuthError("ErrUserEmpty")
        if wire.revision < s.revision:
            raise au.AuthError("ErrAuthOldRevision")
        if not self._allowed(wire.user, wire.request):
            raise au.AuthError("ErrPermissionDenied")

    def _allowed(self, user: str, r: Any) -> bool:
        s = self.state
        if isinstance(r, Range):
            return au.permitted(s, user, r.key, r.range_end, write=False)
        if isinstance(r, Put):
            return au.permitted(s, user, r.key, None, write=True) and (
                not r.prev_kv or au.permitted(s, user, r.key, None, write=False))
        if isinstance(r, DeleteRange):
            return au.permitted(s, user, r.key, r.range_end, write=True) and (
                not r.prev_kv or au.permitted(s, user, r.key, r.range_end, write=False))
        if isinstance(r, WriteCheck):
            return au.permitted(s, user, r.key, r.range_end, write=True)
        if isinstance(r, Txn):
            return (all(au.permitted(s, user, c.key, c.range_end, write=False)
                        for c in r.compare)
                    and all(self._allowed(user, op) for op in (*r.success, *r.failure)))
        if isinstance(r, Compact | LeaseGrant | LeaseRevoke | LeaseCheckpoint):
            return user in s.users
        if isinstance(r, au.AuthChange):
            return au.is_admin(s, user)
        return False

    def token_user(self, token: str) -> tuple[str | None, int]:
        """(the user the token names, the auth revision now); (None, revision) with auth
        off; ErrInvalidAuthToken for a token this member does not know."""
        if not self.state.enabled:
            return None, self.state.revision
        user = self.tokens.get(token)
        if user is None or user not in self.state.users:
            raise au.AuthError("ErrInvalidAuthToken")
        return user, self.state.revision

    def read(self, op: str, args: tuple[Any, ...], user: str | None) -> Any:
        """UserGet/UserList/RoleGet/RoleList and the stored password hash (for the
        server's Authenticate). Listing needs root once auth is on."""
        s = self.state
        if op == "password":
            if not s.enabled:
                raise au.AuthError("ErrAuthNotEnabled")
            found = s.users.get(args[0])
            if found is None:
                raise au.AuthError("ErrAuthFailed")
            return found["password"]
        if s.enabled and not au.is_admin(s, user):
            raise au.AuthError("ErrPermissionDenied")
        if op == "user_get":
            found = s.users.get(args[0])
            if found is None:
                raise au.AuthError("ErrUserNotFound")
            return list(found["roles"])
        if op == "user_list":
            return sorted(s.users)
        if op == "role_get":
            if args[0] == au.ROOT and au.ROOT not in s.roles:
                return []
            if args[0] not in s.roles:
                raise au.AuthError("ErrRoleNotFound")
            return [(k, bytes.fromhex(key), bytes.fromhex(end))
                    for k, key, end in s.roles[args[0]]]
        if op == "role_list":
            return sorted(s.roles)
        if op == "status":
            return (s.enabled, s.revision)
        raise au.AuthError("ErrInvalidAuthMgmt")


__all__ = ["AuthKeeper"]
