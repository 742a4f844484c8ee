"""Leases without Ray: the store's replicated part (grant, attach on put, revoke deletes
the attached keys in one revision, checkpoints, snapshots) and the leader's lessor core
(deadlines, keep-alive, expiry, a new leader's extension, checkpoints)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sediment.actors.etcd.lessor_core import REVOKE_RETRY, Lessor
from sediment.actors.kv import lease_store
from sediment.actors.kv.errors import (
    ErrKeyNotFound,
    ErrLeaseExist,
    ErrLeaseNotFound,
    ErrLeaseProvided,
    ErrValueProvided,
)
from sediment.actors.kv.machine import NetsyMachine
from sediment.actors.kv.queries import AllLeases, AuthRead, LeaseLookup, TokenUser, WriteCheck
from sediment.actors.kv.store import Store
from sediment.actors.kv.types import (
    Compare,
    LeaseCheckpoint,
    LeaseGrant,
    LeaseInfo,
    LeaseRevoke,
    Put,
    Range,
    Txn,
)
from sediment.actors.log.raft.types import Entry


def test_a_put_attaches_its_lease_and_a_revoke_deletes_every_key_in_one_revision(
        tmp_path: Path) -> None:
    with Store(tmp_path / "kv.sqlite") as s:
        lease_store.grant(s, 7, 10)
        with pytest.raises(ErrLeaseExist):
            lease_store.grant(s, 7, 10)
        s.request(Put(b"a", b"1", lease=7))
        s.request(Put(b"b", b"2", lease=7))
        s.request(Put(b"c", b"3"))
        assert s.range(b"a").kvs[0].lease == 7
        assert lease_store.lease(s, 7, keys=True).keys == (b"a", b"b")
        head = s.head
        assert lease_store.revoke(s, 7).revision == head + 1
        assert [kv.key for kv in s.range(b"\0", b"\0").kvs] == [b"c"]
        events = s.events(head + 1, b"\0", b"\0")
        assert [(e.kind, e.kv.key, e.kv.mod_revision) for e in events] == [
            ("delete", b"a", head + 1), ("delete", b"b", head + 1)]
        assert s.range(b"a", revision=head).kvs[0].lease == 7  # history keeps it
        with pytest.raises(ErrLeaseNotFound):
            lease_store.revoke(s, 7)


def test_a_put_naming_a_missing_lease_writes_nothing_even_in_a_txn(tmp_path: Path) -> None:
    with Store(tmp_path / "kv.sqlite") as s:
        head = s.head
        with pytest.raises(ErrLeaseNotFound):
            s.request(Put(b"a", b"1", lease=99))
        with pytest.raises(ErrLeaseNotFound):
            s.request(Txn((), (Put(b"x", b"1"), Put(b"a", b"1", lease=99))))
        assert s.head == head and s.range(b"x").kvs == []


def test_ignore_lease_keeps_the_keys_lease_and_etcds_checks(tmp_path: Path) -> None:
    with Store(tmp_path / "kv.sqlite") as s:
        lease_store.grant(s, 5, 10)
        with pytest.raises(ErrKeyNotFound):
            s.request(Put(b"k", b"v", ignore_lease=True))
        s.request(Put(b"k", b"v", lease=5))
        s.request(Put(b"k", b"w", ignore_lease=True))
        assert s.range(b"k").kvs[0].lease == 5
        with pytest.raises(ErrLeaseProvided):
            s.request(Put(b"k", b"w", lease=5, ignore_lease=True))
        with pytest.raises(ErrValueProvided):
            s.request(Put(b"k", b"w", ignore_value=True))
        assert s.request(Txn((Compare(b"k", "lease", "=", 5),), (Range(b"k"),))).succeeded


def test_the_machine_applies_lease_commands_and_a_snapshot_keeps_them(
        tmp_path: Path) -> None:
    log: list[Entry] = []
    m = NetsyMachine(str(tmp_path / "a"))

    def apply(cmd: object) -> object:
        entry = Entry(len(log) + 1, 1, 0.0, cmd)
        log.append(entry)
        return m.apply(entry)

    apply(LeaseGrant(3, 30))
    apply(Put(b"k", b"v", lease=3))
    apply(LeaseCheckpoint(((3, 12),)))
    assert m.query(AllLeases()) == [LeaseInfo(3, 30, 12)]
    data, _ = m.snapshot()
    other = NetsyMachine(str(tmp_path / "b"))
    other.restore(data, m.applied, log)
    assert other.query(LeaseLookup(3, True)) == LeaseInfo(3, 30, 12, (b"k",))
    assert other.query(Range(b"k")).kvs[0].lease == 3
    assert m.snapshot()[0] == other.snapshot()[0]
    revoked = apply(LeaseRevoke(3))
    assert m.query(Range(b"k")).kvs == [] and revoked.revision == m.store.head
    m.close()
    other.close()


def test_the_lessor_expires_renews_and_extends_on_promotion() -> None:
    lessor = Lessor()
    lessor.promote(100.0, [LeaseInfo(1, 10, 0), LeaseInfo(2, 10, 4)], extend=1.0)
    assert lessor.remaining(100.0, 1) == 11 and lessor.remaining(100.0, 2) == 5
    assert lessor.expired(104.9) == []
    assert lessor.expired(105.0) == [2]
    assert lessor.expired(105.5) == []  # its revoke is under way
    assert lessor.renew(105.5, 2) is None  # an expired lease is not renewed
    assert lessor.expired(105.0 + REVOKE_RETRY) == [2]  # the revoke is proposed again
    assert lessor.renew(106.0, 1) == 10 and lessor.remaining(106.0, 1) == 10
    lessor.revoked(2)
    assert lessor.remaining(106.0, 2) is None
    assert lessor.checkpoints(107.0) == ((1, 9),)
    assert lessor.checkpoints(107.0) == ()  # nothing changed since
    lessor.reconcile(108.0, [LeaseInfo(1, 10, 9), LeaseInfo(5, 3, 0)])
    assert lessor.remaining(108.0, 5) == 3
    lessor.reconcile(108.0, [LeaseInfo(5, 3, 0)])
    assert lessor.remaining(108.0, 1) is None
    lessor.demote()
    assert not lessor.leading and lessor.deadline == {}


# ---- auth (the replicated model, without Ray) ----------------------------------------

from sediment.actors.kv import auth_store as au  # noqa: E402
from sediment.actors.kv.auth_store import AuthChange, AuthError, Wire  # noqa: E402


def _machine_with_auth(tmp_path: Path) -> tuple[NetsyMachine, list[Entry]]:
    m = NetsyMachine(str(tmp_path / "m"))
    log: list[Entry] = []
    for cmd in (AuthChange("user_add", ("root", au.hash_password("pw"))),
                AuthChange("role_add", ("root",)),
                AuthChange("user_grant_role", ("root", "root")),
                AuthChange("role_add", ("reader",)),
                AuthChange("role_grant_permission", ("reader", au.READ, b"/a/".hex(),
                                                     b"/a0".hex())),
                AuthChange("user_add", ("alice", au.hash_password("apw"))),
                AuthChange("user_grant_role", ("alice", "reader")),
                AuthChange("enable", ())):
        log.append(Entry(len(log) + 1, 1, 0.0, cmd))
        assert not isinstance(m.apply(log[-1]), Exception), cmd
    return m, log


def test_auth_checks_each_request_at_apply_and_a_denied_one_changes_nothing(
        tmp_path: Path) -> None:
    m, log = _machine_with_auth(tmp_path)
    rev = m.auth.state.revision

    def apply(cmd: object) -> object:
        log.append(Entry(len(log) + 1, 1, 0.0, cmd))
        return m.apply(log[-1])

    head = m.store.head
    assert isinstance(apply(Wire(None, rev, Put(b"/a/k", b"v"))), AuthError)  # no user
    denied = apply(Wire("alice", rev, Put(b"/a/k", b"v")))
    assert isinstance(denied, AuthError) and denied.name == "ErrPermissionDenied"
    assert m.store.head == head
    assert not isinstance(apply(Wire("root", rev, Put(b"/a/k", b"v"))), Exception)
    assert m.query(Wire("alice", rev, Range(b"/a/k"))).kvs[0].value == b"v"
    assert isinstance(m.query(Wire("alice", rev, Range(b"/b"))), AuthError)
    assert isinstance(m.query(Wire("alice", rev, Range(b"/a/", b"/b"))), AuthError)
    apply(Wire("root", rev, AuthChange("role_revoke_permission", ("reader", b"/a/".hex(),
                                                                     b"/a0".hex()))))
    stale = m.query(Wire("alice", rev, Range(b"/a/k")))
    assert isinstance(stale, AuthError) and stale.name == "ErrAuthOldRevision"
    assert isinstance(apply(Wire("alice", m.auth.state.revision,
                                 AuthChange("user_add", ("eve", "x")))), AuthError)
    m.close()


def test_a_write_check_asks_the_write_permission_and_nothing_else(tmp_path: Path) -> None:
    """A branch writer's delete report is judged by `WriteCheck` over the staging
    token's keys: write permission over the whole range, read-only is not enough."""
    m, log = _machine_with_auth(tmp_path)
    rev, head = m.auth.state.revision, m.store.head
    log.append(Entry(len(log) + 1, 1, 0.0, Wire("root", rev, AuthChange(
        "role_grant_permission", ("reader", au.WRITE, b"/w/".hex(), b"/w0".hex())))))
    assert not isinstance(m.apply(log[-1]), Exception)
    rev = m.auth.state.revision
    assert m.query(Wire("root", rev, WriteCheck(b"/a/", b"/a0"))) is True
    assert m.query(Wire("alice", rev, WriteCheck(b"/w/t/", b"/w/t0"))) is True
    for wire, name in [(Wire("alice", rev, WriteCheck(b"/a/", b"/a0")), "ErrPermissionDenied"),
                       (Wire("alice", rev, WriteCheck(b"/w/", b"/x")), "ErrPermissionDenied"),
                       (Wire(None, rev, WriteCheck(b"/w/", b"/w0")), "ErrUserEmpty"),
                       (Wire("alice", rev - 1, WriteCheck(b"/w/", b"/w0")),
                        "ErrAuthOldRevision")]:
        refused = m.query(wire)
        assert isinstance(refused, AuthError) and refused.name == name, (wire, refused)
    assert m.store.head == head
    log.append(Entry(len(log) + 1, 1, 0.0, Wire("root", rev, AuthChange("disable", ()))))
    m.apply(log[-1])
    assert m.query(Wire(None, 0, WriteCheck(b"/a/", b"/a0"))) is True  # auth off: anyone
    m.close()


def test_tokens_name_users_and_the_auth_state_survives_a_snapshot(tmp_path: Path) -> None:
    m, log = _machine_with_auth(tmp_path)
    log.append(Entry(len(log) + 1, 1, 0.0, AuthChange("token", ("tok.1", "alice"))))
    assert m.apply(log[-1]) == "tok.1"
    assert m.query(TokenUser("tok.1")) == ("alice", m.auth.state.revision)
    assert isinstance(m.query(TokenUser("nope")), AuthError)
    assert m.query(AuthRead("user_list", (), "root")) == ["alice", "root"]
    assert isinstance(m.query(AuthRead("user_list", (), "alice")), AuthError)
    data, _ = m.snapshot()
    other = NetsyMachine(str(tmp_path / "o"))
    other.restore(data, m.applied, log)
    assert other.auth.state == m.auth.state
    assert isinstance(other.query(TokenUser("tok.1")), AuthError)  # memory only
    with pytest.raises(AuthError, match="root user does not exist"):
        au.change(au.AuthState(), "enable", ())
    assert au.password_ok(m.auth.state.users["alice"]["password"], "apw")
    assert not au.password_ok(m.auth.state.users["alice"]["password"], "wrong")
    m.close()
    other.close()


def test_a_restart_keeps_the_checkpointed_ttl_and_a_new_leader_extends_it(
        tmp_path: Path) -> None:
    """etcd's lease checkpoints: a member reopened from its own files still holds the
    remaining TTL the leader last checkpointed, and the lessor of whichever member leads
    next gives the lease that remainder plus an election timeout, not its whole TTL."""
    m = NetsyMachine(str(tmp_path / "m"))
    for i, cmd in enumerate((LeaseGrant(9, 60), Put(b"k", b"v", lease=9),
                             LeaseCheckpoint(((9, 7),))), start=1):
        assert not isinstance(m.apply(Entry(i, 1, 0.0, cmd)), Exception), cmd
    m.close()
    reopened = NetsyMachine(str(tmp_path / "m"))  # the restart: same dir, no snapshot
    try:
        assert reopened.applied == 3  # the checkpoint is not applied a second time
        leases = reopened.query(AllLeases())
        assert leases == [LeaseInfo(9, 60, 7)]
        lessor = Lessor()
        lessor.promote(500.0, leases, extend=1.0)
        assert lessor.remaining(500.0, 9) == 8  # 7 left + the election timeout, not 60
        assert lessor.expired(507.9) == [] and lessor.expired(508.0) == [9]
        unchecked = Lessor()  # a lease never checkpointed gets its whole TTL (etcd too)
        unchecked.promote(500.0, [LeaseInfo(9, 60, 0)], extend=1.0)
        assert unchecked.remaining(500.0, 9) == 61
    finally:
        reopened.close()
