"""MCP tool servers through the `mcp` SDK: the real @modelcontextprotocol/server-everything from npm and a
Python MCP server, each over stdio and streamable HTTP; the Node ToolService; the tool catalog."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import mcp
import pytest

from cogmesh.common.v1 import events_pb2
from services.runtime.loop import run_turn
from services.runtime.tools.base import ToolContext, ToolError, ToolUnavailable
from services.runtime.tools.breaker import BreakerRegistry
from services.runtime.tools.builtin import builtin_tools
from services.runtime.tools.catalog import ToolCatalog, ToolServersError, load_tool_servers
from services.runtime.tools.mcp_client import McpServer
from services.runtime.tools.remote import RemoteToolServer
from services.runtime.turn import ModelInfo, Turn, Verdict
from tests.fakes.models import ScriptedModel, calls, text
from tests.fakes.processes import EVERYTHING, PYTHON_MCP, ROOT, mcp_http_server, node_tool_server, require_node_tools

TIMEOUT_S = 30.0


def python_stdio() -> mcp.StdioServerParameters:
    return mcp.StdioServerParameters(command=PYTHON_MCP[0], args=[*PYTHON_MCP[1:], "stdio"], cwd=ROOT)


def everything_stdio() -> mcp.StdioServerParameters:
    require_node_tools()
    return mcp.StdioServerParameters(command="node", args=[str(EVERYTHING), "stdio"])


async def bounded(awaitable: Any) -> Any:
    return await asyncio.wait_for(awaitable, TIMEOUT_S)


@pytest.fixture(params=["stdio", "http"])
async def python_server(request: pytest.FixtureRequest) -> AsyncIterator[McpServer]:
    if request.param == "stdio":
        server = McpServer("py", python_stdio())
        yield server
        await server.close()
        return
    async with mcp_http_server("python") as url:
        server = McpServer("py", url)
        yield server
        await server.close()


@pytest.fixture(params=["stdio", "http"])
async def everything(request: pytest.FixtureRequest) -> AsyncIterator[McpServer]:
    if request.param == "stdio":
        server = McpServer("everything", everything_stdio())
        yield server
        await server.close()
        return
    async with mcp_http_server("everything") as url:
        server = McpServer("everything", url)
        yield server
        await server.close()


async def test_python_mcp_server_tools_are_namespaced_and_callable(python_server: McpServer) -> None:
    tools = {t.name: t for t in await bounded(python_server.list_tools())}
    assert {"mcp__py__add", "mcp__py__shout", "mcp__py__fail", "mcp__py__sleep"} <= set(tools)
    add = tools["mcp__py__add"]
    assert (add.source, add.server, add.is_mcp) == ("mcp", "py", True)
    assert add.schema.parameters["required"] == ["a", "b"] and "$schema" not in add.schema.parameters
    assert await bounded(add.run({"a": 2, "b": 3}, ToolContext())) == "5"
    with pytest.raises(ToolError, match="Error executing tool fail"):
        await bounded(tools["mcp__py__fail"].run({"message": "nope"}, ToolContext()))
    with pytest.raises(ToolError, match="validation error"):
        await bounded(add.run({"a": "x"}, ToolContext()))


async def test_the_real_everything_server_from_npm(everything: McpServer) -> None:
    tools = {t.name: t for t in await bounded(everything.list_tools())}
    assert {"mcp__everything__echo", "mcp__everything__get-sum"} <= set(tools)
    assert await bounded(tools["mcp__everything__echo"].run({"message": "hi"}, ToolContext())) == "Echo: hi"
    total = await bounded(tools["mcp__everything__get-sum"].run({"a": 2, "b": 40}, ToolContext()))
    assert total == "The sum of 2 and 40 is 42."
    with pytest.raises(ToolError, match="Invalid arguments"):
        await bounded(tools["mcp__everything__get-sum"].run({"a": "x"}, ToolContext()))


async def test_a_crashed_stdio_server_is_reported_then_restarted() -> None:
    server = McpServer("py", python_stdio())
    try:
        first_pid = int(await bounded(server.call("pid", {})))
        os.kill(first_pid, signal.SIGKILL)
        await asyncio.sleep(0.2)
        with pytest.raises(ToolUnavailable, match="'py'"):
            await bounded(server.call("pid", {}))
        second_pid = int(await bounded(server.call("pid", {})))  # the next call reconnects
        assert second_pid != first_pid
    finally:
        await server.close()


async def test_an_unreachable_server_is_unavailable_not_a_hang() -> None:
    server = McpServer("gone", "http://127.0.0.1:9/mcp", connect_timeout_s=3)
    with pytest.raises(ToolUnavailable, match="'gone'"):
        await bounded(server.list_tools())
    missing = McpServer("nocmd", mcp.StdioServerParameters(command="/nonexistent/server"), connect_timeout_s=3)
    with pytest.raises(ToolUnavailable, match="'nocmd'"):
        await bounded(missing.list_tools())


async def test_node_tool_service_through_the_grpc_client() -> None:
    async with node_tool_server() as address:
        server = RemoteToolServer("node", address, prefix="node_")
        try:
            tools = {t.name: t for t in await bounded(server.list_tools())}
            assert {"node_word_count", "node_reverse", "node_flaky", "node_whoami"} <= set(tools)
            assert tools["node_word_count"].schema.parameters["required"] == ["text"]
            assert await bounded(tools["node_reverse"].run({"text": "abc"}, ToolContext())) == "cba"
            who = await bounded(tools["node_whoami"].run({}, ToolContext("call-1", "sess-1", "acme")))
            assert who == '{"call_id":"call-1","session_id":"sess-1","tenant_id":"acme"}'
            with pytest.raises(ToolUnavailable, match="flaky: failure 1 of 1"):
                await bounded(tools["node_flaky"].run({"key": "k", "failures": 1}, ToolContext()))
            with pytest.raises(ToolError, match="refused: because"):
                await bounded(tools["node_refuse"].run({"reason": "because"}, ToolContext()))
        finally:
            await server.close()
    with pytest.raises(ToolUnavailable, match="failed to list tools: UNAVAILABLE"):
        await bounded(RemoteToolServer("down", address).list_tools())


async def allow(name: str, arguments: Mapping[str, Any]) -> Verdict:
    return Verdict(True, "ok", arguments)


async def test_mcp_and_node_tools_in_one_turn_with_a_retried_call(tmp_path: Path) -> None:
    """The loop runs MCP and remote tools in parallel; a flaky remote call is retried and succeeds."""
    async with node_tool_server() as address:
        config = tmp_path / "tools.yaml"
        config.write_text(
            "servers:\n"
            f"  py:\n    transport: stdio\n    command: {sys.executable}\n"
            f"    args: [-m, tests.fakes.mcp_server, stdio]\n    cwd: {ROOT}\n"
            f"  node:\n    transport: grpc\n    address: {address}\n    retries: 2\n"
        )
        catalog = ToolCatalog.from_file(builtin_tools(), config)
        try:
            tools, problems = await bounded(catalog.tools_for(["calculator", "mcp__py__*", "flaky", "word_count"]))
            assert problems == []
            assert {"calculator", "mcp__py__add", "mcp__py__shout", "flaky", "word_count"} <= set(tools)
            model = ScriptedModel(
                [
                    calls(
                        ("mcp__py__add", {"a": 1, "b": 2}),
                        ("flaky", {"key": "turn", "failures": 2}),
                        ("word_count", {"text": "one two three"}),
                    ),
                    text("all done"),
                ]
            )
            turn = Turn(
                turn_id="t1",
                system_prompt="",
                history=[],
                user_text="go",
                model=model,
                model_info=ModelInfo("scripted", "test"),
                tools=tools,
                check_tool=allow,
                breakers=catalog.breakers,
                tool_retry_base_s=0.01,
            )
            events = await bounded(_collect(turn))
        finally:
            await catalog.close()
    done = {e.tool_call_finished.name: e.tool_call_finished for e in events if e.HasField("tool_call_finished")}
    assert done["mcp__py__add"].result_summary == "3"
    assert (done["flaky"].ok, done["flaky"].attempts, done["flaky"].result_summary) == (
        True,
        3,
        "ok after 2 failure(s)",
    )
    assert done["word_count"].result_summary == "3"
    assert events[-1].final.text == "all done"


async def _collect(turn: Turn) -> list[events_pb2.RuntimeEvent]:
    return [event async for event in run_turn(turn)]


async def test_catalog_reports_a_down_server_and_opens_its_circuit(tmp_path: Path) -> None:
    config = tmp_path / "tools.yaml"
    config.write_text(
        "breaker: {failure_threshold: 2, cooldown_s: 60}\n"
        "servers:\n  dead:\n    transport: http\n    url: http://127.0.0.1:9/mcp\n    connect_timeout_s: 2\n"
    )
    catalog = ToolCatalog.from_file(builtin_tools(), config)
    try:
        for _ in range(2):
            tools, problems = await bounded(catalog.tools_for(["calculator", "mcp__dead__x"]))
            assert set(tools) == {"calculator"}
            assert "'dead'" in problems[0] and "not offered" in problems[0]
        _, problems = await bounded(catalog.tools_for(["mcp__dead__x"]))
        assert "circuit open" in problems[0]
    finally:
        await catalog.close()


async def test_active_skill_offers_all_tools_of_its_mcp_server() -> None:
    catalog = ToolCatalog(builtin_tools(), {"py": McpServer("py", python_stdio())}, BreakerRegistry())
    try:
        tools, _ = await bounded(catalog.tools_for(["calculator"], active_skills=["py"]))
        assert {"calculator", "mcp__py__add", "mcp__py__pid"} <= set(tools)
        tools, _ = await bounded(catalog.tools_for(["calculator"]))
        assert set(tools) == {"calculator"}
    finally:
        await catalog.close()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("servers:\n  a:\n    transport: stdio\n", "tools.yaml:3: servers.a: transport 'stdio' needs 'command'"),
        ("servers:\n  a__b:\n    transport: http\n    url: http://x\n", "tools.yaml:2: servers: server name 'a__b'"),
        ("servers:\n  a:\n    transport: smoke\n", "servers.a.transport"),
        ("servers:\n  a:\n    transport: grpc\n    address: x\n    retries: 9\n", "servers.a.retries"),
    ],
)
def test_tool_servers_file_errors_name_the_field(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "tools.yaml"
    path.write_text(text)
    with pytest.raises(ToolServersError) as caught:
        load_tool_servers(path)
    assert expected in str(caught.value) and "tools.yaml" in str(caught.value)
