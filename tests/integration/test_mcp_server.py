"""The browser edge's MCP server (gateway/web/mcp_server.py) through the real `mcp` Python client:
streamable HTTP with the initialize handshake (ClientSession) and the 2026-07-28 per-request era
(mcp.Client), against the suite with API keys and two edges in front of one gateway."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import mcp
import mcp_types
import pytest
import pytest_asyncio
import uvicorn
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from cogmesh.common.v1 import events_pb2
from cogmesh.gateway.v1 import gateway_pb2
from gateway.auth import hash_key
from gateway.settings import GatewaySettings
from gateway.web.app import create_app
from gateway.web.mcp_server import SESSION_META, TURN_META, WAITING_META
from tests.integration.conftest import SUITE_SETTINGS, running_suite

pytestmark = pytest.mark.asyncio(loop_scope="module")

KEY, OTHER_KEY = "key-mcp", "key-mcp-other-tenant"
AUTH = {"authorization": f"Bearer {KEY}"}
ERAS = ["handshake", "per-request"]
SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
AGENTS = {
    "helper.yaml": (
        "name: helper\ndescription: Answers arithmetic with the calculator.\ntools: [calculator]\nmcp_exposed: true\n"
    ),
    "shaped.yaml": (
        "name: shaped\ndescription: Answers with an object.\nmcp_exposed: true\n"
        "output_schema:\n  type: object\n  properties: {answer: {type: string}}\n  required: [answer]\n"
    ),
    "careful.yaml": (
        "name: careful\ndescription: Waits for approvals and asks questions.\ntools: [calculator, ask_user]\n"
        "interrupt_on: {calculator: true}\nmcp_exposed: true\n"
    ),
    "limited.yaml": (
        "name: limited\ndescription: Stops after one model call.\ntools: [calculator]\n"
        "limits: {max_iterations: 1, on_tool_limit: error}\nmcp_exposed: true\n"
    ),
    # Not offered: not opted in, or unable to own a session.
    "private.yaml": "name: private\ndescription: Not for MCP.\na2a_exposed: true\n",
    "worker.yaml": "name: worker\ndescription: A subagent.\nmode: subagent\nmcp_exposed: true\n",
}


@dataclass
class Edges:
    urls: list[str]  # two edges in front of one gateway: the MCP server keeps no state of its own
    gateway: Any  # GatewayServiceStub on the gateway's gRPC port


@contextlib.asynccontextmanager
async def serving(settings: GatewaySettings) -> AsyncIterator[str]:
    """One edge served by uvicorn on a free port; its /mcp URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(settings), lifespan="on", log_config=None))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:  # uvicorn sets it once it accepts connections
            assert not serving.done(), serving
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    finally:
        server.should_exit = True
        await serving
        sock.close()


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def edges(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Edges]:
    tmp = tmp_path_factory.mktemp("mcp")
    keys = tmp / "keys.yaml"
    keys.write_text(
        "keys:\n"
        f"  - {{sha256: {hash_key(KEY)}, tenant: mcpco, principal: mcp-app}}\n"
        f"  - {{sha256: {hash_key(OTHER_KEY)}, tenant: otherco, principal: other-app}}\n"
    )
    agents = tmp / "agents"
    agents.mkdir()
    for name, text in AGENTS.items():
        (agents / name).write_text(text)
    settings = SUITE_SETTINGS.model_copy(update={"api_keys_file": keys, "dev_mode": False, "agents_dir": agents})
    async with running_suite(settings) as (suite, stubs):
        edge_settings = settings.model_copy(update={"gateway_addr": suite.gateway_address})
        async with serving(edge_settings) as first, serving(edge_settings) as second:
            yield Edges([first, second], stubs["gateway"])


class Caller:
    """The real MCP client over streamable HTTP in either era, with list_tools and call_tool."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.progress: list[tuple[float, str | None]] = []
        self.streaming = asyncio.Event()  # set by the first progress notification

    async def list_tools(self) -> dict[str, mcp_types.Tool]:
        return {t.name: t for t in (await self.client.list_tools()).tools}

    async def call(self, name: str, arguments: dict[str, Any], progress: bool = False) -> mcp_types.CallToolResult:
        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            self.progress.append((value, message))
            self.streaming.set()

        result: mcp_types.CallToolResult = await self.client.call_tool(
            name, arguments, progress_callback=on_progress if progress else None
        )
        return result


@contextlib.asynccontextmanager
async def caller(url: str, era: str = "handshake", headers: dict[str, str] | None = None) -> AsyncIterator[Caller]:
    http = create_mcp_http_client(headers=AUTH if headers is None else headers)
    if era == "handshake":  # the 2025 handshake: initialize, then requests
        async with (
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield Caller(session)
    else:  # mcp.Client's default: probes server/discover, then one self-contained POST per request
        async with mcp.Client(streamable_http_client(url, http_client=http)) as client:
            yield Caller(client)


def text_of(result: mcp_types.CallToolResult) -> str:
    assert len(result.content) == 1 and isinstance(result.content[0], mcp_types.TextContent), result
    return result.content[0].text


def leaves(error: BaseException) -> Iterator[BaseException]:
    """The exceptions inside (nested) exception groups: the client raises from its task groups."""
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            yield from leaves(inner)
    else:
        yield error


async def session_of(edges: Edges, session_id: str) -> Any:
    reply = await edges.gateway.GetSession(
        gateway_pb2.GetSessionRequest(session_id=session_id), metadata=tuple(AUTH.items())
    )
    return reply.session


@pytest.mark.parametrize("era", ERAS)
async def test_only_opted_in_agents_are_tools(edges: Edges, era: str) -> None:
    async with caller(edges.urls[0], era) as mcp_caller:
        tools = await mcp_caller.list_tools()
    assert sorted(tools) == ["careful", "helper", "limited", "shaped"]  # not private (not opted in), not worker
    helper = tools["helper"]
    assert helper.description == "Answers arithmetic with the calculator."
    assert helper.input_schema["required"] == ["message"]
    assert set(helper.input_schema["properties"]) == {"message", "session_id"}
    assert helper.output_schema is None
    assert tools["shaped"].output_schema == SCHEMA


@pytest.mark.parametrize("era", ERAS)
async def test_a_call_is_a_turn_whose_final_text_is_the_result(edges: Edges, era: str) -> None:
    async with caller(edges.urls[0], era) as mcp_caller:
        result = await mcp_caller.call("helper", {"message": "What is 17 * 23?"})
    assert not result.is_error and text_of(result) == "17 * 23 = 391."
    assert result.meta is not None and result.meta[TURN_META]
    session = await session_of(edges, result.meta[SESSION_META])  # a session of the key's tenant
    assert (session.agent, session.tenant_id, session.message_count) == ("helper", "mcpco", 4)


async def test_structured_output_is_structured_content(edges: Edges) -> None:
    async with caller(edges.urls[0]) as mcp_caller:
        # The client checks structuredContent against the tool's outputSchema itself.
        result = await mcp_caller.call("shaped", {"message": '@final_response {"answer": "yes"}'})
    assert not result.is_error and result.structured_content == {"answer": "yes"}
    assert '"answer"' in text_of(result)


@pytest.mark.parametrize("era", ERAS)
async def test_progress_notifications_carry_the_deltas(edges: Edges, era: str) -> None:
    # The deltas the gateway sends together make one notification (here, with an instant model, often
    # all of them); the next test shows them arriving while the turn runs.
    message = "tell me something long enough to stream in several deltas please"
    async with caller(edges.urls[0], era) as mcp_caller:
        result = await mcp_caller.call("helper", {"message": message}, progress=True)
        progress = mcp_caller.progress
    assert not result.is_error and progress
    assert [value for value, _ in progress] == list(range(1, len(progress) + 1))
    assert "".join(text or "" for _, text in progress) == text_of(result)


async def test_a_session_continues_through_another_edge(edges: Edges) -> None:
    async with caller(edges.urls[0]) as first:
        started = await first.call("helper", {"message": "What is 6 * 7?"})
    assert started.meta is not None
    session_id = started.meta[SESSION_META]
    async with caller(edges.urls[1], "per-request") as second:
        continued = await second.call("helper", {"message": "And 2 + 2?", "session_id": session_id})
        elsewhere = await second.call("careful", {"message": "hello", "session_id": session_id})
    assert not continued.is_error and text_of(continued) == "2 + 2 = 4."
    assert continued.meta is not None and continued.meta[SESSION_META] == session_id
    assert continued.meta[TURN_META] != started.meta[TURN_META]
    assert (await session_of(edges, session_id)).message_count == 8  # two turns of user, call, result, answer
    assert elsewhere.is_error
    assert text_of(elsewhere) == f"session {session_id!r} is a session of the agent 'helper', not of 'careful'"


async def test_another_tenants_session_is_not_found(edges: Edges) -> None:
    async with caller(edges.urls[0]) as mine:
        started = await mine.call("helper", {"message": "What is 1 + 1?"})
    assert started.meta is not None
    async with caller(edges.urls[0], headers={"authorization": f"Bearer {OTHER_KEY}"}) as theirs:
        result = await theirs.call("helper", {"message": "hi", "session_id": started.meta[SESSION_META]})
    assert result.is_error and text_of(result).startswith("NOT_FOUND: ")
    assert result.meta is not None and result.meta["dev.cogmesh/error"]["reason"] == "SESSION_NOT_FOUND"


@pytest.mark.parametrize("headers", [{"authorization": "Bearer wrong"}, {}], ids=["wrong-key", "no-key"])
@pytest.mark.parametrize("era", ERAS)
async def test_a_bad_key_is_refused_before_mcp_starts(edges: Edges, era: str, headers: dict[str, str]) -> None:
    with pytest.raises(BaseException) as raised:
        async with caller(edges.urls[0], era, headers) as mcp_caller:
            await mcp_caller.list_tools()
    errors = [e for e in leaves(raised.value) if isinstance(e, mcp.MCPError)]
    assert errors and errors[0].message.startswith("UNAUTHENTICATED: "), raised.value

    async with httpx.AsyncClient() as http:
        reply = await http.post(
            edges.urls[0],
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"accept": "application/json, text/event-stream", **headers},
        )
    assert reply.status_code == 401 and reply.headers["www-authenticate"].startswith("Bearer")
    assert reply.json()["error"]["message"].startswith("UNAUTHENTICATED: ")


@pytest.mark.parametrize("name", ["nope", "private", "worker"])
async def test_an_unknown_tool_is_an_mcp_error_naming_it(edges: Edges, name: str) -> None:
    async with caller(edges.urls[0]) as mcp_caller:
        with pytest.raises(mcp.MCPError) as raised:
            await mcp_caller.call(name, {"message": "hi"})
    assert raised.value.code == mcp_types.INVALID_PARAMS
    assert raised.value.message == f"unknown tool {name!r}; the tools are: careful, helper, limited, shaped"


async def test_a_turn_error_is_an_error_result_with_its_message(edges: Edges) -> None:
    async with caller(edges.urls[0]) as mcp_caller:
        result = await mcp_caller.call("limited", {"message": "What is 3 * 3?"})
        bad = await mcp_caller.call("helper", {"message": "  "})
    assert result.is_error and text_of(result).startswith("loop_limit: ")
    assert result.meta is not None and result.meta["dev.cogmesh/error"]["kind"] == "loop_limit"
    assert bad.is_error and text_of(bad) == "arguments.message: a non-empty string is required"


async def test_a_paused_turn_says_what_it_waits_for_and_is_answered_by_the_next_call(edges: Edges) -> None:
    async with caller(edges.urls[0]) as mcp_caller:
        paused = await mcp_caller.call("careful", {"message": "What is 2 * 3?"})
        assert not paused.is_error and paused.meta is not None
        session_id = paused.meta[SESSION_META]
        waiting = paused.meta[WAITING_META]
        assert (waiting["kind"], waiting["tool"], waiting["arguments"]) == (
            "approval",
            "calculator",
            {"expression": "2 * 3"},
        )
        assert f"session_id {session_id!r}" in text_of(paused) and "'approve'" in text_of(paused)

        unclear = await mcp_caller.call("careful", {"message": "maybe", "session_id": session_id})
        assert unclear.is_error and "waits for an approval" in text_of(unclear)
        approved = await mcp_caller.call("careful", {"message": "approve", "session_id": session_id})
        assert not approved.is_error and text_of(approved) == "2 * 3 = 6."
        assert approved.meta is not None and approved.meta[TURN_META] == paused.meta[TURN_META]

        again = await mcp_caller.call("careful", {"message": "What is 4 * 4?", "session_id": session_id})
        rejected = await mcp_caller.call("careful", {"message": "reject: not now", "session_id": session_id})
        assert again.meta is not None and again.meta[WAITING_META]["kind"] == "approval"
        assert not rejected.is_error and "not now" in text_of(rejected)

        asked = await mcp_caller.call("careful", {"message": "@ask_user What is your name?", "session_id": session_id})
        assert asked.meta is not None and asked.meta[WAITING_META]["kind"] == "user_input"
        assert asked.meta[WAITING_META]["prompt"] == "What is your name?"
        answered = await mcp_caller.call("careful", {"message": "Ada", "session_id": session_id})
    assert not answered.is_error and "Ada" in text_of(answered)


@pytest.mark.parametrize("era", ERAS)
async def test_deltas_arrive_while_the_turn_runs_and_a_caller_that_leaves_cancels_it(era: str) -> None:
    # A slow model with a long reply (50 s), so the turn is still running when the caller leaves.
    settings = SUITE_SETTINGS.model_copy(update={"local_delay_ms": 50, "local_reply_tokens": 1000})
    async with running_suite(settings) as (suite, stubs):
        async with serving(settings.model_copy(update={"gateway_addr": suite.gateway_address})) as url:
            streaming = asyncio.Event()

            async def call() -> None:
                async with caller(url, era, headers={}) as mcp_caller:
                    mcp_caller.streaming = streaming
                    await mcp_caller.call("default", {"message": "hello"}, progress=True)

            task = asyncio.create_task(call())
            await streaming.wait()
            gateway = stubs["gateway"]
            (session,) = (await gateway.ListSessions(gateway_pb2.ListSessionsRequest())).sessions
            assert session.active_turn_id  # the first delta came while the turn runs
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        events = []
        async for reply in gateway.Subscribe(
            gateway_pb2.SubscribeRequest(session_id=session.session_id, stop_when_idle=True)
        ):
            events += reply.events  # until the turn has ended
    assert events[-1].error.kind == events_pb2.ERROR_KIND_CANCELLED
