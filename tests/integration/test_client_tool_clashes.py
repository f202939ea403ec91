"""A client tool named like one of the agent's tools is refused before the turn takes the lease
(issue 31, item 4): INVALID_ARGUMENT with a field violation, as for the other per-turn options,
on SendMessage and on a Converse frame, and the session takes the next message at once."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from cogmesh.common.v1 import messages_pb2
from cogmesh.gateway.v1 import gateway_pb2
from cogmesh.sessions.v1 import sessions_pb2
from tests.integration.conftest import SUITE_SETTINGS, TIMEOUT_S, new_session, status_details

pytestmark = pytest.mark.asyncio(loop_scope="module")

CLASHES = [
    pytest.param("default", "calculator", "'calculator' is already one of the agent's tools", id="agent-tool"),
    pytest.param("careful", "ask_user", "'ask_user' is already one of the agent's tools", id="agent-ask-user"),
    pytest.param("default", "task", "'task' is one of the runtime's own tools", id="runtime-task"),
    pytest.param("default", "final_response", "'final_response' is one of the runtime's own tools", id="respond"),
    pytest.param("default", "get_tool_response", "'get_tool_response' is one of the runtime's own tools", id="get"),
]


def tool(name: str) -> messages_pb2.ToolSpec:
    return messages_pb2.ToolSpec(name=name, description="a client-side tool")


async def turn_events(gateway: Any, request: gateway_pb2.SendMessageRequest) -> list[Any]:
    return [e async for reply in gateway.SendMessage(request, timeout=TIMEOUT_S) for e in reply.events]


async def log_of(gateway: Any, session_id: str) -> list[Any]:
    call = gateway.Subscribe(
        gateway_pb2.SubscribeRequest(session_id=session_id, stop_when_idle=True), timeout=TIMEOUT_S
    )
    return [event async for reply in call for event in reply.events]


async def assert_free(gateway: Any, sessions: Any, session_id: str) -> None:
    """No turn was accepted, the lease is free, and the next message runs to its end."""
    assert await log_of(gateway, session_id) == [], "no turn was accepted"
    stored = await sessions.GetSession(
        sessions_pb2.GetSessionRequest(tenant_id=SUITE_SETTINGS.tenant_id, session_id=session_id), timeout=TIMEOUT_S
    )
    assert stored.session.active_turn_id == ""
    # A client tool of a name of its own is fine.
    good = gateway_pb2.SendMessageRequest(session_id=session_id, content="hello", client_tools=[tool("lookup")])
    events = await turn_events(gateway, good)
    assert events[0].status.text == "accepted" and events[-1].WhichOneof("payload") == "final", events[-1]


@pytest.mark.parametrize(("agent", "name", "description"), CLASHES)
async def test_send_message_refuses_a_clashing_client_tool_before_the_lease(
    gateway: Any, sessions: Any, agent: str, name: str, description: str
) -> None:
    session_id = await new_session(gateway, agent=agent)
    request = gateway_pb2.SendMessageRequest(
        session_id=session_id, content="What is 2 + 2?", client_tools=[tool("lookup"), tool(name)]
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await turn_events(gateway, request)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
    info, violations = status_details(caught.value)
    assert info is not None and info.reason == "INVALID_ARGUMENT"
    assert violations == [("client_tools[1].name", description)]
    await assert_free(gateway, sessions, session_id)


async def test_a_clashing_client_tool_of_an_unknown_session_is_not_found(gateway: Any) -> None:
    request = gateway_pb2.SendMessageRequest(session_id="nope", content="hi", client_tools=[tool("calculator")])
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await turn_events(gateway, request)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND, caught.value.details()


async def test_converse_refuses_the_frame_and_keeps_the_stream(gateway: Any, sessions: Any) -> None:
    session_id = await new_session(gateway)
    frames = [
        gateway_pb2.ConverseRequest(frame_id="open", open=gateway_pb2.ConverseOpen(session_id=session_id)),
        gateway_pb2.ConverseRequest(
            frame_id="clash",
            message=gateway_pb2.SendMessageRequest(content="What is 2 + 2?", client_tools=[tool("calculator")]),
        ),
    ]
    call = gateway.Converse(iter(frames), timeout=TIMEOUT_S)
    replies = [reply async for reply in call]
    rejected = [r.rejected for r in replies if r.HasField("rejected")]
    assert [(r.frame_id, r.code, [(v.field, v.description) for v in r.violations]) for r in rejected] == [
        (
            "clash",
            "INVALID_ARGUMENT",
            [("message.client_tools[0].name", "'calculator' is already one of the agent's tools")],
        )
    ]
    assert not any(r.HasField("events") for r in replies), "no turn started"
    await assert_free(gateway, sessions, session_id)

    # The same stream goes on after a refused frame: the next message is a turn.
    talk = gateway.Converse(timeout=TIMEOUT_S)
    await talk.write(gateway_pb2.ConverseRequest(frame_id="o", open=gateway_pb2.ConverseOpen(session_id=session_id)))
    await talk.write(
        gateway_pb2.ConverseRequest(
            frame_id="bad", message=gateway_pb2.SendMessageRequest(content="hi", client_tools=[tool("task")])
        )
    )
    await talk.write(
        gateway_pb2.ConverseRequest(frame_id="good", message=gateway_pb2.SendMessageRequest(content="What is 3 + 3?"))
    )
    await talk.done_writing()
    replies = []
    async with asyncio.timeout(TIMEOUT_S):
        async for reply in talk:
            replies.append(reply)
    assert [r.rejected.frame_id for r in replies if r.HasField("rejected")] == ["bad"]
    events = [e for r in replies if r.HasField("events") for e in r.events.events]
    assert events and events[-1].final.text == "3 + 3 = 6.", events
