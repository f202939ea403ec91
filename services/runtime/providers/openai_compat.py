"""OpenAI-compatible chat completions through the `openai` SDK.

Serves OpenAI and everything that speaks its wire format at another `base_url`:
DeepSeek, vLLM, Ollama, llama.cpp server. Streams text deltas as they arrive;
tool calls arrive as fragments keyed by index (id and name first, then pieces of
the JSON arguments) and are emitted whole once the stream ends; usage comes in a
last chunk without choices (`stream_options.include_usage`).

The SDK makes the request (auth, base_url, headers, retries of the connection, errors
by status), but the stream's chunks are read as plain JSON: building the SDK's typed
model of every chunk was most of the runtime's CPU on a streamed reply (62% of its
samples in the hot-path profile, bench/results/hotpath.profile.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import openai

from services.lib.llm import (
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

# How long the rest of a response body is read after its [DONE] to keep its connection.
DRAIN_AFTER_DONE_S = 1.0


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
        # The conversation and the tool schemas go as `extra_body`, which the SDK merges into the JSON body
        # as given. As `messages=` and `tools=` the SDK would first walk them against its typed parameters
        # (`async_maybe_transform`): for values that already are wire JSON, a no-op that delayed every
        # model request by 0.5-1 ms (bench/results/hotpath.notes.md). `messages=[]` stays: it is required.
        body: dict[str, Any] = {"messages": [to_openai(m) for m in messages]}
        if tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
                }
                for t in tools
            ]
        options: dict[str, Any] = {}
        if self._temperature is not None:
            options["temperature"] = self._temperature
        if self._max_tokens is not None:
            options["max_tokens"] = self._max_tokens
        pending: dict[int, _PendingCall] = {}
        usage: UsageChunk | None = None
        try:
            # Typed as Any: the SDK's overloads cannot follow **options.
            create: Any = self._client.chat.completions.with_streaming_response.create
            request = create(
                model=self.name,
                messages=[],
                stream=True,
                stream_options={"include_usage": True},
                extra_body=body,
                **options,
            )
            async with request as response:  # closes the HTTP response when the consumer stops early
                async for chunk in _chunks(response):
                    if chunk.get("usage"):
                        found = chunk["usage"]
                        usage = UsageChunk(found.get("prompt_tokens") or 0, found.get("completion_tokens") or 0)
                    choices = chunk.get("choices")
                    if not choices:
                        continue
                    delta = choices[0].get("delta") or {}
                    if delta.get("content"):
                        yield TextDelta(delta["content"])
                    for part in delta.get("tool_calls") or ():
                        call = pending.setdefault(part.get("index", 0), _PendingCall())
                        call.id = part.get("id") or call.id
                        function = part.get("function")
                        if function:
                            call.name = function.get("name") or call.name
                            if function.get("arguments"):
                                call.arguments.append(function["arguments"])
        except Exception as exc:
            raise classify(self._provider, exc) from exc
        for index in sorted(pending):
            call = pending[index]
            arguments, error = parse_arguments("".join(call.arguments))
            yield ToolCallChunk(ToolCallRequest(call.id or f"call_{index}", call.name, arguments, error))
        if usage is not None:
            yield usage


async def _chunks(response: Any) -> AsyncIterator[dict[str, Any]]:
    """The stream's chunks as JSON objects: server-sent events' data lines, until [DONE].

    A chunk carrying an `error` (a provider failing mid-stream) raises the SDK's APIError,
    as the SDK's own stream does, so it is classified like any other failure.
    """
    data: list[str] = []
    lines = response.iter_lines()
    async for line in lines:
        if line.startswith("data:"):
            data.append(line[5:].lstrip(" "))
            continue
        if line or not data:
            continue  # other fields (event:, id:, comments) carry nothing for chat completions
        payload, data = "\n".join(data), []
        if payload.startswith("[DONE]"):
            # The body ends right after [DONE]: read it to its end, so that the connection goes back
            # to the pool (a response closed unread closes its connection: a new one per model call).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(DRAIN_AFTER_DONE_S):
                    async for _ in lines:
                        pass
            return
        chunk = json.loads(payload)
        if isinstance(chunk, dict) and chunk.get("error"):
            error = chunk["error"]
            message = error.get("message") if isinstance(error, dict) else None
            raise openai.APIError(
                str(message or "An error occurred during streaming"), response.http_request, body=error
            )
        if isinstance(chunk, dict):
            yield chunk


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
