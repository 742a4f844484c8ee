"""Staging tokens in the KV: writes, point reads, ordered scans, and dropping a token.

A staged entry is the key `s/<repo>/<token>/<path>` (a tombstone is the empty value).
A write succeeds only if its token is still the branch's staging token when it lands:
it is one Txn that compares the branch key's mod revision with the one just read and
puts the entry. Every seal (commit, compaction, reset) rewrites the branch key, so a
write racing a seal either lands before it (and the sealer, reading the token at or
after its own revision, sees it) or fails its compare and is retried on the new
token. That is lakeFS's "a write succeeds only if its token is current afterwards",
checked atomically instead of by a second read.

Reads of tokens are pinned at a snapshot revision (the header revision of the branch
read that named them), so a token dropped meanwhile by a commit or a compaction still
reads as it was; the KV compacting that revision away raises ErrCompacted and the
caller reads again from the branch.

A write whose Txn got no answer (a timeout) may still land: it is recorded as
`Uncertain` for the history checker and its error raised.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sediment.actors.branches import metrics
from sediment.actors.branches import names as nm
from sediment.actors.branches.entry import Entry, Record, decode_value, encode_value
from sediment.actors.branches.errors import KvUnavailable, TooManyTries
from sediment.actors.branches.history import Lost, Recorder, Staged, Uncertain
from sediment.actors.branches.merge import merge_layers
from sediment.actors.branches.ports import Env, KvPort
from sediment.actors.branches.refs import Refs
from sediment.actors.branches.retry import STAGED_WRITE, RetryPolicy
from sediment.actors.kv.types import Compare, DeleteRange, Put, Range, RangeResult, Txn
from sediment.runtime.errors import CallError

MAX_TXN_OPS = 128  # etcd's default --max-txn-ops
SCAN_BATCH = 1000


@dataclass(frozen=True, slots=True)
class StagedWrite:
    token: str
    revision: int
    sealed: int  # sealed tokens the branch had: the sensor's optional signal


class Staging:
    def __init__(self, kv: KvPort, env: Env, refs: Refs, recorder: Recorder,
                 policy: RetryPolicy = STAGED_WRITE, batch: int = SCAN_BATCH) -> None:
        self.kv = kv
        self.env = env
        self.refs = refs
        self.recorder = recorder
        self.policy = policy
        self.batch = batch

    async def write(self, repo: str, branch: str, path: str, entry: Entry | None) -> StagedWrite:
        """Stage `entry` (None: a tombstone) at `path` on the branch's current token."""
        bkey = nm.branch_key(repo, branch)
        value = encode_value(entry)
        failed = 0
        while True:
            read = await self.refs.get_branch(repo, branch)
            token = read.branch.staging_token
            try:
                res = await self.kv.txn(Txn(
                    (Compare(bkey, "mod_revision", "=", read.mod_revision),),
                    (Put(nm.staging_key(repo, token, path), value),)))
            except (TimeoutError, CallError, KvUnavailable) as err:
                if not isinstance(err, KvUnavailable) or err.indeterminate:
                    self.recorder.record(Uncertain(repo, branch, path, entry))
                raise
            if res.succeeded:
                self.recorder.record(Staged(repo, branch, path, entry, token, res.revision))
                return StagedWrite(token, res.revision, len(read.branch.sealed_tokens))
            self.recorder.record(Lost(repo, branch, "write", read.mod_revision))
            metrics.STAGED_WRITE_RETRIES.inc()
            failed += 1
            delay = self.policy.delay(failed, self.env.jitter())
            if delay is None:
                raise TooManyTries(f"write to {repo}/{branch}: the branch changed {failed} "
                                   f"times under it")
            await self.env.sleep(delay)

    async def get(self, repo: str, tokens: Sequence[str], path: str,
                  at: int) -> tuple[bool, Entry | None]:
        """(found, entry) from the newest token holding `path` at revision `at`; one
        read-only Txn per 128 tokens."""
        for lo in range(0, len(tokens), MAX_TXN_OPS):
            chunk = tokens[lo:lo + MAX_TXN_OPS]
            res = await self.kv.txn(Txn((), tuple(
                Range(nm.staging_key(repo, t, path), revision=at) for t in chunk)))
            for answer in res.responses:
                assert isinstance(answer, RangeResult)
                if answer.kvs:
                    return True, decode_value(answer.kvs[0].value, answer.kvs[0].key)
        return False, None

    async def scan(self, repo: str, token: str, start: str, prefix: str, at: int,
                   limit: int) -> tuple[list[Record], bool]:
        """Up to `limit` records of `token` from path `start` (inclusive) within
        `prefix`, at revision `at`; and whether there are more."""
        tprefix = nm.staging_prefix(repo, token)
        key = tprefix + start.encode("utf-8") if start else tprefix
        end = nm.prefix_end(tprefix + prefix.encode("utf-8"))
        if key >= end:  # a start past the prefix: nothing (and etcd refuses the range)
            return [], False
        got = await self.kv.range(Range(key, end, revision=at, limit=limit))
        records: list[Record] = [
            (kv.key[len(tprefix):].decode("utf-8"), decode_value(kv.value, kv.key))
            for kv in got.kvs]
        return records, got.more

    async def read_all(self, repo: str, token: str, at: int) -> list[Record]:
        """Every record of `token` at revision `at`, in path order."""
        out: list[Record] = []
        start = ""
        while True:
            records, more = await self.scan(repo, token, start, "", at, self.batch)
            out.extend(records)
            if not more:
                return out
            start = records[-1][0] + "\0"

    async def changes(self, repo: str, tokens: Sequence[str], at: int) -> list[Record]:
        """The merged records of `tokens` (newest first) at revision `at`: a commit's
        or a compaction's change set, tombstones included."""
        layers = [await self.read_all(repo, t, at) for t in tokens]
        return list(merge_layers(layers))

    async def has_entries(self, repo: str, token: str, at: int) -> bool:
        prefix = nm.staging_prefix(repo, token)
        got = await self.kv.range(Range(prefix, nm.prefix_end(prefix), revision=at, limit=1,
                                        keys_only=True))
        return bool(got.kvs)

    async def drop(self, repo: str, tokens: Sequence[str]) -> None:
        """Delete the tokens' entries (their branch no longer names them)."""
        for lo in range(0, len(tokens), MAX_TXN_OPS):
            ops = tuple(DeleteRange(nm.staging_prefix(repo, t),
                                    nm.prefix_end(nm.staging_prefix(repo, t)))
                        for t in tokens[lo:lo + MAX_TXN_OPS])
            if ops:
                await self.kv.txn(Txn((), ops))


__all__ = ["MAX_TXN_OPS", "SCAN_BATCH", "StagedWrite", "Staging"]
