"""The browser edge (gateway/web) without a browser: Connect (JSON on the wire, read here by
hand), gRPC-Web (connectrpc's own client), errors with the gateway's google.rpc details, auth,
deadlines, cancellation, CORS and the console's routes, against the real suite with API keys."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import socket
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import pytest_asyncio
import uvicorn
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from connectrpc.protocol import ProtocolType
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from cogmesh.common.v1 import events_pb2
from cogmesh.gateway.v1 import gateway_pb2
from cogmesh.gateway.v1.gateway_connect import GatewayServiceClient
from gateway.auth import hash_key
from gateway.web.app import create_app
from services.suite.settings import SuiteSettings
from tests.integration.conftest import SUITE_SETTINGS, running_suite

pytestmark = pytest.mark.asyncio(loop_scope="module")

KEY = "key-web-edge"
AUTH = {"authorization": f"Bearer {KEY}"}
ORIGIN = "https://app.example"
SERVICE = "/cogmesh.gateway.v1.GatewayService"
TIMEOUT_S = 15.0
END_STREAM = 0x02  # Connect's flag on the last envelope of a stream


@dataclass
class Edge:
    url: str
    http: httpx.AsyncClient
    gateway: Any  # GatewayServiceStub on the gateway's gRPC port, for comparison

    async def unary(self, method: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> httpx.Response:
        """A Connect unary call, JSON on the wire."""
        return await self.http.post(
            f"{SERVICE}/{method}",
            json=body,
            headers={"connect-protocol-version": "1", **AUTH, **(headers or {})},
        )

    async def stream(
        self, method: str, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """A Connect server stream, JSON on the wire: (messages, the end-of-stream message)."""
        response = await self.http.post(
            f"{SERVICE}/{method}",
            content=envelope(body),
            headers={"content-type": "application/connect+json", **AUTH, **(headers or {})},
        )
        assert response.status_code == 200, response.text
        return read_envelopes(response.content)


def envelope(message: dict[str, Any], flags: int = 0) -> bytes:
    data = json.dumps(message).encode()
    return struct.pack(">BI", flags, len(data)) + data


def read_envelopes(data: bytes) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    messages, end, offset = [], None, 0
    while offset < len(data):
        flags, length = struct.unpack_from(">BI", data, offset)
        body = json.loads(data[offset + 5 : offset + 5 + length])
        offset += 5 + length
        if flags & END_STREAM:
            end = body
        else:
            messages.append(body)
    assert end is not None, "the stream has no end-of-stream message"
    return messages, end


def keys_file(tmp: Path) -> Path:
    path = tmp / "keys.yaml"
    path.write_text(f"keys:\n  - {{sha256: {hash_key(KEY)}, tenant: webco, principal: web-app}}\n")
    return path


@contextlib.asynccontextmanager
async def edge_for(settings: SuiteSettings) -> AsyncIterator[Edge]:
    """The suite with these settings and the edge in front of it, served by uvicorn on a free port."""
    async with running_suite(settings) as (suite, stubs):
        edge_settings = settings.model_copy(update={"gateway_addr": suite.gateway_address})
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        server = uvicorn.Server(uvicorn.Config(create_app(edge_settings), lifespan="on", log_config=None))
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        try:
            async with httpx.AsyncClient(base_url=url, timeout=TIMEOUT_S) as http:
                async with asyncio.timeout(TIMEOUT_S):
                    while not server.started:  # uvicorn sets it once it accepts connections
                        assert not serving.done(), serving
                        await asyncio.sleep(0.01)
                yield Edge(url, http, stubs["gateway"])
        finally:
            server.should_exit = True
            await serving
            sock.close()


def settings_with_keys(tmp: Path, **changes: Any) -> SuiteSettings:
    update = {"api_keys_file": keys_file(tmp), "dev_mode": False, "web_cors_origins": ORIGIN, **changes}
    return SUITE_SETTINGS.model_copy(update=update)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def edge(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Edge]:
    async with edge_for(settings_with_keys(tmp_path_factory.mktemp("keys"))) as edge:
        yield edge


async def new_session(edge: Edge, agent: str = "default") -> str:
    reply = await edge.unary("CreateSession", {"agent": agent})
    assert reply.status_code == 200, reply.text
    return str(reply.json()["session"]["sessionId"])


def decode_details(details: list[dict[str, str]]) -> dict[str, Any]:
    """Connect's error details (type, unpadded base64 value) as google.rpc messages by type name."""
    types = {
        "google.rpc.ErrorInfo": error_details_pb2.ErrorInfo,
        "google.rpc.BadRequest": error_details_pb2.BadRequest,
        "google.rpc.RetryInfo": error_details_pb2.RetryInfo,
    }
    return {d["type"]: types[d["type"]].FromString(base64.b64decode(d["value"] + "==")) for d in details}


async def replay(edge: Edge, session_id: str) -> list[events_pb2.RuntimeEvent]:
    """The session's log as the gateway's gRPC port serves it."""
    request = gateway_pb2.SubscribeRequest(session_id=session_id, stop_when_idle=True)
    return [e async for reply in edge.gateway.Subscribe(request, metadata=tuple(AUTH.items())) for e in reply.events]


async def follow_until_turn_ends(edge: Edge, session_id: str) -> list[events_pb2.RuntimeEvent]:
    """Follow the session on the gRPC port until its turn's final or error event."""
    call = edge.gateway.Subscribe(gateway_pb2.SubscribeRequest(session_id=session_id), metadata=tuple(AUTH.items()))
    log: list[events_pb2.RuntimeEvent] = []
    try:
        async with asyncio.timeout(TIMEOUT_S):
            async for reply in call:
                log.extend(reply.events)
                if log and log[-1].WhichOneof("payload") in ("final", "error"):
                    return log
    finally:
        call.cancel()
    raise AssertionError(f"Subscribe ended before the turn did: {log}")


async def test_connect_unary_json(edge: Edge) -> None:
    reply = await edge.unary("ListAgents", {})
    assert reply.status_code == 200 and reply.headers["content-type"] == "application/json"
    assert {"default", "careful"} <= {agent["name"] for agent in reply.json()["agents"]}


async def test_json_with_a_field_the_protos_lack_is_refused_naming_it(edge: Edge) -> None:
    # A typo dropped silently would create an unscoped session; the protobuf JSON mapping refuses it.
    reply = await edge.unary("CreateSession", {"agent": "default", "scopes": {"end_user": "alice"}})
    assert reply.status_code == 400, reply.text
    assert reply.json()["code"] == "invalid_argument" and "scopes" in reply.json()["message"]
    created = await edge.unary("CreateSession", {"agent": "default", "scope": {"end_user": "alice"}})
    assert created.status_code == 200 and created.json()["session"]["scope"] == {"end_user": "alice"}


async def test_connect_server_stream_carries_a_whole_turn(edge: Edge) -> None:
    session_id = await new_session(edge)
    messages, end = await edge.stream("SendMessage", {"sessionId": session_id, "content": "What is 17 * 23?"})
    assert end == {}, "a turn that ended well has no error at the end of its stream"
    events = [event for message in messages for event in message["events"]]
    assert [int(e["seq"]) for e in events] == list(range(1, len(events) + 1))
    started = [e["toolCallStarted"] for e in events if "toolCallStarted" in e]
    assert [(s["name"], s["arguments"]) for s in started] == [("calculator", {"expression": "17 * 23"})]
    assert events[-1]["final"]["text"] == "17 * 23 = 391."
    # The same events, in the same order, as the gRPC port replays them.
    assert [int(e["seq"]) for e in events] == [e.seq for e in await replay(edge, session_id)]


async def test_grpc_web_unary_and_stream_with_connectrpcs_client(edge: Edge) -> None:
    async with GatewayServiceClient(edge.url, protocol=ProtocolType.GRPC_WEB) as client:
        created = await client.create_session(gateway_pb2.CreateSessionRequest(agent="default"), headers=AUTH)
        session_id = created.session.session_id
        request = gateway_pb2.SendMessageRequest(session_id=session_id, content="What is 6 * 7?")
        events = [e async for reply in client.send_message(request, headers=AUTH) for e in reply.events]
        assert events[-1].final.text == "6 * 7 = 42."
        follow = gateway_pb2.SubscribeRequest(session_id=session_id, after_seq=2, stop_when_idle=True)
        replayed = [e async for reply in client.subscribe(follow, headers=AUTH) for e in reply.events]
    assert [e.seq for e in replayed] == [e.seq for e in events[2:]]
    assert replayed == events[2:]  # byte-identical protobuf messages, create_time included


async def test_errors_carry_the_gateways_details(edge: Edge) -> None:
    reply = await edge.unary("GetSession", {"sessionId": ""})
    assert reply.status_code == 400
    error = reply.json()
    assert error["code"] == "invalid_argument" and "session_id" in error["message"]
    details = decode_details(error["details"])
    assert details["google.rpc.ErrorInfo"].reason == "INVALID_ARGUMENT"
    assert [v.field for v in details["google.rpc.BadRequest"].field_violations] == ["session_id"]

    # The same bytes as the gRPC port's google.rpc.Status details.
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await edge.gateway.GetSession(gateway_pb2.GetSessionRequest(), metadata=tuple(AUTH.items()))
    status = rpc_status.from_call(caught.value)  # type: ignore[arg-type]
    assert status is not None
    assert [(d.type_url.removeprefix("type.googleapis.com/"), d.value) for d in status.details] == [
        (d["type"], base64.b64decode(d["value"] + "==")) for d in error["details"]
    ]

    missing = await edge.unary("GetSession", {"sessionId": "nope"})
    assert missing.status_code == 404
    assert decode_details(missing.json()["details"])["google.rpc.ErrorInfo"].reason == "SESSION_NOT_FOUND"

    # gRPC-Web: the same details, read by connectrpc's client from grpc-status-details-bin.
    async with GatewayServiceClient(edge.url, protocol=ProtocolType.GRPC_WEB) as client:
        with pytest.raises(ConnectError) as web_error:
            await client.get_session(gateway_pb2.GetSessionRequest(session_id="nope"), headers=AUTH)
    assert web_error.value.code == Code.NOT_FOUND
    info = error_details_pb2.ErrorInfo.FromString(web_error.value.details[0].message_bytes)
    assert web_error.value.details[0].type_name == "google.rpc.ErrorInfo" and info.reason == "SESSION_NOT_FOUND"


async def test_a_stream_that_fails_ends_with_the_error(edge: Edge) -> None:
    messages, end = await edge.stream("SendMessage", {"sessionId": "nope", "content": "hi"})
    assert messages == []
    assert end["error"]["code"] == "not_found"
    assert decode_details(end["error"]["details"])["google.rpc.ErrorInfo"].reason == "SESSION_NOT_FOUND"


async def test_calls_without_a_valid_key_are_unauthenticated(edge: Edge) -> None:
    for headers in ({"authorization": ""}, {"authorization": "Bearer wrong"}):
        reply = await edge.unary("ListSessions", {}, headers=headers)
        assert reply.status_code == 401, reply.text
        assert reply.json()["code"] == "unauthenticated"
        assert decode_details(reply.json()["details"])["google.rpc.ErrorInfo"].reason == "UNAUTHENTICATED"
    _, end = await edge.stream("Subscribe", {"sessionId": "x"}, headers={"authorization": "Bearer wrong"})
    assert end["error"]["code"] == "unauthenticated"


async def test_tenancy_is_the_gateways(edge: Edge) -> None:
    session_id = await new_session(edge)
    listed = (await edge.unary("ListSessions", {})).json()["sessions"]
    assert session_id in [s["sessionId"] for s in listed]
    assert {s["tenantId"] for s in listed} == {"webco"}


async def test_converse_is_refused_with_the_reason(edge: Edge) -> None:
    response = await edge.http.post(
        f"{SERVICE}/Converse", content=envelope({}), headers={"content-type": "application/connect+json", **AUTH}
    )
    _, end = read_envelopes(response.content)
    assert end["error"]["code"] == "unimplemented"
    assert "bidirectional" in end["error"]["message"] and "SendMessage" in end["error"]["message"]


async def test_cors_preflight_and_exposed_headers(edge: Edge) -> None:
    wanted = "authorization,content-type,connect-protocol-version,connect-timeout-ms,x-grpc-web,x-user-agent"
    preflight = await edge.http.options(
        f"{SERVICE}/SendMessage",
        headers={"origin": ORIGIN, "access-control-request-method": "POST", "access-control-request-headers": wanted},
    )
    assert preflight.status_code == 200, preflight.text
    assert preflight.headers["access-control-allow-origin"] == ORIGIN
    assert set(wanted.split(",")) <= set(preflight.headers["access-control-allow-headers"].lower().split(", "))

    stranger = await edge.http.options(
        f"{SERVICE}/SendMessage",
        headers={"origin": "https://evil.example", "access-control-request-method": "POST"},
    )
    assert stranger.status_code == 400 and "access-control-allow-origin" not in stranger.headers

    # A gRPC-Web error is in headers a page can only read when they are exposed.
    reply = await edge.http.post(
        f"{SERVICE}/GetSession",
        content=b"\x00\x00\x00\x00\x00",
        headers={"origin": ORIGIN, "content-type": "application/grpc-web+proto", "x-grpc-web": "1", **AUTH},
    )
    assert reply.headers["access-control-allow-origin"] == ORIGIN
    assert {"grpc-status", "grpc-status-details-bin"} <= set(reply.headers["access-control-expose-headers"].split(", "))
    flags, length = struct.unpack_from(">BI", reply.content)
    assert flags == 0x80, "gRPC-Web carries the status in a trailer frame of the body"
    trailer = dict(line.split(": ", 1) for line in reply.content[5 : 5 + length].decode().split("\r\n") if line)
    assert trailer["grpc-status"] == "3" and "session_id" in trailer["grpc-message"]  # INVALID_ARGUMENT
    assert "grpc-status-details-bin" in trailer


async def test_health_and_console_routes(edge: Edge, tmp_path: Path) -> None:
    health = await edge.http.get("/healthz")
    assert health.status_code == 200 and health.json()["status"] == "SERVING"
    root = await edge.http.get("/")
    assert root.status_code == 307 and root.headers["location"] == "/console/"


async def test_console_is_served_or_named_as_not_built(tmp_path: Path) -> None:
    built = tmp_path / "built"
    built.mkdir()
    (built / "index.html").write_text("<!doctype html><title>cogmesh</title>")
    settings = SUITE_SETTINGS.model_copy(update={"web_console_dir": built})
    async with edge_for(settings) as edge:
        page = await edge.http.get("/console/")
        assert page.status_code == 200 and "<title>cogmesh</title>" in page.text
    empty = SUITE_SETTINGS.model_copy(update={"web_console_dir": tmp_path / "nothing"})
    async with edge_for(empty) as edge:
        page = await edge.http.get("/console/")
        assert page.status_code == 503 and "make console" in page.text


async def test_the_callers_deadline_bounds_the_turn(tmp_path: Path) -> None:
    # A slow model: 200 tokens 50 ms apart would take 10 s; the caller gives the call 1.5 s.
    slow = settings_with_keys(tmp_path, local_delay_ms=50, local_reply_tokens=200)
    async with edge_for(slow) as edge:
        session_id = await new_session(edge)
        _, end = await edge.stream(
            "SendMessage", {"sessionId": session_id, "content": "hello"}, headers={"connect-timeout-ms": "1500"}
        )
        assert end["error"]["code"] == "deadline_exceeded", end
        # The deadline reached the gateway (which bounds the turn by it), not only the edge: the turn
        # itself ended, early, with an error event, instead of running on to its 200th token.
        log = await follow_until_turn_ends(edge, session_id)
        assert log[-1].WhichOneof("payload") == "error"
        assert sum(1 for e in log if e.WhichOneof("payload") == "assistant_delta") < 200


async def test_a_browser_that_goes_away_frees_its_stream(tmp_path: Path) -> None:
    # One open stream per tenant: a Subscribe the edge did not cancel at the gateway would hold it.
    async with edge_for(settings_with_keys(tmp_path, tenant_max_streams=1)) as edge:
        session_id = await new_session(edge)
        body = envelope({"sessionId": session_id})
        headers = {"content-type": "application/connect+json", **AUTH}
        async with edge.http.stream("POST", f"{SERVICE}/Subscribe", content=body, headers=headers) as first:
            chunks = first.aiter_raw()  # held: a dropped iterator would close the response right away
            await anext(chunks)  # a heartbeat: the stream is open at the gateway
            _, end = await edge.stream("Subscribe", {"sessionId": session_id})
            assert end["error"]["code"] == "resource_exhausted", "the cap is one stream"
        # The first stream's connection is closed: its slot comes back once the gateway hears of it.
        async with asyncio.timeout(2 * TIMEOUT_S):
            while True:
                _, end = await edge.stream("Subscribe", {"sessionId": session_id, "stopWhenIdle": True})
                if end == {}:
                    break
                assert end["error"]["code"] == "resource_exhausted", end
                await asyncio.sleep(0.05)


async def test_rate_limits_come_with_retry_info(tmp_path: Path) -> None:
    async with edge_for(settings_with_keys(tmp_path, tenant_burst=1, tenant_rate_per_s=0.01)) as edge:
        assert (await edge.unary("ListAgents", {})).status_code == 200
        refused = await edge.unary("ListAgents", {})
        assert refused.status_code == 429 and refused.json()["code"] == "resource_exhausted"
        details = decode_details(refused.json()["details"])
        assert details["google.rpc.ErrorInfo"].reason == "RATE_LIMITED"
        assert details["google.rpc.RetryInfo"].retry_delay.seconds >= 1
