"""The one timing code every system in the benchmarks is measured with.

Dependency-free, so the LangGraph peer's own virtualenv can import it too.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterable, Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class Timing:
    """One streamed turn."""

    first_event: float  # seconds from the request to the first streamed event of any kind
    first_token: float  # ... to the first event carrying model text
    full: float  # ... to the end of the stream
    events: int


async def time_stream(start: Callable[[], AsyncIterable[Any]], is_token: Callable[[Any], bool]) -> Timing:
    """Time a streamed turn: `start()` sends the request and yields its events."""
    started = time.perf_counter()
    first = token = 0.0
    events = 0
    async for event in start():
        now = time.perf_counter()
        events += 1
        first = first or now
        if not token and is_token(event):
            token = now
    end = time.perf_counter()
    return Timing((first or end) - started, (token or end) - started, end - started, events)
