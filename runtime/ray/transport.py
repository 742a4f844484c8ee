"""Moving signals between Ray actors: handles, sequence numbers, death classification.

Shared by the kernel inside each process actor and by the driver. Async Ray actors do not
keep per-sender order, so every signal carries (sender id, seq) with seq counting up per
(sender, receiver) pair; the receiver's reorder buffer restores FIFO.
"""

from __future__ import annotations

import asyncio
import random
import threading
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.exceptions import RayActorError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from sediment import metrics

from ..errors import CallError, CallExit, NoProc, UnpicklableMessage
from ..failpoints import Failpoint
from ..messages import (
    ExitSignal,
    FailpointSignal,
    LinkSignal,
    MessageSignal,
    Signal,
    SuspendSignal,
    UnlinkSignal,
)
from ..pid import Pid
from ..reasons import KILLED, NOPROC
from ..serialization import check_serializable
from ..sim.network import NetRules, Network

NAMESPACE = "sediment"
SIGNAL_TYPES = (ExitSignal, LinkSignal, UnlinkSignal, FailpointSignal, SuspendSignal)
ACTOR_MAX_CONCURRENCY = 10_000


@dataclass(frozen=True)
class ClusterConfig:
    """What every process actor of one runtime needs to know, fixed at start."""

    cluster: str
    node_map: dict[str, str] = field(default_factory=dict)  # logical node -> Ray node id
    reap_delay: float = 2.0
    warm_pool: int = 1  # idle, already-started actors kept per logical node

    def actor_name(self, pid_id: str) -> str:
        return f"{self.cluster}:{pid_id}"


def classify_death(exc: RayActorError) -> Any:
    """The exit reason a watcher reports for an actor that is gone.

    A process that ended on its own is reaped with an intended exit: whoever asks after
    that learns `noproc` (as Erlang answers for a pid that no longer exists). Anything
    else (ray.kill, a crashed worker, a lost node) is `killed`.
    """
    text = str(exc)
    if "INTENDED_USER_EXIT" in text or "intentionally" in text:
        return NOPROC
    return KILLED


def call_result(dest: Pid, status: str, value: Any) -> Any:
    """What `call_in` answered: the reply, or the typed error for a process that ended."""
    if status == "ok":
        return value
    if value == NOPROC:
        raise NoProc(f"no process {dest}")
    raise CallExit(dest, value)


def death_error(dest: Pid, exc: RayActorError) -> CallError:
    """The typed error for a call whose target actor died."""
    reason = classify_death(exc)
    return NoProc(f"no process {dest}") if reason == NOPROC else CallExit(dest, reason)


def actor_options(config: ClusterConfig, pid: Pid) -> dict[str, Any]:
    opts: dict[str, Any] = {
        "name": config.actor_name(pid.id),
        "namespace": NAMESPACE,
        "lifetime": "detached",
        "num_cpus": 0,
        "max_restarts": 0,
        "max_concurrency": ACTOR_MAX_CONCURRENCY,
    }
    ray_node = config.node_map.get(pid.node)
    if ray_node:
        opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(ray_node, soft=False)
    return opts


class Transport:
    """Sends signals from one sender (a process or the driver), numbering them per target."""

    def __init__(self, config: ClusterConfig, sender_id: str, node: str = "driver") -> None:
        self.config = config
        self.sender_id = sender_id
        self.node = node
        self._seq: dict[str, int] = {}
        self._handles: dict[str, Any] = {}
        self._lock = threading.Lock()

    def clock_offset(self, node: str) -> float:
        """A clock-skew fault's offset for `node` (only process transports hold rules)."""
        return 0.0

    def _count(self, messages: int) -> None:
        tags = {"node": self.node}
        metrics.MESSAGES_SENT.inc(messages, tags)
        metrics.RAY_CALLS.inc(1, tags)

    def last_seq(self, dest_id: str) -> int:
        return self._seq.get(dest_id, 0)

    def handle(self, pid: Pid) -> Any | None:
        """The actor handle for `pid`, or None if no such actor exists (any more)."""
        if pid.handle is not None:
            return pid.handle
        handle = self._handles.get(pid.id)
        if handle is None:
            try:
                handle = ray.get_actor(self.config.actor_name(pid.id), namespace=NAMESPACE)
            except ValueError:
                return None
            self._handles[pid.id] = handle
        return handle

    def remember(self, pid: Pid) -> None:
        if pid.handle is not None:
            self._handles[pid.id] = pid.handle

    def submit(self, dest: Pid, signal: Signal) -> bool:
        """Send one signal; False if the target does not exist. Never blocks."""
        handle = self.handle(dest)
        if handle is None:
            return False
        method = handle.signal if isinstance(signal, SIGNAL_TYPES) else handle.deliver
        with self._lock:
            seq = self._seq.get(dest.id, 0) + 1
            try:
                method.remote(self.sender_id, seq, signal)
                self._count(1)
            except (TypeError, ValueError) as exc:  # serialization failed: nothing was sent
                raise UnpicklableMessage(
                    f"message cannot be serialized: {type(exc).__name__}: {exc}"
                ) from None
            self._seq[dest.id] = seq
        return True

    def submit_watch(self, dest: Pid) -> Any | None:
        """Start watching `dest`, in order with what this sender sent it before."""
        handle = self.handle(dest)
        if handle is None:
            return None
        with self._lock:
            seq = self._seq.get(dest.id, 0) + 1
            ref = handle.watch.remote(self.sender_id, seq)
            self._seq[dest.id] = seq
        return ref

    def submit_call(self, dest: Pid, request: Any) -> Any | None:
        """Start a call; the ObjectRef of the reply, or None if the target does not exist."""
        handle = self.handle(dest)
        if handle is None:
            return None
        with self._lock:
            seq = self._seq.get(dest.id, 0) + 1
            try:
                ref = handle.call_in.remote(self.sender_id, seq, request)
            except (TypeError, ValueError) as exc:
                raise UnpicklableMessage(
                    f"request cannot be serialized: {type(exc).__name__}: {exc}"
                ) from None
            self._seq[dest.id] = seq
        return ref


LOST = object()  # submit_call's answer for a request the network fault dropped


class BatchingTransport(Transport):
    """Coalesces the messages a process sends one receiver in one event-loop turn.

    `send` stays non-blocking and numbered at once (so order and gap-free sequences are
    decided at the call); the Ray call that carries them goes out at the end of the
    turn, one per receiver, at most `max_batch` messages each. A burst of N sends costs
    one actor call instead of N.

    Network faults (`set_net`: partitions, per-link delay and loss, the same rules as the
    sim backend's `Network`) are applied here, at the sender, to messages and call
    requests between different logical nodes: a lost message takes no sequence number,
    so the receiver's stream has no gap; a delayed one keeps its number and the
    receiver's reorder buffer holds what follows until it arrives (FIFO per pair, like a
    TCP connection). Exit, link and failpoint signals, and call replies (they return on
    the request's Ray call), are not affected.
    """

    def __init__(self, config: ClusterConfig, sender_id: str, node: str,
                 max_batch: int = 512) -> None:
        super().__init__(config, sender_id, node)
        self.max_batch = max_batch
        self._outbox: dict[str, tuple[Any, int, list[Signal]]] = {}
        self._flush_scheduled = False
        self._net: Network | None = None

    def set_net(self, rules: NetRules | None) -> None:
        """Apply the runtime's current network faults (None or empty: none)."""
        if rules is None or rules.empty():
            self._net = None
            return
        net = self._net or Network(random.Random(), cross_node_delay=(0.0, 0.0))
        net.load(rules)
        self._net = net

    def clock_offset(self, node: str) -> float:
        return self._net.skew.get(node, 0.0) if self._net is not None else 0.0

    def everywhere_failpoint(self, name: str) -> Failpoint | None:
        """A failpoint armed on every process (only process transports hold rules)."""
        return self._net.failpoints.get(name) if self._net is not None else None

    def _route(self, dest: Pid) -> float | None:
        """Delay before a message to `dest` leaves (0: now), None if the fault drops it."""
        if self._net is None or dest.node == self.node:
            return 0.0
        return self._net.route(self.node, dest.node)

    def _send_later(self, delay: float, dest: Pid, handle: Any, seq: int,
                    signal: Signal) -> None:
        def go() -> None:
            self._count(1)
            handle.deliver.remote(self.sender_id, seq, signal)

        asyncio.get_running_loop().call_later(delay, go)

    def submit_call(self, dest: Pid, request: Any) -> Any | None:
        delay = self._route(dest)
        if delay is None:
            return LOST if self.handle(dest) is not None else None
        return super().submit_call(dest, request)

    def submit(self, dest: Pid, signal: Signal) -> bool:
        if isinstance(signal, SIGNAL_TYPES):
            return super().submit(dest, signal)
        handle = self.handle(dest)
        if handle is None:
            return False
        if isinstance(signal, MessageSignal):
            check_serializable(signal.payload)
        delay = self._route(dest)
        if delay is None:
            return True  # lost on the way: the sender cannot tell
        if delay > 0:
            if dest.id in self._outbox:
                self._send_box(dest.id)
            seq = self._seq.get(dest.id, 0) + 1
            self._seq[dest.id] = seq
            self._send_later(delay, dest, handle, seq, signal)
            return True
        seq = self._seq.get(dest.id, 0) + 1
        self._seq[dest.id] = seq
        box = self._outbox.get(dest.id)
        if box is None:
            self._outbox[dest.id] = (handle, seq, [signal])
        else:
            box[2].append(signal)
            if len(box[2]) >= self.max_batch:
                self._send_box(dest.id)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)
        return True

    def flush(self) -> None:
        """Send every pending batch now."""
        self._flush_scheduled = False
        for dest_id in list(self._outbox):
            self._send_box(dest_id)

    def _send_box(self, dest_id: str) -> None:
        handle, first, signals = self._outbox.pop(dest_id)
        self._count(len(signals))
        if len(signals) == 1:
            handle.deliver.remote(self.sender_id, first, signals[0])
        else:
            handle.deliver_batch.remote(self.sender_id, first, signals)
