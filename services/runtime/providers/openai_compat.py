"""OpenAI-compatible chat completions through the `openai` SDK.

Serves OpenAI and everything that speaks its wire format at another `base_url`:
DeepSeek, vLLM, Ollama, llama.cpp server. Streams text deltas as they arrive;
tool calls arrive as fragments keyed by index (id and name first, then pieces of
the JSON arguments) and are emitted whole once the stream ends; usage comes in a
last chunk without choices (`stream_options.include_usage`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import openai

from services.kit.llm import (
    ChatMessage,
    ModelChunk,
    TextDelta,
    ToolCallChunk,
    ToolCallRequest,
    ToolSchema,
    UsageChunk,
)
from services.runtime.providers.errors import classify
from services.runtime.providers.tool_args import parse_arguments


@dataclass
class _PendingCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class OpenAIChatModel:
    """One model id on one OpenAI-compatible endpoint."""

    def __init__(
        self,
        client: openai.AsyncOpenAI,
        model_id: str,
        *,
        provider: str = "openai",
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> None:
        self.name = model_id
        self._client = client
        self._provider = provider
        self._temperature = temperature
        self._max_tokens = max_tokens

    async def stream(self, messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> AsyncIterator[ModelChunk]:
        options: dict[str, Any] = {}
        if tools:
            options["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
                }
                for t in tools
            ]
        if self._temperature is not None:
            options["temperature"] = self._temperature
        if self._max_tokens is not None:
            options["max_tokens"] = self._max_tokens
        pending: dict[int, _PendingCall] = {}
        usage: UsageChunk | None = None
        try:
            # Typed as Any: the SDK's overloads cannot follow **options.
            create: Any = self._client.chat.completions.create
            stream = await create(
                model=self.name,
                messages=[to_openai(m) for m in messages],
                stream=True,
                stream_options={"include_usage": True},
                **options,
            )
            async with stream:  # closes the HTTP response when the consumer stops early
                async for chunk in stream:
                    if chunk.usage is not None:
                        usage = UsageChunk(chunk.usage.prompt_tokens or 0, chunk.usage.completion_tokens or 0)
                    if not chunk.choices:
                        continue
                    delta = chunk.choices[0].delta
                    if delta.content:
                        yield TextDelta(delta.content)
                    for part in delta.tool_calls or ():
                        call = pending.setdefault(part.index, _PendingCall())
                        call.id = part.id or call.id
                        if part.function is not None:
                            call.name = part.function.name or call.name
                            if part.function.arguments:
                                call.arguments.append(part.function.arguments)
        except Exception as exc:
            raise classify(self._provider, exc) from exc
        for index in sorted(pending):
            call = pending[index]
            arguments, error = parse_arguments("".join(call.arguments))
            yield ToolCallChunk(ToolCallRequest(call.id or f"call_{index}", call.name, arguments, error))
        if usage is not None:
            yield usage


def to_openai(message: ChatMessage) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        out["content"] = message.content or None
        out["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(dict(call.arguments))},
            }
            for call in message.tool_calls
        ]
    return out
