"""Tool-call arguments nested too deep for the suite's messages (issue 14 item 4).

Wherever arguments enter the runtime — a model's call through any provider adapter or
the built-in model, a subagent's call, the policy's or an interceptor's rewrite, a
reviewer's edit, a structured answer — more than MAX_ARGUMENT_DEPTH levels are the call's
error, told to the model, and never the turn's: every event stays encodable and the turn
goes on to its final answer. Exactly MAX_ARGUMENT_DEPTH levels pass untouched.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format

from cogmesh.common.v1 import events_pb2, messages_pb2
from cogmesh.gateway.v1 import gateway_pb2
from cogmesh.runtime.v1 import runtime_pb2
from services.kit.errors import InvalidArgument
from services.kit.limits import (
    MAX_ARGUMENT_DEPTH,
    argument_depth_problem,
    depth_problem,
    json_depth,
    json_text_depth,
)
from services.kit.protos import dict_to_struct
from services.lib.agents import AgentDefinition
from services.lib.llm import ChatMessage, ToolCallChunk, ToolSchema
from services.lib.providers import ProviderConfig
from services.runtime.calculator import CALCULATOR_SCHEMA, calculator_tool
from services.runtime.delegation import task_tool
from services.runtime.local_model import MAX_PARSE_DEPTH, LocalModel
from services.runtime.loop import run_turn
from services.runtime.phases import Intercept, Phase, PhaseContext
from services.runtime.providers.registry import ProviderRegistry
from services.runtime.providers.tool_args import parse_arguments
from services.runtime.servicer import validate_resume
from services.runtime.structured import RESPOND_TOOL, OutputSpec, parse_json_text
from services.runtime.tools.base import builtin
from services.runtime.turn import Decision, ModelInfo, ResumePoint, Turn, Verdict, interrupt_matcher
from tests.fakes.models import ScriptedModel, calls, text
from tests.fakes.providers import Call, FakeAnthropic, FakeGoogle, FakeOpenAI, FakeProvider, Reply

pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")

INFO = ModelInfo("cogmesh-local", "local")
ANY_OBJECT = ToolSchema("deep", "Takes anything.", {"type": "object"})
TOO_DEEP = f"the arguments are nested {MAX_ARGUMENT_DEPTH + 1} levels deep; at most {MAX_ARGUMENT_DEPTH} are allowed"


def nested(depth: int) -> dict[str, Any]:
    """Objects in objects, `depth` levels (the costliest nesting in protobuf)."""
    value: dict[str, Any] = {"leaf": "x"}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def nested_text(depth: int) -> str:
    """The JSON of `nested(depth)`, built without recursion (json.dumps fails near 1,000 levels)."""
    return '{"a": ' * (depth - 1) + '{"leaf": "x"}' + "}" * (depth - 1)


async def allow(name: str, arguments: Mapping[str, Any]) -> Verdict:
    return Verdict(True, "ok", arguments)


def recording_tool(seen: list[Mapping[str, Any]]) -> Any:
    async def run(arguments: Mapping[str, Any]) -> str:
        seen.append(arguments)
        return "ran"

    return builtin(ANY_OBJECT, run)


def make_turn(user_text: str, model: Any, **overrides: Any) -> Turn:
    values: dict[str, Any] = {
        "turn_id": "t1",
        "system_prompt": "be brief",
        "history": [],
        "user_text": user_text,
        "model": model,
        "model_info": INFO,
        "tools": {},
        "check_tool": allow,
        "agent": "main",
    }
    return Turn(**(values | overrides))


async def run(turn: Turn) -> list[events_pb2.RuntimeEvent]:
    async def collect() -> list[events_pb2.RuntimeEvent]:
        return [event async for event in run_turn(turn)]

    return await asyncio.wait_for(collect(), 10)


def kinds(events: list[events_pb2.RuntimeEvent]) -> list[str]:
    return [e.WhichOneof("payload") or "" for e in events]


def survive_the_wire(events: list[events_pb2.RuntimeEvent]) -> None:
    """Each event decodes again inside the deepest message that carries events (a Converse response)."""
    for event in events:
        wrapped = gateway_pb2.ConverseResponse(events=gateway_pb2.EventBatch(events=[event]))
        assert gateway_pb2.ConverseResponse.FromString(wrapped.SerializeToString()) == wrapped


def tool_results(turn: Turn) -> list[str]:
    return [m.content for m in turn.new_messages if m.role == "tool"]


# --------------------------------------------------------------------------- measuring


def test_depth_counts_containers_along_the_deepest_path() -> None:
    values: list[Any] = ["x", 1, None, {}, [], {"a": {}}, {"a": [1]}, [[], [[[]]]]]
    assert [json_depth(v) for v in values] == [0, 0, 0, 1, 1, 2, 2, 4]
    assert json_depth(nested(MAX_ARGUMENT_DEPTH)) == MAX_ARGUMENT_DEPTH
    assert argument_depth_problem(nested(MAX_ARGUMENT_DEPTH)) == ""
    assert argument_depth_problem(nested(MAX_ARGUMENT_DEPTH + 1)) == TOO_DEEP


def test_depth_is_measured_without_recursion_and_ends_on_a_cycle() -> None:
    value: list[Any] = []
    for _ in range(100_000):
        value = [value]
    assert json_depth(value) == 100_001
    loop: dict[str, Any] = {}
    loop["self"] = loop
    assert json_depth(loop) > MAX_ARGUMENT_DEPTH


@pytest.mark.parametrize(
    "text",
    ["{}", "[]", '{"a": "[[[{{{"}', r'{"a": "\"[[", "b": [[1]]}', "[[1], [[2]]]", nested_text(25), '"just a string"'],
)
def test_text_depth_skips_strings_and_agrees_with_the_parsed_value(text: str) -> None:
    assert json_text_depth(text) == json_depth(json.loads(text))


def test_text_depth_of_a_million_brackets_needs_no_parse() -> None:
    assert json_text_depth("[" * 1_000_000 + "]" * 1_000_000) == 1_000_000


# --------------------------------------------------------------------------- where arguments enter


def test_provider_arguments_are_refused_before_json_parses_them() -> None:
    assert parse_arguments(nested_text(MAX_ARGUMENT_DEPTH)) == (nested(MAX_ARGUMENT_DEPTH), "")
    assert parse_arguments(nested_text(MAX_ARGUMENT_DEPTH + 1)) == ({}, TOO_DEEP)
    arguments, error = parse_arguments(nested_text(50_000))  # json.loads: RecursionError
    assert arguments == {} and error == depth_problem(50_000)


async def test_the_built_in_model_passes_nesting_on_and_refuses_what_json_cannot_parse() -> None:
    model = LocalModel()
    messages = [ChatMessage("user", f"@deep {nested_text(MAX_PARSE_DEPTH)}")]
    chunks = [c async for c in model.stream(messages, [ANY_OBJECT])]
    call = next(c.call for c in chunks if isinstance(c, ToolCallChunk))
    assert json_depth(call.arguments) == MAX_PARSE_DEPTH and call.arguments_error == ""

    messages = [ChatMessage("user", f"@deep {nested_text(5_000)}")]
    chunks = [c async for c in model.stream(messages, [ANY_OBJECT])]
    call = next(c.call for c in chunks if isinstance(c, ToolCallChunk))
    assert call.arguments == {} and call.arguments_error == depth_problem(5_000)


@pytest.mark.parametrize("depth", [MAX_ARGUMENT_DEPTH + 1, 33, 36, MAX_PARSE_DEPTH, 5_000])
async def test_a_call_nested_too_deep_is_the_calls_error_and_the_turn_goes_on(depth: int) -> None:
    seen: list[Mapping[str, Any]] = []
    turn = make_turn(f"@deep {nested_text(depth)}", LocalModel(), tools={"deep": recording_tool(seen)})
    events = await run(turn)
    survive_the_wire(events)
    assert kinds(events)[-1] == "final" and not seen
    started = next(e.tool_call_started for e in events if e.HasField("tool_call_started"))
    assert json_format.MessageToDict(started.arguments) == {}
    finished = next(e.tool_call_finished for e in events if e.HasField("tool_call_finished"))
    assert not finished.ok
    problem = depth_problem(depth)
    assert tool_results(turn) == [f"error: invalid arguments for deep: {problem}"]
    assert events[-1].final.text == f'The deep tool failed: "invalid arguments for deep: {problem}".'
    stored = turn.new_messages[1].tool_calls[0]  # the assistant's call, as the session keeps it
    assert (dict(stored.arguments), stored.arguments_error) == ({}, problem)


async def test_a_call_at_the_bound_reaches_the_tool_and_every_event_encodes() -> None:
    seen: list[Mapping[str, Any]] = []
    arguments = nested(MAX_ARGUMENT_DEPTH)
    turn = make_turn(f"@deep {json.dumps(arguments)}", LocalModel(), tools={"deep": recording_tool(seen)})
    events = await run(turn)
    survive_the_wire(events)
    assert seen == [arguments]
    assert events[-1].final.text == "The deep tool returned: ran"
    final = gateway_pb2.ConverseResponse(events=gateway_pb2.EventBatch(events=[events[-1]]))
    final.events.events[0].final.new_messages.extend(
        [messages_pb2.Message(tool_calls=[messages_pb2.ToolCall(name="deep", arguments=dict_to_struct(arguments))])]
    )
    assert gateway_pb2.ConverseResponse.FromString(final.SerializeToString()) == final  # the deepest path there is


async def test_a_subagents_call_nested_too_deep_is_its_error_and_the_task_goes_on() -> None:
    seen: list[Mapping[str, Any]] = []

    async def build(name: str, task: str, parent: Turn, resume: ResumePoint | None) -> Turn:
        return make_turn(task, LocalModel(), agent=name, depth=parent.depth + 1, tools={"deep": recording_tool(seen)})

    task = json.dumps({"agent": "helper", "task": f"@deep {nested_text(MAX_ARGUMENT_DEPTH + 1)}"})
    tools = {"task": task_tool([AgentDefinition(name="helper", mode="subagent", description="d")])}
    events = await run(make_turn(f"@task {task}", LocalModel(), tools=tools, delegate=build))
    survive_the_wire(events)
    assert not seen
    assert events[-1].final.text == (
        f'The task tool returned: The deep tool failed: "invalid arguments for deep: {TOO_DEEP}".'
    )


async def test_every_provider_adapter_hands_the_model_a_tool_error(tmp_path: Path) -> None:
    """OpenAI and Anthropic stream argument text (refused unparsed); Gemini sends parsed objects (the loop)."""
    fakes: list[type[FakeProvider]] = [FakeOpenAI, FakeAnthropic, FakeGoogle]
    models = {FakeOpenAI: "gpt-4o", FakeAnthropic: "claude-sonnet-4-20250514", FakeGoogle: "gemini-2.5-pro"}
    key_file = tmp_path / "key"
    key_file.write_text("sk-test-0123456789\n")
    for fake_class in fakes:
        async with fake_class() as fake:
            kind = {FakeOpenAI: "openai", FakeAnthropic: "anthropic", FakeGoogle: "google"}[fake_class]
            deep = nested_text(MAX_ARGUMENT_DEPTH + 1)
            fake.then(Reply(calls=[Call("deep", [deep[:7], deep[7:]], id="call_1")]), Reply(text=["understood"]))
            base = fake.url + ("/v1" if kind == "openai" else "")
            registry = ProviderRegistry({kind: ProviderConfig(kind=kind, base_url=base, api_key_file=key_file)})
            seen: list[Mapping[str, Any]] = []
            turn = make_turn("go deep", registry.model(kind, models[fake_class]), tools={"deep": recording_tool(seen)})
            events = await run(turn)
            await registry.close()
        survive_the_wire(events)
        assert events[-1].final.text == "understood", kind
        assert not seen and tool_results(turn) == [f"error: invalid arguments for deep: {TOO_DEEP}"], kind
        assert TOO_DEEP in fake.model_requests[1].body.decode(), kind  # the model was told


async def test_the_policy_or_an_interceptor_cannot_nest_arguments_too_deep() -> None:
    seen: list[Mapping[str, Any]] = []
    tools = {"deep": recording_tool(seen)}

    async def rewrite(name: str, arguments: Mapping[str, Any]) -> Verdict:
        return Verdict(True, "ok", nested(MAX_ARGUMENT_DEPTH + 1))

    turn = make_turn("x", ScriptedModel([calls(("deep", {"q": 1})), text("ok")]), tools=tools, check_tool=rewrite)
    events = await run(turn)
    survive_the_wire(events)
    assert tool_results(turn) == [f"error: the policy's arguments for deep are invalid: {TOO_DEEP}"]
    started = next(e.tool_call_started for e in events if e.HasField("tool_call_started"))
    assert json_format.MessageToDict(started.arguments) == {"q": 1.0}  # what the model asked for

    async def hook(context: PhaseContext) -> Intercept | None:
        return Intercept(tool_args=nested(MAX_ARGUMENT_DEPTH + 1)) if context.phase is Phase.PRE_ACT else None

    turn = make_turn("x", ScriptedModel([calls(("deep", {"q": 1})), text("ok")]), tools=tools, interceptors=[hook])
    events = await run(turn)
    survive_the_wire(events)
    assert tool_results(turn) == [f"error: an interceptor's arguments for deep are invalid: {TOO_DEEP}"]
    assert events[-1].final.text == "ok" and not seen


async def test_a_reviewers_edit_nested_too_deep_is_the_calls_error() -> None:
    tools = {"calculator": builtin(CALCULATOR_SCHEMA, calculator_tool)}
    careful = interrupt_matcher({"calculator": True})
    turn = make_turn("What is 2 + 2?", LocalModel(), tools=tools, interrupt_on=careful)
    await run(turn)
    assert turn.pause is not None
    edit = Decision("edit", nested(MAX_ARGUMENT_DEPTH + 1))
    again = make_turn(
        turn.user_text, LocalModel(), tools=tools, interrupt_on=careful, resume=ResumePoint(turn.pause.snapshot, edit)
    )
    events = await run(again)
    survive_the_wire(events)
    assert tool_results(again) == [f"error: the reviewer's edited arguments are invalid for calculator: {TOO_DEEP}"]
    assert kinds(events)[-1] == "final"


def test_the_runtime_refuses_to_resume_with_an_edit_nested_too_deep() -> None:
    def resume(arguments: dict[str, Any]) -> runtime_pb2.ResumeTurnRequest:
        approval = runtime_pb2.ApprovalAnswer(
            decision=events_pb2.APPROVAL_DECISION_EDIT, edited_arguments=dict_to_struct(arguments)
        )
        return runtime_pb2.ResumeTurnRequest(
            tenant_id="t", session_id="s", turn_id="u", interrupt_id="i", lease_token=1, approval=approval
        )

    assert validate_resume(resume(nested(MAX_ARGUMENT_DEPTH))) == "approval"
    with pytest.raises(InvalidArgument) as caught:
        validate_resume(resume(nested(MAX_ARGUMENT_DEPTH + 1)))
    assert caught.value.violations == [
        (
            "approval.edited_arguments",
            f"must be nested at most {MAX_ARGUMENT_DEPTH} levels deep, not {MAX_ARGUMENT_DEPTH + 1}",
        )
    ]


@pytest.mark.parametrize("depth", [MAX_ARGUMENT_DEPTH + 1, 5_000])
async def test_a_structured_answer_nested_too_deep_is_repaired_then_invalid(depth: int) -> None:
    assert parse_json_text(nested_text(depth)) == (False, None, depth_problem(depth, "the answer is"))
    output = OutputSpec.of({"type": "object"})
    model = ScriptedModel([text(nested_text(depth)), calls((RESPOND_TOOL, {"ok": True}))])
    events = await run(make_turn("answer", model, output=output))
    survive_the_wire(events)
    assert json_format.MessageToDict(events[-1].final.structured_output) == {"ok": True}
    assert depth_problem(depth, "the answer is") in model.calls[1][0][-1].content  # the repair request

    model = ScriptedModel([calls((RESPOND_TOOL, nested(depth)))] * 2)
    events = await run(make_turn("answer", model, output=output))
    survive_the_wire(events)
    assert events[-1].error.kind == events_pb2.ERROR_KIND_OUTPUT_INVALID
    assert depth_problem(depth) in events[-1].error.message


class DeepGemini(FakeGoogle):
    """Gemini sends a call's arguments as parsed JSON: nested ~1,000 levels, the SDK cannot read the chunk."""

    def render(self, reply: Reply) -> list[dict[str, Any] | str]:
        call = '{"functionCall": {"name": "deep", "args": ' + nested_text(5_000) + "}}"
        candidate = '{"content": {"role": "model", "parts": [' + call + ']}, "index": 0, "finishReason": "STOP"}'
        return ['{"candidates": [' + candidate + "]}"]


async def test_a_gemini_chunk_too_deep_to_parse_is_a_typed_provider_error(tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("sk-test-0123456789\n")
    async with DeepGemini() as fake:
        registry = ProviderRegistry({"google": ProviderConfig(kind="google", base_url=fake.url, api_key_file=key_file)})
        turn = make_turn("go deep", registry.model("google", "gemini-2.5-pro"), model_retries=0)
        events = await run(turn)
        await registry.close()
    error = events[-1].error
    assert error.kind == events_pb2.ERROR_KIND_PROVIDER_ERROR and error.retryable
    assert "google sent a stream chunk nested too deep to parse" in error.message
