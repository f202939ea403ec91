"""Carries CancelTurn to the gateway replica that drives the turn, over Redis pub/sub.

Any replica may receive a cancel; only the one running the turn can stop it (it holds
the RunTurn stream to the runtime replica doing the work). Publishing reaches every
replica (on a cluster, every replica listens on the primary of the channel's slot, and
cancels are published there: services/kit/redis_pool.py); the owner acts, the others
ignore it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

from services.kit.errors import Unavailable
from services.kit.logging import log
from services.kit.redis_pool import REDIS_ERRORS, follow_broadcast, pooled_client, publish

OnCancel = Callable[[str, str], Awaitable[object]]


class CancelRelay:
    def __init__(self, url: str, prefix: str, on_cancel: OnCancel, timeout_s: float = 2.0):
        self._redis = pooled_client(url, timeout_s, pool_size=4)
        self.channel = f"{prefix}cancel"
        self._on_cancel = on_cancel
        self._task: asyncio.Task[None] | None = None
        self._subscribed = asyncio.Event()

    async def start(self) -> None:
        self._task = asyncio.create_task(
            follow_broadcast(self._redis, self.channel, self._handle, "cancel relay", self._subscribed)
        )
        await asyncio.wait_for(self._subscribed.wait(), 5)

    async def publish(self, session_id: str, turn_id: str) -> int:
        """Ask every replica to cancel `turn_id`; returns how many replicas heard it."""
        try:
            heard = await publish(self._redis, self.channel, json.dumps({"session_id": session_id, "turn_id": turn_id}))
        except REDIS_ERRORS as exc:
            raise Unavailable(f"cannot relay the cancel: {exc}", metadata={"dependency": "redis"}) from exc
        return heard

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
