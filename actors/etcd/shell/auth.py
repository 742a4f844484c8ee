"""etcd's auth on the wire: simple tokens, the Auth service, and the user every request
carries into the log.

A request's `token` metadata names its user: the local member's machine resolves it
(`TokenUser(token)`, an in-memory step on the raft host) to the user and the auth
revision now; without a token there is no user and no extra step. Every client request
goes to the machine as `Wire(user, auth revision, request)` and the machine decides at
apply (writes) or when it answers (reads) whether the user may (`auth_machine.py`), so a
denied request changes nothing, and a permission revoked in between is seen
(ErrAuthOldRevision). Authenticate checks the password here (the stored salted hash,
off the event loop) and proposes the new simple token, so every member knows it.
Managing users and roles is proposed too; once auth is on it needs the root role.
Passwords are hashed here with a fresh salt before they are proposed.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
from typing import TYPE_CHECKING, Any

from sediment.actors.etcd.pb import auth_pb2 as _auth_pb2
from sediment.actors.etcd.pb import rpc_pb2 as _rpc_pb2
from sediment.actors.etcd.shell.services import answer
from sediment.actors.kv import auth_store as au
from sediment.actors.kv.queries import AuthRead, TokenUser

if TYPE_CHECKING:
    from sediment.actors.etcd.shell.server import EtcdServer

pb: Any = _rpc_pb2
authpb: Any = _auth_pb2
_serial = itertools.count(1)


def token_of(context: Any) -> str | None:
    for key, value in context.invocation_metadata() or ():
        if key == "token":
            return str(value)
    return None


class Auth:
    def __init__(self, server: EtcdServer) -> None:
        self.s = server

    async def user(self, context: Any) -> tuple[str | None, int]:
        token = token_of(context)
        if token is None:
            return None, 0
        found = await self.s.router.local_query(TokenUser(token))
        if isinstance(found, Exception):
            raise found
        return found[0], int(found[1])

    async def wrap(self, request: Any, context: Any) -> au.Wire:
        user, revision = await self.user(context)
        return au.Wire(user, revision, request)


def _raise(result: Any) -> Any:
    if isinstance(result, Exception):
        raise result
    return result


def _unary(name: str, build: Any) -> Any:
    """A gRPC method of AuthService running `build` under `answer` (etcd's statuses)."""
    async def method(self: AuthService, request: Any, context: Any) -> Any:
        async def run(req: Any, ctx: Any) -> Any:
            return await build(self, req, ctx)
        return await answer(context, run, request)
    method.__name__ = name
    return method


class AuthService:
    def __init__(self, server: EtcdServer) -> None:
        self.s = server

    async def _propose(self, op: str, args: tuple[Any, ...], context: Any) -> Any:
        command = await self.s.auth.wrap(au.AuthChange(op, args), context)
        _, result = await self.s.router.propose(command, self.s.request_timeout)
        _raise(result)
        return self.s.header(0)

    async def _read(self, op: str, args: tuple[Any, ...], context: Any) -> Any:
        user, _ = await self.s.auth.user(context)
        return _raise(await self.s.router.local_query(AuthRead(op, args, user)))

    async def _enable(self, r: Any, c: Any) -> Any:
        return pb.AuthEnableResponse(header=await self._propose("enable", (), c))

    async def _disable(self, r: Any, c: Any) -> Any:
        return pb.AuthDisableResponse(header=await self._propose("disable", (), c))

    async def _authenticate(self, r: Any, c: Any) -> Any:
        stored = await self.s.router.local_query(AuthRead("password", (r.name,), None))
        if isinstance(stored, au.AuthError) and stored.name == "ErrAuthNotEnabled":
            raise stored
        if isinstance(stored, Exception) or not await asyncio.to_thread(
                au.password_ok, stored, r.password):
            raise au.AuthError("ErrAuthFailed")
        token = f"{secrets.token_urlsafe(12)}.{next(_serial)}"
        index, result = await self.s.router.propose(au.AuthChange("token", (token, r.name)),
                                                    self.s.request_timeout)
        _raise(result)
        # the token is checked by this node's member: on a follower, answer once it knows
        # it (as etcd hands out a simple token only where it was applied)
        await self.s.router.local_applied(index, self.s.request_timeout)
        return pb.AuthenticateResponse(header=self.s.header(0), token=token)

    async def _user_add(self, r: Any, c: Any) -> Any:
        hashed = await asyncio.to_thread(au.hash_password, r.password)
        return pb.AuthUserAddResponse(
            header=await self._propose("user_add", (r.name, hashed), c))

    async def _user_delete(self, r: Any, c: Any) -> Any:
        return pb.AuthUserDeleteResponse(header=await self._propose("user_delete", (r.name,), c))

    async def _user_change_password(self, r: Any, c: Any) -> Any:
        hashed = await asyncio.to_thread(au.hash_password, r.password)
        return pb.AuthUserChangePasswordResponse(
            header=await self._propose("user_change_password", (r.name, hashed), c))

    async def _user_grant_role(self, r: Any, c: Any) -> Any:
        return pb.AuthUserGrantRoleResponse(
            header=await self._propose("user_grant_role", (r.user, r.role), c))

    async def _user_revoke_role(self, r: Any, c: Any) -> Any:
        return pb.AuthUserRevokeRoleResponse(
            header=await self._propose("user_revoke_role", (r.name, r.role), c))

    async def _role_add(self, r: Any, c: Any) -> Any:
        return pb.AuthRoleAddResponse(header=await self._propose("role_add", (r.name,), c))

    async def _role_delete(self, r: Any, c: Any) -> Any:
        return pb.AuthRoleDeleteResponse(header=await self._propose("role_delete", (r.role,), c))

    async def _role_grant_permission(self, r: Any, c: Any) -> Any:
        p = r.perm
        args = (r.name, int(p.permType), bytes(p.key).hex(), bytes(p.range_end).hex())
        return pb.AuthRoleGrantPermissionResponse(
            header=await self._propose("role_grant_permission", args, c))

    async def _role_revoke_permission(self, r: Any, c: Any) -> Any:
        args = (r.role, bytes(r.key).hex(), bytes(r.range_end).hex())
        return pb.AuthRoleRevokePermissionResponse(
            header=await self._propose("role_revoke_permission", args, c))

    async def _user_get(self, r: Any, c: Any) -> Any:
        roles = await self._read("user_get", (r.name,), c)
        return pb.AuthUserGetResponse(header=self.s.header(0), roles=roles)

    async def _user_list(self, r: Any, c: Any) -> Any:
        return pb.AuthUserListResponse(header=self.s.header(0),
                                       users=await self._read("user_list", (), c))

    async def _role_get(self, r: Any, c: Any) -> Any:
        perms = await self._read("role_get", (r.role,), c)
        return pb.AuthRoleGetResponse(header=self.s.header(0), perm=[
            authpb.Permission(permType=k, key=key, range_end=end) for k, key, end in perms])

    async def _role_list(self, r: Any, c: Any) -> Any:
        return pb.AuthRoleListResponse(header=self.s.header(0),
                                       roles=await self._read("role_list", (), c))

    AuthEnable = _unary("AuthEnable", _enable)
    AuthDisable = _unary("AuthDisable", _disable)
    Authenticate = _unary("Authenticate", _authenticate)
    UserAdd = _unary("UserAdd", _user_add)
    UserGet = _unary("UserGet", _user_get)
    UserList = _unary("UserList", _user_list)
    UserDelete = _unary("UserDelete", _user_delete)
    UserChangePassword = _unary("UserChangePassword", _user_change_password)
    UserGrantRole = _unary("UserGrantRole", _user_grant_role)
    UserRevokeRole = _unary("UserRevokeRole", _user_revoke_role)
    RoleAdd = _unary("RoleAdd", _role_add)
    RoleGet = _unary("RoleGet", _role_get)
    RoleList = _unary("RoleList", _role_list)
    RoleDelete = _unary("RoleDelete", _role_delete)
    RoleGrantPermission = _unary("RoleGrantPermission", _role_grant_permission)
    RoleRevokePermission = _unary("RoleRevokePermission", _role_revoke_permission)


__all__ = ["Auth", "AuthService", "token_of"]
