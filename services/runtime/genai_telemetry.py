"""OpenTelemetry GenAI semantic conventions on the runtime's agent, model and tool work.

The conventions live in open-telemetry/semantic-conventions-genai (docs/gen-ai/:
gen-ai-agent-spans.md, gen-ai-spans.md, gen-ai-metrics.md); observability backends
(Phoenix, Langfuse, Datadog, Grafana) read these names. One turn's tree:

    /cogmesh.runtime.v1.RuntimeService/StartTurn     SERVER (services/kit/server.py)
      invoke_agent planner                          INTERNAL: one run of the loop (loop.py)
        chat cogmesh-local                          one per model call attempt (steps/think.py)
        execute_tool task                           one per tool call run here (steps/call.py)
          invoke_agent arithmetic                   a subagent's run (steps/delegate.py)
            chat cogmesh-local
            execute_tool calculator
        chat cogmesh-local

`invoke_agent` is the current span while its loop runs, so the runtime's own RPCs
(policy checks, journal writes, remote tools) nest under the agent and the tool that
made them. It is attached only around each step of the loop's async generator and
detached before the generator yields: a context attached across a `yield` leaks into
the consumer and cannot be detached when the generator is closed from another task.

Each model call also feeds the GenAI client metrics (services/kit/metrics.py).
Message content is left out unless `genai_capture_content` is on
(services/kit/telemetry.py `GENAI`); docs/observability.md lists every attribute.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from opentelemetry.trace import SpanKind, Status, StatusCode

from cogmesh.common.v1 import events_pb2
from services.kit.metrics import record_genai_operation
from services.kit.telemetry import GENAI
from services.lib.llm import ChatMessage, ModelError, ToolCallRequest, UsageChunk
from services.runtime.steps.state import CallState, Run
from services.runtime.turn import ModelInfo

COST_USD = "cogmesh.cost_usd"  # the catalogue price of the call's (or the run's) tokens
TURN_ID = "cogmesh.turn_id"
OUTCOME = "cogmesh.outcome"  # invoke_agent: final, error, paused, stopped; execute_tool: paused
TOOL_SOURCE = "cogmesh.tool.source"  # builtin, mcp, remote, internal
CONTENT_LIMIT = 16_384  # characters of one captured text; longer ones are cut, the JSON stays valid

# cogmesh's provider names that the conventions spell differently; any other passes through
# (openai, anthropic, deepseek, groq, or a providers-file name such as vllm).
_PROVIDERS = {"local": "cogmesh", "google": "gcp.gemini"}
_ERROR_KINDS = {
    value.number: value.name.removeprefix("ERROR_KIND_").lower() for value in events_pb2.ErrorKind.DESCRIPTOR.values
}

_tracer = trace.get_tracer("cogmesh.runtime.genai")


def provider_name(provider: str) -> str:
    """The `gen_ai.provider.name` of a cogmesh provider."""
    return _PROVIDERS.get(provider, provider)


def _common(run: Run) -> dict[str, Any]:
    turn = run.turn
    attributes: dict[str, Any] = {TURN_ID: turn.turn_id}
    if turn.agent:
        attributes[gen_ai.GEN_AI_AGENT_NAME] = turn.agent
    if turn.context.session_id:
        attributes[gen_ai.GEN_AI_CONVERSATION_ID] = turn.context.session_id
    return attributes


def _interrupted(run: Run, exc: BaseException) -> str:
    """error.type of an operation cut short by `exc`."""
    if isinstance(exc, asyncio.CancelledError | GeneratorExit):
        return "deadline_exceeded" if run.turn.stop_reason in ("deadline", "expired") else "cancelled"
    return type(exc).__qualname__


def _fail(span: trace.Span, error_type: str, description: str = "") -> None:
    span.set_attribute(ERROR_TYPE, error_type)
    span.set_status(Status(StatusCode.ERROR, description or error_type))


# --------------------------------------------------------------------------- invoke_agent


async def invoke_agent(
    run: Run, steps: AsyncIterator[events_pb2.RuntimeEvent], parent: trace.Span | None = None
) -> AsyncGenerator[events_pb2.RuntimeEvent, None]:
    """`steps` (the loop over `run`) inside an `invoke_agent` span, under `parent` or the current span."""
    turn, info = run.turn, run.current.info
    attributes = _common(run)
    attributes.update(
        {
            gen_ai.GEN_AI_OPERATION_NAME: "invoke_agent",
            gen_ai.GEN_AI_PROVIDER_NAME: provider_name(info.provider),
            gen_ai.GEN_AI_REQUEST_MODEL: info.id,
        }
    )
    span = _tracer.start_span(
        f"invoke_agent {turn.agent}" if turn.agent else "invoke_agent",
        context=trace.set_span_in_context(parent) if parent is not None else None,
        kind=SpanKind.INTERNAL,
        attributes=attributes,
    )
    if not span.is_recording():  # tracing off or not sampled: nothing to attach or count
        try:
            async for event in steps:
                yield event
        finally:
            await _close(steps)
        return
    metrics = run.metrics
    before = (metrics.input_tokens, metrics.output_tokens, metrics.cost_usd)
    if GENAI.capture_content:
        span.set_attribute(gen_ai.GEN_AI_SYSTEM_INSTRUCTIONS, _instructions(run.system_prompt))
        span.set_attribute(gen_ai.GEN_AI_INPUT_MESSAGES, _dumps([_text_message("user", turn.user_text)]))
    current = trace.set_span_in_context(span)
    last: events_pb2.RuntimeEvent | None = None
    try:
        while True:
            token = otel_context.attach(current)
            try:
                event = await anext(steps)
            except StopAsyncIteration:
                break
            finally:
                otel_context.detach(token)
            if event.WhichOneof("payload") in ("final", "error"):
                last = event
            yield event
    except BaseException as exc:
        stopped = isinstance(exc, GeneratorExit) or (
            isinstance(exc, asyncio.CancelledError) and not turn.cancel.is_set()
        )
        if last is None and stopped:
            # Stopped here from outside, not cancelled (a lost lease, a shutdown's hand-over): not a failure.
            span.set_attribute(OUTCOME, "stopped")
        elif last is None:  # closed after its end is normal: the consumer stops reading there
            _fail(span, _interrupted(run, exc))
            span.set_attribute(OUTCOME, "error")
        raise
    finally:
        try:
            if last is not None:
                _ended(span, last)
            elif run.paused is not None:
                span.set_attribute(OUTCOME, "paused")
            span.set_attributes(
                {
                    gen_ai.GEN_AI_USAGE_INPUT_TOKENS: metrics.input_tokens - before[0],
                    gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS: metrics.output_tokens - before[1],
                    COST_USD: max(0.0, metrics.cost_usd - before[2]),
                }
            )
            span.end()
        finally:
            await _close(steps)


def _ended(span: trace.Span, last: events_pb2.RuntimeEvent) -> None:
    if last.HasField("final"):
        span.set_attribute(OUTCOME, "final")
        if GENAI.capture_content:
            output = _text_message("assistant", last.final.text)
            output["finish_reason"] = "stop"
            span.set_attribute(gen_ai.GEN_AI_OUTPUT_MESSAGES, _dumps([output]))
        return
    span.set_attribute(OUTCOME, "error")
    error = last.error
    _fail(span, _ERROR_KINDS.get(error.kind, "_OTHER"), error.message)


async def _close(steps: AsyncIterator[Any]) -> None:
    aclose = getattr(steps, "aclose", None)
    if aclose is not None:
        await aclose()


# --------------------------------------------------------------------------- chat


class ChatCall:
    """One model call in progress: told each chunk, the usage and the answer; ended by `chat`."""

    __slots__ = ("answer", "cost", "first_chunk_s", "info", "recording", "span", "started", "tokens")

    def __init__(self, span: trace.Span, info: ModelInfo) -> None:
        self.span, self.info = span, info
        self.recording = span.is_recording()
        self.started = time.perf_counter()
        self.first_chunk_s: float | None = None
        self.tokens: tuple[int, int] | None = None
        self.cost = 0.0
        self.answer: tuple[str, Sequence[ToolCallRequest]] | None = None

    def chunk(self) -> None:
        if self.first_chunk_s is None:
            self.first_chunk_s = time.perf_counter() - self.started

    def usage(self, chunk: UsageChunk) -> None:
        self.tokens = (chunk.input_tokens, chunk.output_tokens)
        self.cost = self.info.cost(chunk.input_tokens, chunk.output_tokens)

    def answered(self, text: str, calls: Sequence[ToolCallRequest]) -> None:
        self.answer = (text, calls)


@contextlib.contextmanager
def chat(run: Run, messages: Sequence[ChatMessage]) -> Iterator[ChatCall]:
    """A `chat {model}` span around one call of the run's current model with `messages`."""
    info, model = run.current.info, run.current.model
    provider = provider_name(info.provider)
    local = info.provider == "local"
    attributes = _common(run)
    attributes.update(
        {
            gen_ai.GEN_AI_OPERATION_NAME: "chat",
            gen_ai.GEN_AI_PROVIDER_NAME: provider,
            gen_ai.GEN_AI_REQUEST_MODEL: info.id,
            gen_ai.GEN_AI_REQUEST_STREAM: True,  # every adapter streams
        }
    )
    # The provider adapters keep the agent's sampling settings (None: the provider's default).
    for name, key in (
        ("_temperature", gen_ai.GEN_AI_REQUEST_TEMPERATURE),
        ("_max_tokens", gen_ai.GEN_AI_REQUEST_MAX_TOKENS),
    ):
        value = getattr(model, name, None)
        if value is not None:
            attributes[key] = value
    span = _tracer.start_span(
        f"chat {info.id}",
        # The built-in model runs in this process; every other one is a remote call.
        kind=SpanKind.INTERNAL if local else SpanKind.CLIENT,
        attributes=attributes,
    )
    call = ChatCall(span, info)
    if call.recording and GENAI.capture_content:
        system = messages[0].content if messages and messages[0].role == "system" else None
        if system is not None:
            span.set_attribute(gen_ai.GEN_AI_SYSTEM_INSTRUCTIONS, _instructions(system))
        rest = messages[1:] if system is not None else messages
        span.set_attribute(gen_ai.GEN_AI_INPUT_MESSAGES, _dumps([_message(m) for m in rest]))
    # The built-in model answers as itself; the adapters do not report the model a provider answered with.
    response_model = info.id if local else ""
    error_type = ""
    try:
        yield call
    except ModelError as exc:
        error_type = exc.kind
        _fail(span, error_type, str(exc))
        raise
    except BaseException as exc:
        error_type = _interrupted(run, exc)
        _fail(span, error_type)
        raise
    finally:
        duration = time.perf_counter() - call.started
        if GENAI.metrics:
            record_genai_operation(
                "chat", provider, info.id, response_model, duration, error_type, call.tokens if not error_type else None
            )
        if call.recording:
            _chat_ended(call, response_model)
        span.end()


def _chat_ended(call: ChatCall, response_model: str) -> None:
    span = call.span
    if response_model:
        span.set_attribute(gen_ai.GEN_AI_RESPONSE_MODEL, response_model)
    if call.first_chunk_s is not None:
        span.set_attribute(gen_ai.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK, call.first_chunk_s)
    if call.tokens is not None:
        span.set_attributes(
            {
                gen_ai.GEN_AI_USAGE_INPUT_TOKENS: call.tokens[0],
                gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS: call.tokens[1],
                COST_USD: call.cost,
            }
        )
    if call.answer is not None:
        text, calls = call.answer
        # What the loop saw: tool calls, or an answer. The adapters do not surface the provider's own reason.
        reason = "tool_call" if calls else "stop"
        span.set_attribute(gen_ai.GEN_AI_RESPONSE_FINISH_REASONS, (reason,))
        if GENAI.capture_content:
            output = _message(ChatMessage("assistant", text, tuple(calls)))
            output["finish_reason"] = reason
            span.set_attribute(gen_ai.GEN_AI_OUTPUT_MESSAGES, _dumps([output]))


# --------------------------------------------------------------------------- execute_tool


class ToolCall:
    """One tool call in progress; `error_type` names how it failed, when it did."""

    __slots__ = ("error_type", "span")

    def __init__(self, span: trace.Span) -> None:
        self.span = span
        self.error_type = ""


@contextlib.contextmanager
def execute_tool(run: Run, item: CallState, *, current: bool = True) -> Iterator[ToolCall]:
    """An `execute_tool {tool}` span around running `item`; current inside unless the caller yields (delegation)."""
    tool = item.tool
    attributes = _common(run)
    attributes.update(
        {
            gen_ai.GEN_AI_OPERATION_NAME: "execute_tool",
            gen_ai.GEN_AI_TOOL_NAME: item.call.name,
            gen_ai.GEN_AI_TOOL_CALL_ID: item.call.id,
            # The runtime runs tools on the agent's side; the caller's client-side tools pause the turn instead.
            gen_ai.GEN_AI_TOOL_TYPE: "extension",
        }
    )
    if tool is not None:
        attributes[TOOL_SOURCE] = tool.source
        if tool.schema.description:
            attributes[gen_ai.GEN_AI_TOOL_DESCRIPTION] = tool.schema.description
    span = _tracer.start_span(f"execute_tool {item.call.name}", kind=SpanKind.INTERNAL, attributes=attributes)
    call = ToolCall(span)
    if not span.is_recording():
        yield call
        return
    capture = GENAI.capture_content
    if capture:
        span.set_attribute(gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS, _dumps(_clip_json(item.arguments)))
    try:
        if current:
            with trace.use_span(span, record_exception=False, set_status_on_exception=False):
                yield call
        else:
            yield call
    except BaseException as exc:
        _fail(span, _interrupted(run, exc))
        raise
    else:
        if item.ok:
            if capture:
                span.set_attribute(gen_ai.GEN_AI_TOOL_CALL_RESULT, _clip(item.result))
        elif run.paused is not None:  # a subagent waits for an answer: the call goes on after the resume
            span.set_attribute(OUTCOME, "paused")
        else:
            _fail(span, call.error_type or "tool_error", item.result if capture else "")
    finally:
        span.end()


# --------------------------------------------------------------------------- content (opt-in)


def _clip(text: str) -> str:
    if len(text) <= CONTENT_LIMIT:
        return text
    return f"{text[:CONTENT_LIMIT]}… [{len(text) - CONTENT_LIMIT} more characters]"


def _clip_json(value: Mapping[str, Any]) -> Any:
    """Arguments as an object, or as a cut JSON text when they are too long."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return value if len(text) <= CONTENT_LIMIT else _clip(text)


def _dumps(value: Any) -> str:
    # Span attributes cannot hold structures yet: the conventions' JSON, as a string.
    return json.dumps(value, ensure_ascii=False, default=str)


def _instructions(text: str) -> str:
    return _dumps([{"type": "text", "content": _clip(text)}])


def _text_message(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": _clip(text)}]}


def _message(message: ChatMessage) -> dict[str, Any]:
    """A message in the conventions' shape (gen-ai-input-messages.json, gen-ai-output-messages.json)."""
    if message.role == "tool":
        parts: list[dict[str, Any]] = [
            {"type": "tool_call_response", "id": message.tool_call_id, "response": _clip(message.content)}
        ]
    else:
        parts = [{"type": "text", "content": _clip(message.content)}] if message.content else []
        parts.extend(
            {"type": "tool_call", "id": c.id, "name": c.name, "arguments": _clip_json(c.arguments)}
            for c in message.tool_calls
        )
    return {"role": message.role, "parts": parts}
