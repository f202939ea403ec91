"""Anthropic Messages API through the `anthropic` SDK.

System prompts travel in `system`, tool calls are `tool_use` content blocks and tool
results are `tool_result` blocks in the next user message (several results of one
step share that message, since the API wants user and assistant to alternate).
Streaming: text arrives as `text_delta`, tool arguments as `input_json_delta`
fragments of the block at the same index; input tokens come with `message_start`,
output tokens with the last `message_delta`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import anthropic

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

DEFAULT_MAX_TOKENS = 4096  # the Messages API requires max_tokens


class AnthropicChatModel:
    def __init__(
        self,
        client: anthropic.AsyncAnthropic,
        model_id: str,
        *,
        provider: str = "anthropic",
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> None:
        self.name = model_id
        self._client = client
        self._provider = provider
        self._temperature = temperature
        self._max_tokens = max_tokens or DEFAULT_MAX_TOKENS

    async def stream(self, messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> AsyncIterator[ModelChunk]:
        system, turns = to_anthropic(messages)
        options: dict[str, Any] = {}
        if system:
            options["system"] = system
        if tools:
            options["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools
            ]
        if self._temperature is not None:
            # Not a keyword of this SDK version's create(); the API still takes it in the body.
            options["extra_body"] = {"temperature": self._temperature}
        calls: dict[int, tuple[str, str, list[str]]] = {}
        input_tokens = output_tokens = 0
        try:
            create: Any = self._client.messages.create  # Any: the SDK's overloads cannot follow **options
            stream = await create(model=self.name, max_tokens=self._max_tokens, messages=turns, stream=True, **options)
            event: Any
            async with stream:  # closes the HTTP response when the consumer stops early
                async for event in stream:
                    if event.type == "message_start":
                        usage = event.message.usage
                        input_tokens = (
                            usage.input_tokens
                            + (usage.cache_creation_input_tokens or 0)
                            + (usage.cache_read_input_tokens or 0)
                        )
                        output_tokens = usage.output_tokens or 0
                    elif event.type == "content_block_start" and event.content_block.type == "tool_use":
                        calls[event.index] = (event.content_block.id, event.content_block.name, [])
                    elif event.type == "content_block_delta":
                        if event.delta.type == "text_delta":
                            yield TextDelta(event.delta.text)
                        elif event.delta.type == "input_json_delta" and event.index in calls:
                            calls[event.index][2].append(event.delta.partial_json)
                    elif event.type == "message_delta":
                        output_tokens = event.usage.output_tokens or output_tokens
        except Exception as exc:
            raise classify(self._provider, exc) from exc
        for index in sorted(calls):
            call_id, name, fragments = calls[index]
            arguments, error = parse_arguments("".join(fragments))
            yield ToolCallChunk(ToolCallRequest(call_id, name, arguments, error))
        yield UsageChunk(input_tokens, output_tokens)


def to_anthropic(messages: Sequence[ChatMessage]) -> tuple[str, list[dict[str, Any]]]:
    """(system text, alternating user/assistant turns with content blocks)."""
    system = "\n\n".join(m.content for m in messages if m.role == "system" and m.content)
    turns: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            continue
        blocks: list[dict[str, Any]]
        if message.role == "tool":
            role = "user"
            result: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.tool_call_id}
            result["content"] = message.content or "(empty)"
            if message.content.startswith("error:"):
                result["is_error"] = True
            blocks = [result]
        elif message.role == "assistant":
            role = "assistant"
            blocks = [{"type": "text", "text": message.content}] if message.content else []
            blocks += [
                {"type": "tool_use", "id": c.id, "name": c.name, "input": dict(c.arguments)} for c in message.tool_calls
            ]
            if not blocks:
                continue  # an empty assistant turn is rejected by the API
        else:
            role = "user"
            blocks = [{"type": "text", "text": message.content}]
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    return system, turns
