"""Waiting on a condition in a test: polled, bounded, and named when it does not come."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

TIMEOUT_S = 30.0  # generous: CI runs on a busy machine; a passing test never waits it out


async def until(condition: Callable[[], Any], what: str = "", timeout_s: float = TIMEOUT_S) -> None:
    """Wait for `condition()` to be true (checked every 10 ms), at most `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout_s:g}s: {what or condition}"
        await asyncio.sleep(0.01)
