"""The name cache behind `whereis` on Ray (`runtime/ray/names.py`): a remembered answer
lasts only while its process lives, and never longer than MAX_AGE."""

from __future__ import annotations

from typing import Any

from runtime_helpers import echo, eventually

from sediment.runtime.pid import Pid
from sediment.runtime.process import Process
from sediment.runtime.ray.names import NameCache


class Followed:
    """Stands in for following a pid's `run()`: `end(pid)` is its process ending."""

    def __init__(self) -> None:
        self.ended: set[str] = set()
        self.follows: list[str] = []

    def __call__(self, pid: Pid) -> Any:
        self.follows.append(pid.id)
        return lambda: pid.id in self.ended

    def end(self, pid: Pid) -> None:
        self.ended.add(pid.id)


A, B = Pid("n1", "a"), Pid("n2", "b")


def test_an_answer_is_kept_until_its_process_ends() -> None:
    followed = Followed()
    cache = NameCache(followed, max_age=10.0)
    assert cache.get("server", 0.0) is None
    cache.put("server", A, 0.0)
    assert cache.get("server", 1.0) == A
    followed.end(A)
    assert cache.get("server", 1.1) is None  # the next lookup goes to the registry
    cache.put("server", B, 1.2)
    assert cache.get("server", 1.3) == B


def test_an_answer_is_not_trusted_past_its_age() -> None:
    cache = NameCache(Followed(), max_age=2.0)
    cache.put("server", A, 0.0)
    assert cache.get("server", 2.0) == A
    assert cache.get("server", 2.01) is None  # a name its live holder may have given up


def test_one_follow_per_pid_however_many_names_it_holds() -> None:
    followed = Followed()
    cache = NameCache(followed)
    cache.put("x", A, 0.0)
    cache.put("y", A, 0.0)
    cache.put("x", A, 0.5)  # looked up again after expiry
    assert followed.follows == ["a"]
    cache.forget("x")
    assert cache.get("y", 0.6) == A
    followed.end(A)
    cache.put("y", A, 0.7)  # a dead pid answered again (the registry had not noticed yet)
    assert followed.follows == ["a", "a"]  # followed afresh: its end is seen again


def test_the_cache_is_bounded_oldest_first() -> None:
    cache = NameCache(Followed(), max_entries=3)
    for i in range(5):
        cache.put(f"n{i}", Pid("n1", str(i)), float(i))
    assert len(cache) == 3
    assert cache.get("n0", 5.0) is None and cache.get("n1", 5.0) is None
    assert cache.get("n4", 5.0) == Pid("n1", "4")


async def _lookups(ctx: Process, name: str) -> None:
    """Answers each "where" with its own lookup of `name` (repeated: cached on Ray)."""
    while True:
        msg = await ctx.receive()
        ctx.send(msg[1], ("at", await ctx.whereis(name)))


async def _ask(ctx: Process, looker: Pid) -> Any:
    ctx.send(looker, ("where", ctx.self()))
    return (await ctx.receive(timeout=10))[1]


def test_a_process_that_looked_a_name_up_finds_its_next_holder(rt: Any) -> None:
    first = rt.spawn(echo, name="server", node="n2")
    looker = rt.spawn(_lookups, "server", node="n1")
    assert rt.run(_ask, looker) == first
    assert rt.run(_ask, looker) == first  # the remembered answer
    rt.kill(first)
    assert eventually(rt, lambda: rt.run(_ask, looker) is None)
    second = rt.spawn(echo, name="server", node="n3")
    assert eventually(rt, lambda: rt.run(_ask, looker) == second)
    assert rt.call("server", 1) == ("echo", 1)
