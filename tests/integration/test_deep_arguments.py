"""Deeply nested tool-call arguments through the whole suite (issue 14 item 4).

Arguments nested exactly MAX_ARGUMENT_DEPTH levels travel everywhere arguments go: the
runtime's events, SendMessage, AnswerInterrupt, Subscribe and Converse at the gateway, the
session's stored messages, and the next turn's model call. One level more, and the model
gets a tool error instead while the turn goes on to its final answer; so does a call nested
thousands of levels, which `json` alone cannot even parse. The built-in model calls
a client tool with the JSON that follows "@<tool>" in the user's message.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
import pytest_asyncio
from google.protobuf import json_format, struct_pb2

from cogmesh.common.v1 import events_pb2, messages_pb2, turns_pb2
from cogmesh.gateway.v1 import gateway_pb2
from cogmesh.runtime.v1 import runtime_pb2
from cogmesh.sessions.v1 import sessions_pb2
from services.kit.limits import MAX_ARGUMENT_DEPTH, json_depth
from tests.integration.conftest import SUITE_SETTINGS, TIMEOUT_S, new_session, status_details
from tests.integration.test_converse import Conversation, ended, paused
from tests.integration.test_pause_resume import Env, agents_suite, kinds, message, only, rpc_error, stream, whole_log

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def env(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    async with agents_suite(tmp_path_factory.mktemp("deep")) as found:
        yield found


def nested(depth: int) -> dict[str, Any]:
    """Objects in objects (the costliest nesting in protobuf: three message levels each), `depth` levels."""
    value: dict[str, Any] = {"leaf": "x"}
    for _ in range(depth - 1):
        value = {"a": value}
    assert json_depth(value) == depth
    return value


def deep_tool() -> messages_pb2.ToolSpec:
    parameters = struct_pb2.Struct()
    parameters.update({"type": "object"})
    return messages_pb2.ToolSpec(name="deep", description="Takes anything", parameters=parameters)


def call_text(arguments_json: str) -> str:
    return f"@deep {arguments_json}"


def as_dict(value: struct_pb2.Struct) -> dict[str, Any]:
    return json_format.MessageToDict(value)


def refused(events: list[events_pb2.RuntimeEvent], depth: int) -> None:
    """The turn went on to its final answer, and the model was told why its call did not run."""
    assert kinds(events)[-1] == "final", kinds(events)
    assert "client_tool_call" not in kinds(events)
    started = only(events, "tool_call_started")
    assert started.name == "deep" and as_dict(started.arguments) == {}
    finished = only(events, "tool_call_finished")
    assert not finished.ok and finished.correlation_id == started.correlation_id
    problem = f"the arguments are nested {depth} levels deep; at most {MAX_ARGUMENT_DEPTH} are allowed"
    assert events[-1].final.text == f'The deep tool failed: "invalid arguments for deep: {problem}".'


# --------------------------------------------------------------------------- at the bound


async def test_arguments_at_the_bound_pass_everywhere(env: Env) -> None:
    arguments = nested(MAX_ARGUMENT_DEPTH)
    session_id = await new_session(env.gateway)
    request = message(session_id, call_text(json.dumps(arguments)), client_tools=[deep_tool()])
    paused_events = await stream(env.gateway.SendMessage(request, timeout=TIMEOUT_S))
    started = only(paused_events, "tool_call_started")
    assert as_dict(started.arguments) == arguments
    call = paused_events[-2].client_tool_call
    assert as_dict(call.call.arguments) == arguments

    answer = gateway_pb2.AnswerInterruptRequest(
        session_id=session_id,
        interrupt_id=call.interrupt_id,
        tool_result=turns_pb2.ClientToolResult(content="deep enough"),
    )
    resumed = await stream(env.gateway.AnswerInterrupt(answer, timeout=TIMEOUT_S))
    assert resumed[-1].final.text == "The deep tool returned: deep enough"
    stored_call = resumed[-1].final.new_messages[1].tool_calls[0]  # user, assistant (the call), tool, assistant
    assert as_dict(stored_call.arguments) == arguments

    # The session's log replays every event, and its stored messages hold the arguments.
    log = await whole_log(env, session_id)
    assert kinds(log).count("final") == 1
    assert as_dict(only(log, "tool_call_started").arguments) == arguments
    listed = await env.stubs["sessions"].ListMessages(
        sessions_pb2.ListMessagesRequest(tenant_id=SUITE_SETTINGS.tenant_id, session_id=session_id),
        timeout=TIMEOUT_S,
    )
    calls = [c for m in listed.messages for c in m.tool_calls]
    assert [as_dict(c.arguments) for c in calls] == [arguments]

    # The next turn sends that history to the model again.
    after = await stream(env.gateway.SendMessage(message(session_id, "and now?"), timeout=TIMEOUT_S))
    assert after[-1].final.text.startswith('You said: "and now?"')


async def test_arguments_at_the_bound_pass_converse(env: Env) -> None:
    arguments = nested(MAX_ARGUMENT_DEPTH)
    session_id = await new_session(env.gateway)
    talk = Conversation(env)
    await talk.send("o", open=gateway_pb2.ConverseOpen(session_id=session_id))
    await talk.read_until(lambda c: "o" in c.acks)
    send = gateway_pb2.SendMessageRequest(content=call_text(json.dumps(arguments)), client_tools=[deep_tool()])
    await talk.send("m", message=send)
    await talk.read_until(lambda c: "m" in c.acks and paused(c.acks["m"].turn_id)(c))
    turn = talk.acks["m"].turn_id
    call = next(e.client_tool_call for e in talk.of_turn(turn) if e.HasField("client_tool_call"))
    assert as_dict(call.call.arguments) == arguments
    result = gateway_pb2.AnswerInterruptRequest(
        interrupt_id=call.interrupt_id, tool_result=turns_pb2.ClientToolResult(content="ok")
    )
    await talk.send("r", answer=result)
    await talk.read_until(ended(turn))
    final = talk.of_turn(turn)[-1].final
    assert final.text == "The deep tool returned: ok"
    assert as_dict(final.new_messages[1].tool_calls[0].arguments) == arguments
    talk.call.cancel()


# --------------------------------------------------------------------------- past the bound


async def test_one_level_more_is_a_tool_error_and_the_turn_goes_on(env: Env) -> None:
    session_id = await new_session(env.gateway)
    deeper = json.dumps(nested(MAX_ARGUMENT_DEPTH + 1))
    events = await stream(
        env.gateway.SendMessage(message(session_id, call_text(deeper), client_tools=[deep_tool()]), timeout=TIMEOUT_S)
    )
    refused(events, MAX_ARGUMENT_DEPTH + 1)
    assert kinds(await whole_log(env, session_id)) == kinds(events)
    # The stored call holds no arguments; the session goes on.
    after = await stream(env.gateway.SendMessage(message(session_id, "fine"), timeout=TIMEOUT_S))
    assert after[-1].HasField("final")


@pytest.mark.parametrize(("depth", "shape"), [(33, "{}"), (36, "{}"), (2_000, "{}"), (5_000, "[]")])
async def test_far_deeper_arguments_are_refused_the_same_way(env: Env, depth: int, shape: str) -> None:
    """33 levels once broke the gateway's decoding, 36 the runtime's events, 1,000+ `json` itself."""
    session_id = await new_session(env.gateway)
    if shape == "{}":
        text = '{"a": ' * (depth - 1) + '{"leaf": "x"}' + "}" * (depth - 1)
    else:  # arrays: 5,000 levels in 10,000 characters
        text = '{"a": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}"
    events = await stream(
        env.gateway.SendMessage(message(session_id, call_text(text), client_tools=[deep_tool()]), timeout=TIMEOUT_S)
    )
    refused(events, depth)


# --------------------------------------------------------------------------- a reviewer's edit


async def test_an_edit_nested_too_deep(env: Env) -> None:
    session_id = await new_session(env.gateway, agent="careful")
    paused_events = await stream(env.gateway.SendMessage(message(session_id, "What is 3 * 3?"), timeout=TIMEOUT_S))
    approval = paused_events[-2].approval_required
    edited = struct_pb2.Struct()
    edited.update(nested(MAX_ARGUMENT_DEPTH + 1))

    # The runtime refuses to resume with it...
    resume = runtime_pb2.ResumeTurnRequest(
        tenant_id=SUITE_SETTINGS.tenant_id,
        session_id=session_id,
        turn_id=paused_events[0].turn_id,
        interrupt_id=approval.interrupt_id,
        lease_token=1,
        approval=runtime_pb2.ApprovalAnswer(decision=events_pb2.APPROVAL_DECISION_EDIT, edited_arguments=edited),
    )
    continued = runtime_pb2.ContinueTurnRequest(resume=resume)
    error = await rpc_error(env.stubs["runtime"].ContinueTurn(continued, timeout=TIMEOUT_S))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    _, violations = status_details(error)
    assert violations == [
        (
            "resume.approval.edited_arguments",
            f"must be nested at most {MAX_ARGUMENT_DEPTH} levels deep, not {MAX_ARGUMENT_DEPTH + 1}",
        )
    ]

    # ... and one recorded through the gateway is the call's error, not the turn's end.
    resolve = gateway_pb2.ResolveApprovalRequest(
        session_id=session_id,
        interrupt_id=approval.interrupt_id,
        decision=events_pb2.APPROVAL_DECISION_EDIT,
        edited_arguments=edited,
    )
    resumed = await stream(env.gateway.ResolveApproval(resolve, timeout=TIMEOUT_S))
    assert not only(resumed, "tool_call_finished").ok
    problem = f"the arguments are nested {MAX_ARGUMENT_DEPTH + 1} levels deep; at most {MAX_ARGUMENT_DEPTH} are allowed"
    assert resumed[-1].final.text == (
        f'The calculator tool failed: "the reviewer\'s edited arguments are invalid for calculator: {problem}".'
    )
