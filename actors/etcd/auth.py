"""etcd's auth on the wire. Not built yet: auth is never enabled, so every request is
served as etcd serves one with auth disabled."""

from __future__ import annotations

from typing import Any

from sediment.actors.kv.types import Range


class NoAuth:
    async def check_range(self, request: Range) -> None:
        return None

    async def wrap_write(self, command: Any) -> Any:
        return command


__all__ = ["NoAuth"]
