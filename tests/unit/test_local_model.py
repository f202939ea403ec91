from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Sequence

import pytest

from services.lib.llm import (
    ChatMessage,
    ChatModel,
    ModelChunk,
    ModelError,
    TextDelta,
    ToolCallChunk,
    ToolCallRequest,
    ToolSchema,
    UsageChunk,
)
from services.runtime.calculator import CALCULATOR_SCHEMA
from services.runtime.local_model import LocalModel

WEATHER = ToolSchema("weather", "Current weather for a city.", {"type": "object", "properties": {}})
ECHO_TAIL = (
    "I am cogmesh's built-in local model: I answer arithmetic with the calculator tool and echo everything else."
)


def collect(model: ChatModel, messages: Sequence[ChatMessage], tools: Sequence[ToolSchema] = ()) -> list[ModelChunk]:
    async def run() -> list[ModelChunk]:
        return [chunk async for chunk in model.stream(messages, tools)]

    return asyncio.run(run())


def text_of(chunks: list[ModelChunk]) -> str:
    return "".join(c.text for c in chunks if isinstance(c, TextDelta))


def user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


def assert_well_formed(chunks: list[ModelChunk]) -> UsageChunk:
    """Exactly one usage chunk, last, with positive counts."""
    usage = chunks[-1]
    assert isinstance(usage, UsageChunk)
    assert not any(isinstance(c, UsageChunk) for c in chunks[:-1])
    assert usage.input_tokens >= 1
    assert usage.output_tokens >= 1
    return usage


def calculator_round(question: str, result: str) -> list[ChatMessage]:
    """A user question, the model's calculator call and the tool's result."""
    first = collect(LocalModel(), [user(question)], [CALCULATOR_SCHEMA])
    assert isinstance(first[0], ToolCallChunk)
    call = first[0].call
    return [
        user(question),
        ChatMessage(role="assistant", tool_calls=(call,)),
        ChatMessage(role="tool", content=result, tool_call_id=call.id, name="calculator"),
    ]


def test_is_a_chat_model_named_cogmesh_local() -> None:
    model: ChatModel = LocalModel()
    assert model.name == "cogmesh-local"


# --- rule d: echo ---------------------------------------------------------------------


def test_echo_reply() -> None:
    chunks = collect(LocalModel(), [user("hello   there\nfriend")])
    assert text_of(chunks) == f'You said: "hello there friend". {ECHO_TAIL}'
    deltas = [c for c in chunks if isinstance(c, TextDelta)]
    assert len(deltas) >= 3
    assert all(d.text for d in deltas)
    assert len(chunks) == len(deltas) + 1
    assert_well_formed(chunks)


def test_echo_depends_on_the_last_user_message() -> None:
    messages = [user("What is 2 + 2?"), ChatMessage(role="assistant", content="2 + 2 = 4."), user("thanks")]
    chunks = collect(LocalModel(), messages, [CALCULATOR_SCHEMA])
    assert text_of(chunks) == f'You said: "thanks". {ECHO_TAIL}'


def test_usage_estimates() -> None:
    messages = [ChatMessage(role="system", content="s" * 40), user("hello")]
    chunks = collect(LocalModel(), messages)
    usage = assert_well_formed(chunks)
    assert usage.input_tokens == (40 + 5) // 4 + 2
    assert usage.output_tokens == len(text_of(chunks)) // 4


def test_input_estimate_counts_tool_calls() -> None:
    plain = [user("What is 17 * 23?")]
    with_call = calculator_round("What is 17 * 23?", "391")
    call_chars = len("calculator") + len('{"expression":"17 * 23"}') + len("391")
    usage = assert_well_formed(collect(LocalModel(), with_call, [CALCULATOR_SCHEMA]))
    assert usage.input_tokens == (len(plain[0].content) + call_chars) // 4 + 3


# --- rule b: calculator call ------------------------------------------------------------


def test_calls_the_calculator() -> None:
    chunks = collect(LocalModel(), [user("What is 17 * 23?")], [WEATHER, CALCULATOR_SCHEMA])
    assert len(chunks) == 2
    assert isinstance(chunks[0], ToolCallChunk)
    call = chunks[0].call
    assert call.name == "calculator"
    assert dict(call.arguments) == {"expression": "17 * 23"}
    assert call.id == "call_" + hashlib.sha256(b"1:17 * 23").hexdigest()[:12]
    usage = assert_well_formed(chunks)
    assert usage.output_tokens == len('{"expression":"17 * 23"}') // 4


def test_call_id_depends_on_position() -> None:
    first = collect(LocalModel(), [user("2 + 2")], [CALCULATOR_SCHEMA])
    later = collect(
        LocalModel(), [user("hi"), ChatMessage(role="assistant", content="hey"), user("2 + 2")], [CALCULATOR_SCHEMA]
    )
    assert isinstance(first[0], ToolCallChunk)
    assert isinstance(later[0], ToolCallChunk)
    assert first[0].call.id != later[0].call.id


# --- rule a: answering from tool results ---------------------------------------------------


def test_answers_from_calculator_result() -> None:
    chunks = collect(LocalModel(), calculator_round("What is 17 * 23?", "391"), [CALCULATOR_SCHEMA])
    assert text_of(chunks) == "17 * 23 = 391."
    assert not any(isinstance(c, ToolCallChunk) for c in chunks)
    assert_well_formed(chunks)


def test_reports_tool_error() -> None:
    messages = calculator_round("What is 1 / 0?", "error: division by zero (1 / 0)")
    chunks = collect(LocalModel(), messages, [CALCULATOR_SCHEMA])
    assert text_of(chunks) == 'The calculator tool failed: "division by zero (1 / 0)".'


def test_answers_from_other_tool() -> None:
    call = ToolCallRequest(id="call_w", name="weather", arguments={"city": "Oslo"})
    messages = [
        user("weather in Oslo?"),
        ChatMessage(role="assistant", tool_calls=(call,)),
        ChatMessage(role="tool", content="sunny, 21 C", tool_call_id="call_w", name="weather"),
    ]
    assert text_of(collect(LocalModel(), messages, [WEATHER])) == "The weather tool returned: sunny, 21 C"


def test_answers_every_trailing_tool_result_in_order() -> None:
    calls = (
        ToolCallRequest(id="a", name="calculator", arguments={"expression": "2 + 2"}),
        ToolCallRequest(id="b", name="weather", arguments={}),
    )
    messages = [
        user("2 + 2 and the weather"),
        ChatMessage(role="assistant", tool_calls=calls),
        ChatMessage(role="tool", content="4", tool_call_id="a", name="calculator"),
        ChatMessage(role="tool", content="error: offline", tool_call_id="b", name="weather"),
    ]
    chunks = collect(LocalModel(), messages, [CALCULATOR_SCHEMA, WEATHER])
    assert text_of(chunks) == '2 + 2 = 4. The weather tool failed: "offline".'


def test_tool_result_without_matching_call_uses_message_name() -> None:
    messages = [user("go"), ChatMessage(role="tool", content="done", tool_call_id="missing", name="deploy")]
    assert text_of(collect(LocalModel(), messages)) == "The deploy tool returned: done"


# --- rule c: arithmetic without the calculator -------------------------------------------


@pytest.mark.parametrize("tools", [(), (WEATHER,)])
def test_computes_itself_without_calculator(tools: tuple[ToolSchema, ...]) -> None:
    chunks = collect(LocalModel(), [user("compute (2+3)*4 please")], tools)
    assert text_of(chunks) == "(2+3)*4 = 20."
    assert_well_formed(chunks)


def test_reports_arithmetic_failure_without_calculator() -> None:
    chunks = collect(LocalModel(), [user("what is 1/0?")])
    assert text_of(chunks) == "I could not compute 1/0: division by zero (1 / 0)."


# --- determinism, reply_tokens, delays --------------------------------------------------


@pytest.mark.parametrize(
    ("text", "tools"),
    [("hello", ()), ("What is 17 * 23?", (CALCULATOR_SCHEMA,)), ("What is 17 * 23?", ())],
)
def test_deterministic(text: str, tools: tuple[ToolSchema, ...]) -> None:
    messages = [ChatMessage(role="system", content="be brief"), user(text)]
    assert collect(LocalModel(), messages, tools) == collect(LocalModel(), messages, tools)


def test_reply_tokens() -> None:
    chunks = collect(LocalModel(reply_tokens=5), [user("hello")])
    assert chunks[:-1] == [
        TextDelta("tok0"),
        TextDelta(" tok1"),
        TextDelta(" tok2"),
        TextDelta(" tok3"),
        TextDelta(" tok4"),
    ]
    usage = assert_well_formed(chunks)
    assert usage.output_tokens == 5


def test_reply_tokens_keeps_arithmetic_rules() -> None:
    chunks = collect(LocalModel(reply_tokens=5), [user("2 + 2")], [CALCULATOR_SCHEMA])
    assert isinstance(chunks[0], ToolCallChunk)


def test_no_sleep_without_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    async def forbidden(delay: float) -> None:
        raise AssertionError(f"slept {delay}s")

    monkeypatch.setattr(asyncio, "sleep", forbidden)
    assert_well_formed(collect(LocalModel(), [user("hello")]))


def test_delay_slows_every_chunk() -> None:
    model = LocalModel(delay_s=0.02, reply_tokens=5)
    start = time.perf_counter()
    chunks = collect(model, [user("hello")])
    assert len(chunks) == 6
    assert time.perf_counter() - start >= 6 * 0.02 * 0.9


@pytest.mark.asyncio
async def test_slow_stream_can_be_cancelled() -> None:
    received: list[ModelChunk] = []

    async def consume() -> None:
        async for chunk in LocalModel(delay_s=0.05).stream([user("hello")], ()):
            received.append(chunk)

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.12)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert 1 <= len(received) < 4


# --- invalid input ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        ([], "conversation is empty"),
        ([ChatMessage(role="system", content="be nice")], "no user message"),
        ([ChatMessage(role="assistant", content="hi")], "no user message"),
    ],
)
def test_rejects_conversation_without_user_message(messages: list[ChatMessage], message: str) -> None:
    with pytest.raises(ModelError, match=message) as caught:
        collect(LocalModel(), messages, [CALCULATOR_SCHEMA])
    assert caught.value.kind == "invalid_request"
    assert caught.value.retryable is False


@pytest.mark.parametrize(("delay_s", "reply_tokens"), [(-1.0, None), (0.0, 0), (0.0, -3)])
def test_rejects_bad_options(delay_s: float, reply_tokens: int | None) -> None:
    with pytest.raises(ValueError):
        LocalModel(delay_s=delay_s, reply_tokens=reply_tokens)
