"""Stopping background tasks on shutdown, boundedly.

A task that does not end when cancelled (a call that swallows the cancel: seen in redis-py's
pub/sub read, and once in a runtime's turn on a busy machine) must not hold a replica's
shutdown for ever: whoever takes its work over goes on. It is left behind with a warning that
names where it was stuck, so the cause can be found.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable

from services.kit.logging import log

STOP_S = 10.0  # how long stopped tasks get to end before they are left behind


async def stop(tasks: Iterable[asyncio.Task[object]], what: str, timeout_s: float = STOP_S) -> None:
    """Cancel `tasks` and wait until they ended, at most `timeout_s`; log the ones that did not."""
    pending = {task for task in tasks if not task.done()}
    for task in pending:
        task.cancel()
    await wait(pending, what, timeout_s)


async def wait(tasks: Iterable[asyncio.Task[object]], what: str, timeout_s: float = STOP_S) -> None:
    """Wait until `tasks` ended, at most `timeout_s`; log the ones that did not, with where each is stuck."""
    pending = set(tasks)
    if not pending:
        return
    done, left = await asyncio.wait(pending, timeout=timeout_s)
    for task in done:
        if not task.cancelled():
            task.exception()  # retrieved: a stopped task's failure is not news at shutdown
    for task in left:
        log.warning(
            f"{what}: a task did not end within {timeout_s:g}s of being stopped; left behind",
            task=task.get_name(),
            at=where(task),
        )


async def first_of(*waits: Awaitable[object]) -> None:
    """Return when the first of `waits` is done; the others are cancelled (all of them if this is)."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def where(task: asyncio.Task[object]) -> str:
    """The chain of awaits a task is suspended in, outermost first."""
    parts: list[str] = []
    awaited: object = task.get_coro()
    while awaited is not None and len(parts) < 16:
        frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
        if frame is not None:
            parts.append(f"{frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno} {frame.f_code.co_name}")
        awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
    return " > ".join(parts)
