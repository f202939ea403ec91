"""Carries CancelTurn to the gateway replica that drives the turn, over Redis pub/sub.

Any replica may receive a cancel; only the one running the turn can stop it (it holds
the RunTurn stream to the runtime replica doing the work). Publishing reaches every
replica; the owner acts, the others ignore it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from services.kit.errors import Unavailable
from services.kit.logging import log

OnCancel = Callable[[str, str], Awaitable[object]]


class CancelRelay:
    def __init__(self, url: str, prefix: str, on_cancel: OnCancel, timeout_s: float = 2.0):
        self._redis = aioredis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        self._listener = aioredis.Redis.from_url(url, socket_timeout=None, socket_connect_timeout=timeout_s)
        self.channel = f"{prefix}cancel"
        self._on_cancel = on_cancel
        self._task: asyncio.Task[None] | None = None
        self._subscribed = asyncio.Event()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._listen())
        await asyncio.wait_for(self._subscribed.wait(), 5)

    async def publish(self, session_id: str, turn_id: str) -> int:
        """Ask every replica to cancel `turn_id`; returns how many replicas heard it."""
        try:
            heard = await self._redis.publish(self.channel, json.dumps({"session_id": session_id, "turn_id": turn_id}))
        except RedisError as exc:
            raise Unavailable(f"cannot relay the cancel: {exc}", metadata={"dependency": "redis"}) from exc
        return int(heard)

    async def _listen(self) -> None:
        backoff = 0.05
        while True:
            try:
                async with self._listener.pubsub() as pubsub:
                    await pubsub.subscribe(self.channel)
                    self._subscribed.set()
                    backoff = 0.05
                    async for message in pubsub.listen():
                        if message.get("type") == "message":
                            await self._handle(message["data"])
            except RedisError as exc:
                log.warning("cancel relay lost redis; resubscribing", error=str(exc))
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)

    async def _handle(self, data: Any) -> None:
        try:
            order = json.loads(data)
            await self._on_cancel(str(order["session_id"]), str(order["turn_id"]))
        except (ValueError, KeyError, TypeError):
            log.warning("ignored a malformed cancel message", data=str(data)[:200])

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._redis.aclose()
        await self._listener.aclose()
