"""Moving signals between host actors: handles, sequence numbers, batching, faults.

Every process lives in a host actor (its own, or a named host it shares). Signals between
two hosts travel as `deliver(sender, first_seq, [(dest pid id, signal), ...])` Ray
calls. Async Ray actors do not keep per-caller order, so every signal carries a sequence
number counting up per (sender host, receiver host) pair and the receiver's reorder
buffer restores FIFO: per pair of hosts, hence per pair of processes (Erlang's one
ordering guarantee). Shared by the kernel inside each host and by the driver.
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
    KillSignal,
    MessageSignal,
    Signal,
    SuspendSignal,
)
from ..pid import Pid
from ..reasons import KILLED, NOPROC
from ..serialization import encode
from ..sim.network import NetRules, Network
from .channels import Address, Channels

NAMESPACE = "sediment"
# Sent on the host's "signals" concurrency group, so a flood of messages queued in front of
# them at the Ray level cannot delay a kill, an exit or a pause (they still keep their
# place in the pair's order: the receiver's reorder buffer holds them until it comes).
PRIORITY_TYPES = (ExitSignal, KillSignal, FailpointSignal, SuspendSignal)
ACTOR_MAX_CONCURRENCY = 10_000
Item = tuple[str, Signal | bytes]  # (receiving pid id, the signal or its `encode`d bytes)


@dataclass(frozen=True)
class ClusterConfig:
    """What every host actor of one runtime needs to know, fixed at start."""

    cluster: str
    node_map: dict[str, str] = field(default_factory=dict)  # logical node -> Ray node id
    reap_delay: float = 2.0
    warm_pool: int = 1  # idle, already-started hosts kept per logical node
    default_host: str | None = None  # the named host a spawn without `host` joins
    channel_token: str = ""  # hosts talk over direct channels with it ("": Ray calls only)

    def actor_name(self, host_id: str) -> str:
        return f"{self.cluster}:{host_id}"


def classify_death(exc: RayActorError) -> Any:
    """The exit reason for processes of a host actor that is gone.

    A host that ended on its own (reaped after its only process ended, or stopped) ends
    with an intended exit: whoever asks after that learns `noproc` (as Erlang answers for
    a pid that no longer exists). Anything else (ray.kill, a crashed worker, a lost node)
    is `killed`.
    """
    text = str(exc)
    if "INTENDED_USER_EXIT" in text or "intentionally" in text:
        return NOPROC
    return KILLED


@dataclass(frozen=True)
class CallReplied:
    """A host's answer to a call from the driver (`HostActor.call_in`): the reply."""

    value: Any


@dataclass(frozen=True)
class CallEnded:
    """A host's answer to a call from the driver: the process ended (`reason`; `noproc`
    when it was not there) before it replied."""

    reason: Any


CallAnswer = CallReplied | CallEnded


@dataclass(frozen=True)
class ProcessEnded:
    """A host's answer to `run(pid)` (the driver waiting for a process it started):
    the process's exit reason and its function's return value."""

    reason: Any
    result: Any


def call_result(dest: Pid, answer: CallAnswer) -> Any:
    """What `call_in` answered: the reply, or the typed error for a process that ended."""
    if isinstance(answer, CallReplied):
        return answer.value
    if answer.reason == NOPROC:
        raise NoProc(f"no process {dest}")
    raise CallExit(dest, answer.reason)


def death_error(dest: Pid, reason: Any) -> CallError:
    """The typed error for a call whose target's host is gone with `reason`."""
    return NoProc(f"no process {dest}") if reason == NOPROC else CallExit(dest, reason)


def actor_options(config: ClusterConfig, node: str, host_id: str) -> dict[str, Any]:
    opts: dict[str, Any] = {
        "name": config.actor_name(host_id),
        "namespace": NAMESPACE,
        "lifetime": "detached",
        "num_cpus": 0,
        "max_restarts": 0,
        "max_concurrency": ACTOR_MAX_CONCURRENCY,
    }
    ray_node = config.node_map.get(node)
    if ray_node:
        opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(ray_node, soft=False)
    return opts


class Transport:
    """Sends signals from one sender (a host or the driver), numbering them per host."""

    def __init__(self, config: ClusterConfig, sender_id: str, node: str = "driver") -> None:
        self.config = config
        self.sender_id = sender_id
        self.node = node
        self._seq: dict[str, int] = {}  # receiving host -> last seq used
        self._handles: dict[str, Any] = {}  # host id -> actor handle
        self._lock = threading.Lock()
        tags = {"node": node}  # bound once: `_count` runs at every send
        self._messages = metrics.MESSAGES_SENT.bind(tags)
        self._ray_calls = metrics.RAY_CALLS.bind(tags)
        self._channel_batches = metrics.CHANNEL_BATCHES.bind(tags)

    def _count(self, messages: int, ray_calls: int = 1) -> None:
        """Into the in-process metrics store (`sediment.metrics` hands it to Ray at most
        once a second, so no Ray call per send)."""
        self._messages.inc(messages)
        if ray_calls:
            self._ray_calls.inc(ray_calls)
        else:
            self._channel_batches.inc()

    def _next_seq(self, host: str) -> int:
        seq = self._seq.get(host, 0) + 1
        self._seq[host] = seq
        return seq

    def handle(self, pid: Pid) -> Any | None:
        """The actor handle of `pid`'s host, or None if that actor does not exist (any more)."""
        if pid.handle is not None:
            return pid.handle
        handle = self._handles.get(pid.host)
        if handle is None and pid.host:
            try:
                handle = ray.get_actor(self.config.actor_name(pid.host), namespace=NAMESPACE)
            except ValueError:
                return None
            self._handles[pid.host] = handle
        return handle

    def submit(self, dest: Pid, signal: Signal) -> bool:
        """Send one signal now; False if the target's host does not exist. Never blocks."""
        handle = self.handle(dest)
        if handle is None:
            return False
        method = handle.signal if isinstance(signal, PRIORITY_TYPES) else handle.deliver
        blob = encode(signal)  # UnpicklableMessage here: nothing was sent
        with self._lock:
            seq = self._seq.get(dest.host, 0) + 1
            method.remote(self.sender_id, seq, [(dest.id, blob)])
            self._count(1)
            self._seq[dest.host] = seq
        return True

    def submit_call(self, dest: Pid, request: Any) -> Any | None:
        """Start a call; the ObjectRef of the reply, or None if the host does not exist."""
        handle = self.handle(dest)
        if handle is None:
            return None
        with self._lock:
            seq = self._seq.get(dest.host, 0) + 1
            try:
                ref = handle.call_in.remote(self.sender_id, seq, dest.id, request)
            except (TypeError, ValueError) as exc:
                raise UnpicklableMessage(
                    f"request cannot be serialized: {type(exc).__name__}: {exc}"
                ) from None
            self._seq[dest.host] = seq
        return ref


class BatchingTransport(Transport):
    """A host's sender: coalesces what its processes send one host in one event-loop turn.

    `submit` stays non-blocking and numbered at once (so order and gap-free sequences are
    decided at the send); the Ray call that carries them goes out at the end of the turn,
    one per receiving host, at most `max_batch` signals each. A burst of N sends from any
    of the host's processes to any processes of another host costs one actor call.

    Network faults (`set_net`: partitions, per-link delay and loss, the same rules as the
    sim backend's `Network`) apply here, at the sender, to messages (call requests
    included) between different logical nodes: a lost message takes no sequence number,
    so the receiver's stream has no gap; a delayed one keeps its number and the
    receiver's reorder buffer holds what follows until it arrives (FIFO per pair, like a
    TCP connection). Exit, link, monitor and failpoint signals and call replies are not
    affected.
    """

    def __init__(self, config: ClusterConfig, sender_id: str, node: str,
                 max_batch: int = 512) -> None:
        super().__init__(config, sender_id, node)
        self.max_batch = max_batch
        self._outbox: dict[str, tuple[Any, int, list[Item]]] = {}
        self._flush_scheduled = False
        self._net: Network | None = None
        self.channels: Channels | None = None  # direct streams to peer hosts (channels.py)
        self.channel_address: Address | None = None  # where this host's channel listens

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
        """A failpoint armed on every process."""
        return self._net.failpoints.get(name) if self._net is not None else None

    def route(self, dest: Pid) -> float | None:
        """Delay before a message to `dest` leaves (0: now), None if the fault drops it."""
        if self._net is None or dest.node == self.node:
            return 0.0
        return self._net.route(self.node, dest.node)

    def submit(self, dest: Pid, signal: Signal) -> bool:
        handle = self.handle(dest)
        if handle is None:
            return False
        blob = encode(signal)  # once, here: an unpicklable message is refused at the send
        if isinstance(signal, MessageSignal):
            delay = self.route(dest)
            if delay is None:
                return True  # lost on the way: the sender cannot tell
            if delay > 0:
                self._flush_host(dest.host)
                seq = self._next_seq(dest.host)
                self._send_later(delay, handle, seq, (dest.id, blob))
                return True
        if isinstance(signal, PRIORITY_TYPES):
            self._flush_host(dest.host)  # what went before leaves first
            seq = self._next_seq(dest.host)
            self._count(1)
            handle.signal.remote(self.sender_id, seq, [(dest.id, blob)])
            return True
        seq = self._next_seq(dest.host)
        box = self._outbox.get(dest.host)
        if box is None:
            self._outbox[dest.host] = (handle, seq, [(dest.id, blob)])
        else:
            box[2].append((dest.id, blob))
            if len(box[2]) >= self.max_batch:
                self._flush_host(dest.host)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)
        return True

    def _send_later(self, delay: float, handle: Any, seq: int, item: Item) -> None:
        def go() -> None:
            self._count(1)
            handle.deliver.remote(self.sender_id, seq, [item])

        asyncio.get_running_loop().call_later(delay, go)

    def flush(self) -> None:
        """Send every pending batch now."""
        self._flush_scheduled = False
        for host in list(self._outbox):
            self._flush_host(host)

    def _flush_host(self, host: str) -> None:
        box = self._outbox.pop(host, None)
        if box is None:
            return
        handle, first, items = box
        channels = self.channels
        if channels is not None and channels.send(host, self.sender_id, first, items):
            self._count(len(items), ray_calls=0)
            return
        self._count(len(items))
        handle.deliver.remote(self.sender_id, first, items, self.channel_address)

    def forget(self, host: str) -> None:
        """A host is gone: drop what was waiting for it and its numbering."""
        if self.channels is not None:
            self.channels.forget(host)
        self._outbox.pop(host, None)
        self._seq.pop(host, None)
        self._handles.pop(host, None)
