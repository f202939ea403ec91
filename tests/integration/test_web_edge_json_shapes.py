"""The browser edge refuses JSON that is not an object where a message belongs (issue 31, item 4).

The protobuf JSON parser reads any iterable as a message, so `[]` was an empty
CreateSessionRequest: HTTP 200 and a new session. Each protocol that carries JSON
(Connect unary, Connect streaming, gRPC-Web +json) must answer invalid_argument
naming the problem, and create nothing.
"""

from __future__ import annotations

import json
import struct
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import unquote

import pytest
import pytest_asyncio

from tests.integration.test_web_edge import (
    AUTH,
    SERVICE,
    Edge,
    decode_details,
    edge_for,
    envelope,
    new_session,
    read_envelopes,
    replay,
    settings_with_keys,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

NOT_OBJECTS = [
    pytest.param([], "an array", id="empty-array"),
    pytest.param([{"agent": "default"}], "an array", id="array-of-a-request"),
    pytest.param("default", "a string", id="string"),
    pytest.param(7, "a number", id="number"),
    pytest.param(None, "null", id="null"),
    pytest.param(True, "a boolean", id="boolean"),
]


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def edge(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Edge]:
    async with edge_for(settings_with_keys(tmp_path_factory.mktemp("keys"))) as edge:
        yield edge


async def session_ids(edge: Edge) -> set[str]:
    listed = await edge.unary("ListSessions", {})
    assert listed.status_code == 200, listed.text
    return {s["sessionId"] for s in listed.json().get("sessions", [])}


async def post_json(edge: Edge, method: str, body: Any) -> Any:
    """A Connect unary call whose body is this JSON value, whatever it is."""
    return await edge.http.post(
        f"{SERVICE}/{method}",
        content=json.dumps(body).encode(),
        headers={"content-type": "application/json", "connect-protocol-version": "1", **AUTH},
    )


@pytest.mark.parametrize(("body", "kind"), NOT_OBJECTS)
async def test_a_connect_body_that_is_not_an_object_creates_nothing(edge: Edge, body: Any, kind: str) -> None:
    before = await session_ids(edge)
    reply = await post_json(edge, "CreateSession", body)
    assert reply.status_code == 400, reply.text
    error = reply.json()
    assert error["code"] == "invalid_argument"
    assert error["message"] == (
        f"the request must be a JSON object (a cogmesh.gateway.v1.CreateSessionRequest), not {kind}"
    )
    assert decode_details(error["details"])["google.rpc.ErrorInfo"].reason == "INVALID_ARGUMENT"
    assert await session_ids(edge) == before, "no session was created"


async def test_a_message_field_that_is_not_an_object_is_named(edge: Edge) -> None:
    session_id = await new_session(edge)
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"clientTools": [[]]}, "client_tools[0]", "a cogmesh.common.v1.ToolSpec), not an array"),
        ({"limits": []}, "limits", "a cogmesh.common.v1.TurnLimits), not an array"),
        ({"costBudget": "cheap"}, "cost_budget", "a cogmesh.common.v1.CostBudget), not a string"),
    ]
    for extra, field, wanted in cases:
        _, end = await edge.stream("SendMessage", {"sessionId": session_id, "content": "What is 2 + 2?", **extra})
        error = end.get("error")
        assert error is not None and error["code"] == "invalid_argument", (extra, end)
        assert wanted in error["message"], error["message"]
        violations = decode_details(error["details"])["google.rpc.BadRequest"].field_violations
        assert [(v.field, v.description.startswith("must be a JSON object")) for v in violations] == [(field, True)]
    assert await replay(edge, session_id) == [], "no turn was accepted"
    # The same options as objects are a turn like any other.
    messages, end = await edge.stream(
        "SendMessage", {"sessionId": session_id, "content": "What is 2 + 2?", "limits": {}, "clientTools": []}
    )
    assert end == {} and messages[-1]["events"][-1]["final"]["text"] == "2 + 2 = 4."


async def test_a_connect_stream_message_that_is_not_an_object_is_refused(edge: Edge) -> None:
    response = await edge.http.post(
        f"{SERVICE}/Subscribe",
        content=envelope([]),  # type: ignore[arg-type]
        headers={"content-type": "application/connect+json", **AUTH},
    )
    _, end = read_envelopes(response.content)
    assert end["error"]["code"] == "invalid_argument"
    assert "must be a JSON object (a cogmesh.gateway.v1.SubscribeRequest), not an array" in end["error"]["message"]


async def test_grpc_web_json_that_is_not_an_object_creates_nothing(edge: Edge) -> None:
    before = await session_ids(edge)
    data = b"[]"
    reply = await edge.http.post(
        f"{SERVICE}/CreateSession",
        content=struct.pack(">BI", 0, len(data)) + data,
        headers={"content-type": "application/grpc-web+json", "x-grpc-web": "1", **AUTH},
    )
    assert reply.status_code == 200, reply.text  # gRPC-Web: the status is in the trailers
    status = reply.headers.get("grpc-status")
    message = reply.headers.get("grpc-message", "")
    if status is None:  # trailers in the body's last frame
        flags, length = struct.unpack_from(">BI", reply.content)
        assert flags == 0x80, reply.content
        trailer = dict(line.split(": ", 1) for line in reply.content[5 : 5 + length].decode().split("\r\n") if line)
        status, message = trailer["grpc-status"], trailer.get("grpc-message", "")
    assert status == "3", (status, message)  # INVALID_ARGUMENT
    assert (
        unquote(message)
        == "the request must be a JSON object (a cogmesh.gateway.v1.CreateSessionRequest), not an array"
    )
    assert await session_ids(edge) == before


async def test_the_edge_serves_json_objects_as_before(edge: Edge) -> None:
    created = await post_json(edge, "CreateSession", {"agent": "default", "scope": {"end_user": "bo"}})
    assert created.status_code == 200, created.text
    assert created.json()["session"]["scope"] == {"end_user": "bo"}
