"""Direct channels between host actors: the hot path of messages from host to host.

A Ray actor call costs about 0.8 ms of CPU at each end and 1-3 ms of latency on a small
machine (`benchmarks/runtime_bench.py`, rows `raw Ray` and `channel`): a raft commit is
a round of them, so on Ray calls alone a 3-node KV spends most of its CPU in Ray's call
machinery. Ray still creates, places, names, watches and kills every host, and carries
calls from the driver, exits, kills and failpoints (the priority signals), messages a
network fault delays, and everything sent before a channel is up. Between two hosts
the batches of ordinary messages (`deliver`'s `(sender, first_seq, items)`, items
already pickled at the send) go over one TCP stream per direction: the receiver hands
them to the same reorder buffer as Ray's deliveries, so per-pair FIFO holds however
the two paths interleave.

Each host listens on its Ray node's address. A host learns a peer's address from the
peer's Ray deliveries (`deliver(..., channel=address)`) or from the handshake of the
peer's own channel, and connects in the background; until then, Ray carries the traffic.
A stream accepts frames only after the cluster's token (random per runtime, handed to
every host in `ClusterConfig`): nothing from a stranger is unpickled. A channel that
breaks (its host died) is dropped; what follows goes by Ray, which reports the death.
"""

from __future__ import annotations

import asyncio
import hmac
import pickle
import struct
from collections.abc import Callable
from typing import Any

from sediment import log

_logger = log.get_logger("sediment.runtime.channels")
_HEADER = struct.Struct("!I")
MAX_FRAME = 1 << 30  # bytes: a larger frame is a broken or hostile stream
Address = tuple[str, int]
OnBatch = Callable[[str, int, list[Any]], None]
OnPeer = Callable[[str, Address], None]


def frame(obj: Any) -> bytes:
    body = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(body)) + body


class _Frames:
    """Splits a byte stream into frames."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        buf = self._buf
        buf += data
        out: list[bytes] = []
        pos = 0
        while len(buf) - pos >= _HEADER.size:
            (size,) = _HEADER.unpack_from(buf, pos)
            if size > MAX_FRAME:
                raise ValueError(f"frame of {size} bytes")
            end = pos + _HEADER.size + size
            if len(buf) < end:
                break
            out.append(bytes(buf[pos + _HEADER.size:end]))
            pos = end
        if pos:
            del buf[:pos]
        return out


class _Inbound(asyncio.Protocol):
    """One peer's stream into this host: a handshake frame, then batches."""

    def __init__(self, token: str, on_batch: OnBatch, on_peer: OnPeer) -> None:
        self._token = token
        self._on_batch = on_batch
        self._on_peer = on_peer
        self._frames = _Frames()
        self._peer: str | None = None
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._frames.feed(data)
        except ValueError as exc:
            self._drop(str(exc))
            return
        for body in frames:
            if self._peer is None:
                if not self._handshake(body):
                    return
                continue
            try:
                sender, first, items = pickle.loads(body)
                self._on_batch(sender, first, items)
            except Exception as exc:  # noqa: BLE001 - one bad batch must not end the stream
                # (an exception here would close the connection and lose every frame
                # behind it: a gap the pair's reorder buffer would wait on forever)
                _logger.error("channel batch failed", peer=self._peer, error=repr(exc)[:300])

    def _handshake(self, body: bytes) -> bool:
        # the token is compared before anything of the stream is unpickled
        token_len = body[0] if body else 0
        token = body[1:1 + token_len].decode("ascii", "replace")
        if not hmac.compare_digest(token, self._token):
            self._drop("bad token")
            return False
        peer, address = pickle.loads(body[1 + token_len:])
        self._peer = peer
        self._on_peer(peer, (address[0], int(address[1])))
        return True

    def _drop(self, why: str) -> None:
        _logger.warning("channel refused", why=why)
        if self._transport is not None:
            self._transport.close()


class _Outbound(asyncio.Protocol):
    """This host's stream to one peer."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True


class Channels:
    """A host's channels: its listening server and its streams to peers."""

    def __init__(self, host_id: str, token: str) -> None:
        self.host_id = host_id
        self._token = token
        self.address: Address | None = None
        self._server: asyncio.AbstractServer | None = None
        self._out: dict[str, _Outbound] = {}
        self._connecting: dict[str, asyncio.Task[None]] = {}
        self._known: dict[str, Address] = {}
        self.sent = 0  # batches sent over channels (for metrics and tests)

    async def serve(self, ip: str, on_batch: OnBatch) -> Address:
        """Listen on `ip` (any free port); batches that arrive go to `on_batch`."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Inbound(self._token, on_batch, self.learn), ip, 0)
        sock = self._server.sockets[0].getsockname()
        self.address = (sock[0], int(sock[1]))
        return self.address

    def learn(self, peer: str, address: Address) -> None:
        """`peer` listens at `address`: connect to it in the background (once)."""
        if peer == self.host_id or peer in self._known or self.address is None:
            return
        self._known[peer] = address
        loop = asyncio.get_running_loop()
        self._connecting[peer] = loop.create_task(self._connect(peer, address))

    async def _connect(self, peer: str, address: Address) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, proto = await loop.create_connection(_Outbound, address[0], address[1])
        except OSError as exc:
            _logger.debug("channel connect failed", peer=peer, error=str(exc))
            return
        finally:
            self._connecting.pop(peer, None)
        if peer not in self._known:  # forgotten meanwhile
            if proto.transport is not None:
                proto.transport.close()
            return
        token = self._token.encode("ascii")
        hello = bytes([len(token)]) + token + pickle.dumps((self.host_id, self.address))
        assert proto.transport is not None
        proto.transport.write(_HEADER.pack(len(hello)) + hello)
        self._out[peer] = proto

    def send(self, peer: str, sender: str, first: int, items: list[Any]) -> bool:
        """Write one batch to `peer`'s stream; False if there is no live one (use Ray)."""
        proto = self._out.get(peer)
        if proto is None:
            return False
        transport = proto.transport
        if proto.lost or transport is None or transport.is_closing():
            del self._out[peer]
            return False
        transport.write(frame((sender, first, items)))
        self.sent += 1
        return True

    def forget(self, peer: str) -> None:
        """`peer` is gone: close its stream."""
        self._known.pop(peer, None)
        task = self._connecting.pop(peer, None)
        if task is not None:
            task.cancel()
        proto = self._out.pop(peer, None)
        if proto is not None and proto.transport is not None:
            proto.transport.close()

    def close(self) -> None:
        for peer in list(self._out):
            self.forget(peer)
        if self._server is not None:
            self._server.close()
