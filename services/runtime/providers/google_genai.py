"""Google Gemini through the `google-genai` SDK (streamGenerateContent over SSE).

Roles are "user" and "model"; the system prompt goes in `system_instruction`; a tool
call is a `function_call` part (sent whole, not in fragments, and often without an
id, so one is made up) and its result a `function_response` part. Usage metadata is
cumulative, so the last chunk's counts are the call's.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

from google import genai
from google.genai import types

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


class GoogleChatModel:
    def __init__(
        self,
        client: genai.Client,
        model_id: str,
        *,
        provider: str = "google",
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> None:
        self.name = model_id
        self._client = client
        self._provider = provider
        self._temperature = temperature
        self._max_tokens = max_tokens

    async def stream(self, messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> AsyncIterator[ModelChunk]:
        system, contents = to_google(messages)
        config = types.GenerateContentConfig(
            system_instruction=system or None,
            temperature=self._temperature,
            max_output_tokens=self._max_tokens,
            tools=[
                types.Tool(
                    function_declarations=[
                        types.FunctionDeclaration(
                            name=t.name, description=t.description, parameters_json_schema=dict(t.parameters)
                        )
                        for t in tools
                    ]
                )
            ]
            if tools
            else None,
            # The loop owns function calling: never let the SDK call Python functions itself.
            automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
        )
        calls: list[ToolCallRequest] = []
        input_tokens = output_tokens = 0
        try:
            stream: Any = await self._client.aio.models.generate_content_stream(
                model=self.name, contents=contents, config=config
            )
            async with contextlib.aclosing(stream):  # closes the HTTP response when the consumer stops early
                async for chunk in stream:
                    if chunk.usage_metadata is not None:
                        meta = chunk.usage_metadata
                        input_tokens = meta.prompt_token_count or input_tokens
                        output_tokens = (meta.candidates_token_count or 0) + (meta.thoughts_token_count or 0)
                    content = chunk.candidates[0].content if chunk.candidates else None
                    for part in (content.parts if content is not None else None) or ():
                        if part.function_call is not None:
                            function = part.function_call
                            call_id = function.id or f"call_{uuid.uuid4().hex[:12]}"
                            calls.append(ToolCallRequest(call_id, function.name or "", dict(function.args or {})))
                        elif part.text and not part.thought:
                            yield TextDelta(part.text)
        except Exception as exc:
            raise classify(self._provider, exc) from exc
        for call in calls:
            yield ToolCallChunk(call)
        yield UsageChunk(input_tokens, output_tokens)


def to_google(messages: Sequence[ChatMessage]) -> tuple[str, list[types.Content]]:
    system = "\n\n".join(m.content for m in messages if m.role == "system" and m.content)
    contents: list[types.Content] = []
    for message in messages:
        parts: list[types.Part]
        if message.role == "system":
            continue
        if message.role == "tool":
            role = "user"
            key = "error" if message.content.startswith("error:") else "result"
            response: dict[str, Any] = {key: message.content}
            parts = [
                types.Part(
                    function_response=types.FunctionResponse(
                        id=message.tool_call_id or None, name=message.name, response=response
                    )
                )
            ]
        elif message.role == "assistant":
            role = "model"
            parts = [types.Part(text=message.content)] if message.content else []
            parts += [
                types.Part(function_call=types.FunctionCall(id=c.id, name=c.name, args=dict(c.arguments)))
                for c in message.tool_calls
            ]
            if not parts:
                continue
        else:
            role = "user"
            parts = [types.Part(text=message.content)]
        if contents and contents[-1].role == role and contents[-1].parts is not None:
            contents[-1].parts.extend(parts)
        else:
            contents.append(types.Content(role=role, parts=parts))
    return system, contents
