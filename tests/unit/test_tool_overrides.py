"""Per-tool retry settings of tool servers (`tool_overrides`): a tool overridden to no retries fails after one
attempt while its neighbour on the same server retries, on the Python MCP test server (streamable HTTP) and
on a remote ToolService; a tool's own timeout; the backoff strategies; the file's errors name the field."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2

from cogmesh.common.v1 import events_pb2, messages_pb2
from cogmesh.tools.v1 import tools_pb2, tools_pb2_grpc
from services.runtime.loop import run_turn
from services.runtime.tools.builtin import builtin_tools
from services.runtime.tools.catalog import ToolCatalog, ToolServersError, load_tool_servers
from services.runtime.tools.retry import Backoff
from services.runtime.turn import ModelInfo, Turn, Verdict
from tests.fakes.models import ScriptedModel, calls, text
from tests.fakes.processes import mcp_http_server

TIMEOUT_S = 30.0


async def allow(name: str, arguments: Mapping[str, Any]) -> Verdict:
    return Verdict(True, "ok", arguments)


async def finished_calls(catalog: ToolCatalog, *called: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    """Run one turn whose model calls `called` at once; each call's tool_call_finished, by tool name."""
    names = [name for name, _ in called]
    tools, problems = await asyncio.wait_for(catalog.tools_for(names), TIMEOUT_S)
    assert problems == [] and set(names) <= set(tools)
    turn = Turn(
        turn_id="t1",
        system_prompt="",
        history=[],
        user_text="go",
        model=ScriptedModel([calls(*called), text("done")]),
        model_info=ModelInfo("scripted", "test"),
        tools=tools,
        check_tool=allow,
        breakers=catalog.breakers,
    )
    events = await asyncio.wait_for(collect(turn), TIMEOUT_S)
    return {e.tool_call_finished.name: e.tool_call_finished for e in events if e.HasField("tool_call_finished")}


async def collect(turn: Turn) -> list[events_pb2.RuntimeEvent]:
    return [event async for event in run_turn(turn)]


async def test_an_mcp_tool_overridden_to_no_retries_fails_after_one_attempt(tmp_path: Path) -> None:
    config = tmp_path / "tools.yaml"
    async with mcp_http_server("python") as url:
        config.write_text(
            "servers:\n"
            f"  py:\n    transport: http\n    url: {url}\n    connect_timeout_s: 3\n"
            "    retries: 2\n    base_delay_s: 0\n    failure_threshold: 50\n"
            "    tool_overrides:\n"
            "      add: {retries: 0}\n"
            "      sleep: {timeout_s: 0.3}\n"
        )
        catalog = ToolCatalog.from_file(builtin_tools(), config)
        try:
            done = await finished_calls(catalog, ("mcp__py__sleep", {"seconds": 20}), ("mcp__py__shout", {"text": "a"}))
            assert done["mcp__py__sleep"].result_summary == "error: tool 'mcp__py__sleep' timed out after 0.3s"
            assert (done["mcp__py__shout"].ok, done["mcp__py__shout"].result_summary) == (True, "A")
            tools, _ = await catalog.tools_for(["mcp__py__add", "mcp__py__shout"])
            assert (tools["mcp__py__add"].retries, tools["mcp__py__shout"].retries) == (0, 2)
        except BaseException:
            await catalog.close()
            raise
    try:  # the server is gone (its tools stay listed): every attempt fails to reach it
        done = await finished_calls(catalog, ("mcp__py__add", {"a": 1, "b": 2}), ("mcp__py__shout", {"text": "a"}))
    finally:
        await catalog.close()
    assert (done["mcp__py__add"].ok, done["mcp__py__add"].attempts) == (False, 1)
    assert (done["mcp__py__shout"].ok, done["mcp__py__shout"].attempts) == (False, 3)
    assert "'py'" in done["mcp__py__add"].result_summary


class DownTools(tools_pb2_grpc.ToolServiceServicer):
    """A ToolService whose tools list fine but whose every call says the backend is unavailable."""

    def __init__(self) -> None:
        self.calls: collections.Counter[str] = collections.Counter()

    async def ListTools(self, request: Any, context: Any) -> tools_pb2.ListToolsResponse:
        schema = struct_pb2.Struct()
        schema.update({"type": "object"})
        return tools_pb2.ListToolsResponse(
            tools=[
                messages_pb2.ToolSpec(name=name, description=name, parameters=schema) for name in ("charge", "quote")
            ]
        )

    async def CallTool(self, request: tools_pb2.CallToolRequest, context: Any) -> tools_pb2.CallToolResponse:
        self.calls[request.name] += 1
        await context.abort(grpc.StatusCode.UNAVAILABLE, "backend restarting")
        raise AssertionError("abort raises")


@pytest.fixture
async def down_tools() -> AsyncIterator[tuple[str, DownTools]]:
    server = grpc.aio.server()
    tools = DownTools()
    tools_pb2_grpc.add_ToolServiceServicer_to_server(tools, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}", tools
    finally:
        await server.stop(0)


async def test_a_remote_tool_overridden_to_no_retries_fails_after_one_attempt(
    tmp_path: Path, down_tools: tuple[str, DownTools]
) -> None:
    address, service = down_tools
    config = tmp_path / "tools.yaml"
    config.write_text(
        "servers:\n"
        f"  pay:\n    transport: grpc\n    address: {address}\n    retries: 2\n    failure_threshold: 50\n"
        "    tool_overrides:\n      charge: {retries: 0}\n      quote: {backoff: fixed, base_delay_s: 0.01}\n"
    )
    catalog = ToolCatalog.from_file(builtin_tools(), config)
    try:
        done = await finished_calls(catalog, ("charge", {}), ("quote", {}))
    finally:
        await catalog.close()
    assert (done["charge"].ok, done["charge"].attempts) == (False, 1)
    assert (done["quote"].ok, done["quote"].attempts) == (False, 3)
    assert service.calls == {"charge": 1, "quote": 3}
    assert "UNAVAILABLE: backend restarting" in done["charge"].result_summary


@pytest.mark.parametrize(
    ("strategy", "steps"), [("exponential", [1, 2, 4, 8]), ("linear", [1, 2, 3, 4]), ("fixed", [1, 1, 1, 1])]
)
def test_backoff_strategies_wait_between_half_and_all_of_their_step(strategy: Any, steps: list[int]) -> None:
    backoff = Backoff(strategy, 0.5)
    for attempt, step in enumerate(steps, start=1):
        waits = [backoff.delay_s(attempt, default_base_s=9.0) for _ in range(50)]
        assert all(0.25 * step <= wait <= 0.5 * step for wait in waits)
    assert 0.5 <= Backoff().delay_s(1, default_base_s=1.0) <= 1.0  # no base of its own: the runtime's


def test_overrides_keep_the_servers_settings_they_leave_out(tmp_path: Path) -> None:
    config = tmp_path / "tools.yaml"
    config.write_text(
        "servers:\n  pay:\n    transport: grpc\n    address: x:1\n    retries: 3\n    timeout_s: 7\n"
        "    backoff: linear\n    base_delay_s: 0.2\n    tool_overrides:\n      charge: {retries: 0}\n"
    )
    server = ToolCatalog.from_file({}, config).servers["pay"]
    assert server.overrides["charge"].retries == 0
    assert (server.overrides["charge"].timeout_s, server.overrides["charge"].backoff) == (7, Backoff("linear", 0.2))
    assert (server.settings.retries, server.settings.backoff) == (3, Backoff("linear", 0.2))


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("{retries: 9}", "servers.a.tool_overrides.charge.retries"),
        ("{backoff: random}", "servers.a.tool_overrides.charge.backoff"),
        ("{base_delay_s: -1}", "servers.a.tool_overrides.charge.base_delay_s"),
        ("{timeout_s: 0}", "servers.a.tool_overrides.charge.timeout_s"),
        ("{retry: 1}", "servers.a.tool_overrides.charge.retry"),
    ],
)
def test_a_bad_override_names_its_field(tmp_path: Path, override: str, field: str) -> None:
    config = tmp_path / "tools.yaml"
    config.write_text(
        f"servers:\n  a:\n    transport: grpc\n    address: x:1\n    tool_overrides:\n      charge: {override}\n"
    )
    with pytest.raises(ToolServersError, match=f"tools.yaml:6: {field}: "):
        load_tool_servers(config)
