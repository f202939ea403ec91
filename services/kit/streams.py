"""Batching for server streams: per-message cost dominates Python gRPC throughput,
so whatever queued up while the last message was being written goes out together."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TypeVar

T = TypeVar("T")
_DONE = object()


async def batched(source: AsyncIterator[T], max_batch: int = 256) -> AsyncIterator[list[T]]:
    """Run `source` in its own task and yield its items in lists of whatever has queued up.

    Errors raised by `source` are re-raised here; closing this generator cancels `source`.
    """
    queue: asyncio.Queue[object] = asyncio.Queue()

    async def pump() -> None:
        try:
            async for item in source:
                queue.put_nowait(item)
        finally:
            queue.put_nowait(_DONE)

    task = asyncio.create_task(pump())
    try:
        done = False
        while not done:
            batch: list[T] = []
            item = await queue.get()
            while True:
                if item is _DONE:
                    done = True
                    break
                batch.append(item)  # type: ignore[arg-type]
                if len(batch) >= max_batch or queue.empty():
                    break
                item = queue.get_nowait()
            if batch:
                yield batch
        await task  # surfaces the source's exception, if any
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
