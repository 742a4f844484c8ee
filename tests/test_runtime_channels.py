"""Direct channels between hosts (runtime/ray/channels.py): framing, the token that guards
unpickling, order across the switch from Ray calls to a channel, and that a Ray runtime
really carries its host-to-host traffic over them (or does not, when told to)."""

from __future__ import annotations

import asyncio
import pickle
import struct
from typing import Any

import pytest
import ray
from runtime_helpers import collector

from sediment.runtime import api
from sediment.runtime.process import Process
from sediment.runtime.ray.channels import Channels, _Frames, frame
from sediment.runtime.ray.transport import NAMESPACE

TOKEN = "0123456789abcdef0123456789abcdef"


def test_frames_come_out_whole_however_the_stream_is_cut() -> None:
    batches = [("h1", i, [(f"p{i}", bytes(i * 37 % 300))]) for i in range(40)]
    stream = b"".join(frame(b) for b in batches)
    for step in (1, 3, 7, 64, 1000, len(stream)):
        frames = _Frames()
        got = []
        for at in range(0, len(stream), step):
            got.extend(pickle.loads(body) for body in frames.feed(stream[at:at + step]))
        assert got == batches


def test_a_frame_larger_than_the_bound_is_refused() -> None:
    with pytest.raises(ValueError, match="frame of"):
        _Frames().feed(struct.pack("!I", (1 << 30) + 1) + b"x")


EXPLOITED: list[str] = []


def _exploit() -> None:
    EXPLOITED.append("unpickled")


class _Hostile:
    def __reduce__(self) -> Any:
        return (_exploit, ())


async def _serve_and_send(token: str, batches: int) -> tuple[list[Any], list[Any]]:
    got: list[Any] = []
    peers: list[Any] = []
    server = Channels("receiver", TOKEN)
    server.learn = lambda peer, address: peers.append((peer, address))  # type: ignore[method-assign]
    address = await server.serve("127.0.0.1", lambda s, f, items: got.append((s, f, items)))
    client = Channels("sender", token)
    client.address = ("127.0.0.1", 1)  # where it would listen; not dialled in this test
    client.learn("receiver", address)
    for _ in range(100):
        if client.send("receiver", "sender", 0, []):
            break
        await asyncio.sleep(0.01)
    for i in range(1, batches + 1):
        assert client.send("receiver", "sender", i, [("p", _Hostile())]) or token != TOKEN
    await asyncio.sleep(0.2)
    client.close()
    server.close()
    return got, peers


def test_a_stream_with_the_cluster_token_delivers_its_batches_in_order() -> None:
    EXPLOITED.clear()
    got, peers = asyncio.run(_serve_and_send(TOKEN, 5))
    assert [first for _, first, _ in got] == [0, 1, 2, 3, 4, 5]
    assert peers == [("sender", ("127.0.0.1", 1))]
    assert EXPLOITED == ["unpickled"] * 5  # a trusted peer's objects are loaded


def test_a_stream_without_the_token_is_closed_before_anything_is_unpickled() -> None:
    EXPLOITED.clear()
    got, peers = asyncio.run(_serve_and_send("f" * 32, 5))
    assert got == [] and peers == [] and EXPLOITED == []


# --- on Ray ---------------------------------------------------------------------------


async def _burst(ctx: Process, n: int) -> list[Any]:
    sink = await ctx.spawn(collector, node="n2")
    for i in range(n):
        ctx.send(sink, i)
        if i % 50 == 0:
            await ctx.sleep(0.01)  # the channel comes up somewhere in the middle
    return [await ctx.call(sink, "get"), sink.host]


def _received(runtime: Any, host: str) -> dict[str, int]:
    handle = ray.get_actor(runtime.config.actor_name(host), namespace=NAMESPACE)
    info: dict[str, Any] = ray.get(handle.info.remote())
    return dict(info["received"])


@pytest.mark.parametrize("mode", ["tcp", "ray"])
def test_hosts_talk_over_channels_unless_told_to_use_ray_calls(
        ray_cluster: Any, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    monkeypatch.setenv("SEDIMENT_CHANNELS", mode)
    runtime = api.start("ray", nodes=("n1", "n2"), reap_delay=1.0, warm_pool=0,
                        default_host="main")
    try:
        seen, sink_host = runtime.run(_burst, 500)
        assert seen == list(range(500))  # FIFO across the switch from Ray to the channel
        received = _received(runtime, sink_host)
        if mode == "tcp":
            assert received.get("channel", 0) > 0
        else:
            assert "channel" not in received and received.get("batch", 0) > 0
    finally:
        runtime.shutdown()
