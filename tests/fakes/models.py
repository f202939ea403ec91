"""A scripted chat model: plays the steps a test gives it, and records what each call was offered."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from services.lib.llm import (
    ChatMessage,
    ModelChunk,
    ModelError,
    TextDelta,
    ToolCallChunk,
    ToolCallRequest,
    ToolSchema,
    UsageChunk,
)

Step = list[ModelChunk] | ModelError | tuple[list[ModelChunk], ModelError]


@dataclass
class ScriptedModel:
    """One scripted step per call (a chunk list, an error, or chunks then an error); "done" when out of steps."""

    steps: list[Step]
    name: str = "scripted"
    calls: list[tuple[list[ChatMessage], list[str]]] = field(default_factory=list)
    delay_s: float = 0.0

    async def stream(self, messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> AsyncIterator[ModelChunk]:
        self.calls.append((list(messages), [t.name for t in tools]))
        step = self.steps.pop(0) if self.steps else [TextDelta("done"), UsageChunk(1, 1)]
        if isinstance(step, ModelError):
            raise step
        chunks, error = step if isinstance(step, tuple) else (step, None)
        for chunk in chunks:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            yield chunk
        if error is not None:
            raise error


def text(*parts: str, usage: tuple[int, int] = (10, 5)) -> list[ModelChunk]:
    return [*(TextDelta(p) for p in parts), UsageChunk(*usage)]


def calls(*requests: tuple[str, dict[str, Any]], usage: tuple[int, int] = (10, 5)) -> list[ModelChunk]:
    return [*(ToolCallChunk(ToolCallRequest(f"c{i}", n, a)) for i, (n, a) in enumerate(requests)), UsageChunk(*usage)]
