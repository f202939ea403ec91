"""The shipped `readonly` agent: listed by the gateway, its tools change nothing, and a write tool is not
offered to its model (the built-in model calls a tool only when it is offered)."""

from __future__ import annotations

from typing import Any

import pytest

from cogmesh.gateway.v1 import gateway_pb2
from services.lib.agents import DEFAULT_AGENTS_DIR, AgentRegistry
from tests.integration.conftest import TIMEOUT_S, new_session, payload, send

# Built-ins that only read or compute; save_memory, ask_user, task and the session tools are not among them.
READ_ONLY_TOOLS = {"calculator", "current_time", "search_memories"}


def test_the_readonly_agent_has_only_tools_that_change_nothing() -> None:
    agent = AgentRegistry.load_dir(DEFAULT_AGENTS_DIR).get("readonly")
    assert agent.is_primary and agent.tools and set(agent.tools) <= READ_ONLY_TOOLS
    assert agent.memory.save_tool not in agent.tools
    assert (agent.subagents, agent.handoffs, agent.todo_list, agent.skills) == ([], [], False, [])
    assert "read-only" in (agent.system_prompt or "")


@pytest.mark.asyncio(loop_scope="module")
async def test_listed_and_offered_no_write_tool(gateway: Any) -> None:
    listed = await gateway.ListAgents(gateway_pb2.ListAgentsRequest(), timeout=TIMEOUT_S)
    assert "readonly" in {agent.name for agent in listed.agents}
    session_id = await new_session(gateway, agent="readonly")

    events = await send(gateway, session_id, "What is 6 * 7?")
    assert events[-1].final.text == "6 * 7 = 42."

    events = await send(gateway, session_id, "@current_time")
    assert [e.tool_call_started.name for e in events if payload(e) == "tool_call_started"] == ["current_time"]

    events = await send(gateway, session_id, '@save_memory {"text": "likes tea"}')
    assert [payload(e) for e in events if payload(e).startswith("tool_call")] == []
    assert events[-1].final.text.startswith('You said: "@save_memory')
