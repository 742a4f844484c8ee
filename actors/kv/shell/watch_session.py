"""A watcher session as the Python client drives it: many watches in one session, one
ordered stream of responses, polled (`Client.watch` / `Client.session` open them).

The session process is `watcher.py`'s; this side only calls it (`session_protocol.py`):
`CreateWatch`, `Next(max_wait)`, `RequestProgress()`, `CancelWatch(id)`, `Close()`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

from sediment.actors.kv import watch_protocol as wp
from sediment.actors.kv.errors import KvError
from sediment.actors.kv.shell import session_protocol as sp
from sediment.runtime.errors import CallError
from sediment.runtime.pid import Pid


@dataclass
class WatchSession:
    """One watcher process: many watches, one ordered stream of responses."""

    rt: Any
    pid: Pid
    node: str
    buffered: list[Any] = field(default_factory=list)
    closed: Any = None

    def watch(self, key: bytes, range_end: bytes | None = None, start_revision: int = 0,
              prev_kv: bool = False, no_put: bool = False, no_delete: bool = False,
              progress_notify: bool = False) -> Watch:
        request = wp.CreateWatch(key, range_end, start_revision, None, prev_kv, no_put,
                                 no_delete, progress_notify)
        answer = self.rt.call(self.pid, request, timeout=30)
        if isinstance(answer, wp.Rejected):
            raise answer.error
        if isinstance(answer, wp.Canceled):
            raise WatchCanceled(answer)
        if not isinstance(answer, wp.Created):
            raise KvError(f"watch not created: {answer!r}")
        return Watch(self, answer.watch_id, answer.start_revision)

    def poll(self, max_wait: float = 1.0) -> list[Any]:
        """Every response the session has for its watches now (waiting up to max_wait)."""
        reply = self.rt.call(self.pid, sp.Next(max_wait), timeout=max_wait + 30)
        if isinstance(reply, sp.Closed):
            self.closed = reply.reason
        return list(reply.responses)

    def request_progress(self) -> None:
        self.rt.call(self.pid, wp.RequestProgress(), timeout=30)

    def close(self) -> None:
        with contextlib.suppress(CallError):
            self.rt.call(self.pid, sp.Close(), timeout=30)


class WatchCanceled(KvError):
    """The watch could not start (its start revision is compacted) or was canceled."""

    def __init__(self, canceled: wp.Canceled) -> None:
        super().__init__(f"watch {canceled.watch_id} canceled: {canceled.reason} "
                         f"(compact revision {canceled.compact_revision})")
        self.canceled = canceled


@dataclass
class Watch:
    session: WatchSession
    id: int
    start_revision: int
    responses: list[Any] = field(default_factory=list)

    def poll(self, max_wait: float = 1.0) -> list[Any]:
        """This watch's new responses (others' stay buffered in the session)."""
        s = self.session
        s.buffered.extend(s.poll(max_wait))
        mine = [r for r in s.buffered if getattr(r, "watch_id", None) in (self.id, wp.BROADCAST_ID)]
        s.buffered = [r for r in s.buffered if r not in mine or
                      getattr(r, "watch_id", None) == wp.BROADCAST_ID]
        self.responses.extend(mine)
        return mine

    def cancel(self) -> Any:
        return self.session.rt.call(self.session.pid, wp.CancelWatch(self.id), timeout=30)


__all__ = ["Watch", "WatchCanceled", "WatchSession"]
