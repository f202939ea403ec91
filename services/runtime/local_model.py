"""`cogmesh-local`: the built-in deterministic chat model (no network, no key).

It is the default model, so the whole suite can be demonstrated and tested offline,
and it is cheap enough to benchmark the agent loop's own overhead. Rules, applied to
the conversation it is given:

a. The conversation ends with tool results (role "tool"): it answers from them, one
   sentence per result, in order. A calculator result becomes
   "<expression> = <result>." with the expression taken from the assistant tool call
   whose id matches the result's tool_call_id; a result starting with "error:"
   becomes 'The <tool> tool failed: "<error>".'; any other result becomes
   "The <tool> tool returned: <content>".
b0. Otherwise, if the last user message mentions an offered tool as "@<name>" (at its
   start or after a space), it calls that tool: with the JSON object that follows the
   mention as arguments, else, when the tool's schema has exactly one required string
   property (ask_user's "prompt"), with the rest of the message as that property,
   else with {}. A rest of the message nested more than MAX_PARSE_DEPTH levels is not
   parsed (Python's json fails near 1,000): the call gets {} and an arguments error
   saying how deep, as from a provider adapter; shallower arguments are passed on as
   they are, for the loop to bound. The id is "call_" + the first 12 hex digits of
   sha256("<number of messages>:<name>:<JSON arguments>"); no text. This makes the
   built-in model exercise any tool: ask_user, client-side tools, delegation
   ("@task {"agent": ..., "task": ...}").
b. Otherwise, if the last user message contains an arithmetic expression
   (`calculator.find_expression`) and a tool named "calculator" is offered, it calls
   it: one tool call {"expression": <expression>} with the id
   "call_" + the first 12 hex digits of sha256("<number of messages>:<expression>"),
   and no text.
c. If there is an expression but no calculator on offer, it computes the result
   itself: "<expression> = <result>.", or "I could not compute <expression>: <error>."
d. Otherwise it echoes: 'You said: "<text>". I am cogmesh's built-in local model: I
   answer arithmetic with the calculator tool and echo everything else.' (whitespace
   in <text> collapsed). With `reply_tokens=N` this reply is replaced by exactly N
   tokens "tok0 tok1 ... tok<N-1>", one text delta per token.

Text is streamed in deltas of a few words (rule d with `reply_tokens`: one token per
delta) whose concatenation is exactly the reply. Every stream ends with one usage
chunk: input tokens = characters of all messages (content, tool names, JSON tool
arguments) // 4 + 1 per message; output tokens = characters of the reply or of the
tool call's JSON arguments // 4, at least 1 (with `reply_tokens=N`: N).
`delay_s` > 0 sleeps that long before every chunk to simulate a slow model; with 0
the stream never suspends. A conversation that is empty or has no user message is
rejected with ModelError(kind="invalid_request", retryable=False).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from services.kit.limits import depth_problem, json_text_depth
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
from services.runtime.calculator import (
    CALCULATOR_SCHEMA,
    CalculatorError,
    evaluate,
    find_expression,
    format_number,
)

LOCAL_MODEL_NAME = "cogmesh-local"
WORDS_PER_DELTA = 3
MAX_PARSE_DEPTH = 500  # far past the suite's bound (services.kit.limits), well within json's recursion

_ERROR_PREFIX = "error:"
_WORD_START = re.compile(r"(?<=\s)(?=\S)")
_MENTION = re.compile(r"(?:^|(?<=\s))@([A-Za-z0-9_][A-Za-z0-9_\-]*)")


class LocalModel:
    """The deterministic built-in model; see the module docstring for its rules."""

    name: str

    def __init__(self, *, delay_s: float = 0.0, reply_tokens: int | None = None) -> None:
        if delay_s < 0:
            raise ValueError(f"delay_s must be >= 0, got {delay_s}")
        if reply_tokens is not None and reply_tokens < 1:
            raise ValueError(f"reply_tokens must be >= 1, got {reply_tokens}")
        self.name = LOCAL_MODEL_NAME
        self._delay_s = delay_s
        self._reply_tokens = reply_tokens

    async def stream(self, messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> AsyncIterator[ModelChunk]:
        for i, chunk in enumerate(self._respond(messages, tools)):
            if self._delay_s > 0:
                await asyncio.sleep(self._delay_s)
            elif i % 64 == 63:
                await asyncio.sleep(0)  # a long reply must not starve the process's other turns (or a cancel)
            yield chunk

    def _respond(self, messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> list[ModelChunk]:
        user_text = _last_user_text(messages)
        input_tokens = sum(_message_chars(m) for m in messages) // 4 + len(messages)
        if messages[-1].role == "tool":
            return _text_reply(_answer_tool_results(messages), input_tokens)
        mentioned = _mentioned_call(user_text, tools, len(messages))
        if mentioned is not None:
            return [ToolCallChunk(mentioned), UsageChunk(input_tokens, max(1, len(_json(mentioned.arguments)) // 4))]
        expression = find_expression(user_text)
        if expression is not None and any(t.name == CALCULATOR_SCHEMA.name for t in tools):
            digest = hashlib.sha256(f"{len(messages)}:{expression}".encode()).hexdigest()
            arguments = {"expression": expression}
            call = ToolCallRequest(id=f"call_{digest[:12]}", name=CALCULATOR_SCHEMA.name, arguments=arguments)
            return [ToolCallChunk(call), UsageChunk(input_tokens, max(1, len(_json(arguments)) // 4))]
        if expression is not None:
            return _text_reply(_compute(expression), input_tokens)
        if self._reply_tokens is not None:
            deltas: list[ModelChunk] = [TextDelta(f" tok{i}" if i else "tok0") for i in range(self._reply_tokens)]
            return [*deltas, UsageChunk(input_tokens, self._reply_tokens)]
        said = " ".join(user_text.split())
        reply = (
            f'You said: "{said}". I am cogmesh\'s built-in local model: '
            "I answer arithmetic with the calculator tool and echo everything else."
        )
        return _text_reply(reply, input_tokens)


def _mentioned_call(text: str, tools: Sequence[ToolSchema], message_count: int) -> ToolCallRequest | None:
    """Rule b0: the first "@<tool>" mention of an offered tool, as a call of that tool."""
    offered = {tool.name: tool for tool in tools}
    for match in _MENTION.finditer(text):
        tool = offered.get(match.group(1))
        if tool is None:
            continue
        rest = text[match.end() :].strip()
        arguments: dict[str, Any] = {}
        error = ""
        if rest.startswith("{"):
            parsed: Any = None
            depth = json_text_depth(rest)
            if depth > MAX_PARSE_DEPTH:  # refused unparsed, as a provider adapter would (tool_args)
                error = depth_problem(depth)
            else:
                with contextlib.suppress(json.JSONDecodeError):
                    parsed, _ = json.JSONDecoder().raw_decode(rest)
            if isinstance(parsed, dict):
                arguments = parsed
        elif rest:
            single = _single_string_property(tool.parameters)
            if single is not None:
                arguments = {single: rest}
        digest = hashlib.sha256(f"{message_count}:{tool.name}:{_json(arguments)}".encode()).hexdigest()
        return ToolCallRequest(id=f"call_{digest[:12]}", name=tool.name, arguments=arguments, arguments_error=error)
    return None


def _single_string_property(schema: Mapping[str, Any]) -> str | None:
    required = schema.get("required") or []
    properties = schema.get("properties") or {}
    if len(required) != 1 or not isinstance(properties, Mapping):
        return None
    spec = properties.get(required[0])
    return str(required[0]) if isinstance(spec, Mapping) and spec.get("type") == "string" else None


def _last_user_text(messages: Sequence[ChatMessage]) -> str:
    if not messages:
        raise ModelError("no messages: the conversation is empty", kind="invalid_request", retryable=False)
    for message in reversed(messages):
        if message.role == "user":
            return message.content
    raise ModelError("no user message in the conversation", kind="invalid_request", retryable=False)


def _answer_tool_results(messages: Sequence[ChatMessage]) -> str:
    trailing: list[ChatMessage] = []
    for message in reversed(messages):
        if message.role != "tool":
            break
        trailing.append(message)
    calls = {call.id: call for m in messages if m.role == "assistant" for call in m.tool_calls}
    return " ".join(_answer_tool_result(result, calls.get(result.tool_call_id)) for result in reversed(trailing))


def _answer_tool_result(result: ChatMessage, call: ToolCallRequest | None) -> str:
    name = call.name if call is not None else (result.name or "unknown")
    content = result.content.strip()
    if content.startswith(_ERROR_PREFIX):
        return f'The {name} tool failed: "{content.removeprefix(_ERROR_PREFIX).strip()}".'
    expression = call.arguments.get("expression") if call is not None else None
    if name == CALCULATOR_SCHEMA.name and isinstance(expression, str):
        return f"{expression} = {content}."
    return f"The {name} tool returned: {content}"


def _compute(expression: str) -> str:
    try:
        return f"{expression} = {format_number(evaluate(expression))}."
    except CalculatorError as exc:
        return f"I could not compute {expression}: {exc}."


def _text_reply(reply: str, input_tokens: int) -> list[ModelChunk]:
    words = _WORD_START.split(reply)
    deltas: list[ModelChunk] = [
        TextDelta("".join(words[i : i + WORDS_PER_DELTA])) for i in range(0, len(words), WORDS_PER_DELTA)
    ]
    return [*deltas, UsageChunk(input_tokens, max(1, len(reply) // 4))]


def _message_chars(message: ChatMessage) -> int:
    return len(message.content) + sum(len(c.name) + len(_json(c.arguments)) for c in message.tool_calls)


def _json(arguments: Mapping[str, Any]) -> str:
    # default=str: arguments from other providers may hold non-JSON values; this is
    # only a size estimate.
    return json.dumps(dict(arguments), sort_keys=True, separators=(",", ":"), default=str)
