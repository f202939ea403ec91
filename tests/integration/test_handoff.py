"""Handoffs through the gateway, on the memory store and on Redis: an agent hands the session to another
(`transfer_to_agent`), which answers the next messages until it hands back (`transfer_back`) or the
session is reset (/reset); and the session counts the turns that delegated to a subagent.

The built-in model calls a tool the message names ("@tool {json}"), so each turn below scripts one call."""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio

from cogmesh.common.v1 import events_pb2
from cogmesh.sessions.v1 import sessions_pb2
from services.lib.agents import DEFAULT_AGENTS_DIR
from services.suite.inprocess import start_suite
from tests.integration.conftest import STUB_CLASSES, SUITE_SETTINGS, TIMEOUT_S, new_session, payload
from tests.integration.test_pause_resume import Env, message, session_of, stream
from tests.support.redis_server import delete_prefix, unique_prefix

pytestmark = pytest.mark.asyncio(loop_scope="module")

AGENTS = {
    "triage.yaml": """
name: triage
description: first contact
prompts_dir: default
model: local
tools: [calculator]
handoffs: [billing]
subagents: [helper]
default_role: assistant
""",
    "billing.yaml": """
name: billing
description: answers billing questions
prompts_dir: default
model: local
tools: [current_time]
default_role: assistant
""",
    "todo.yaml": """
name: todo
description: plans with a todo list
prompts_dir: default
model: local
tools: [calculator]
todo_list: true
default_role: assistant
""",
    "helper.md": "---\nmode: subagent\ndescription: does arithmetic\ntools: [calculator]\n---\nYou compute.\n",
}


@contextlib.asynccontextmanager
async def handoff_suite(tmp: Path, redis_url: str) -> AsyncIterator[Env]:
    """The suite with this module's agents, on Redis when `redis_url` is set, one stub per service."""
    agents = tmp / "agents"
    shutil.copytree(DEFAULT_AGENTS_DIR, agents)
    for name, text in AGENTS.items():
        (agents / name).write_text(text)
    update: dict[str, Any] = {"agents_dir": agents}
    prefix = unique_prefix("handoff") if redis_url else ""
    if redis_url:
        update |= {"redis_url": redis_url, "redis_key_prefix": prefix}
    suite = await start_suite(SUITE_SETTINGS.model_copy(update=update))
    channels = {name: grpc.aio.insecure_channel(server.address) for name, server in suite.servers.items()}
    try:
        yield Env(suite, {name: STUB_CLASSES[name](channel) for name, channel in channels.items()})
    finally:
        for channel in channels.values():
            await channel.close()
        await suite.stop(0)
        if prefix:
            delete_prefix(redis_url, prefix)


@pytest_asyncio.fixture(loop_scope="module", scope="module", params=["memory", "redis"])
async def env(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    url = request.getfixturevalue("redis_url") if request.param == "redis" else ""
    async with handoff_suite(tmp_path_factory.mktemp("handoff"), url) as found:
        yield found


def call(tool: str, **arguments: Any) -> str:
    return f"@{tool} {json.dumps(arguments)}"


async def send(env: Env, session_id: str, content: str) -> list[events_pb2.RuntimeEvent]:
    events = await stream(env.gateway.SendMessage(message(session_id, content), timeout=TIMEOUT_S))
    assert events[-1].HasField("final"), [payload(e) for e in events]
    return events


async def test_a_handoff_and_back(env: Env) -> None:
    session_id = await new_session(env.gateway, agent="triage")
    events = await send(env, session_id, call("transfer_to_agent", agent="billing", reason="a billing question"))
    started = next(e.tool_call_started for e in events if e.HasField("tool_call_started"))
    handoffs = [e.handoff for e in events if e.HasField("handoff")]
    assert [(h.from_agent, h.to_agent, h.reason) for h in handoffs] == [("triage", "billing", "a billing question")]
    assert handoffs[0].correlation_id == started.correlation_id and started.name == "transfer_to_agent"
    # The turn ends with the handing agent's last words; the model is not asked again.
    assert events[-1].final.text == "I'm handing this conversation to billing: a billing question"
    assert events[-1].final.metrics.model_calls == 1
    session = await session_of(env, session_id)
    assert (session.agent, session.active_agent) == ("triage", "billing")

    # Billing answers now: its tools (no calculator, so the model computes itself; no transfer_to_agent),
    # and transfer_back, which triage never had.
    events = await send(env, session_id, "What is 6 * 7?")
    assert not any(e.HasField("tool_call_started") for e in events)
    assert events[-1].final.text == "6 * 7 = 42."
    events = await send(env, session_id, call("transfer_to_agent", agent="billing", reason="again"))
    assert not any(e.HasField("handoff") for e in events)  # not offered to billing: the model just echoes
    events = await send(env, session_id, call("transfer_back", reason="all settled"))
    handoff = next(e.handoff for e in events if e.HasField("handoff"))
    assert (handoff.from_agent, handoff.to_agent, handoff.reason) == ("billing", "triage", "all settled")
    assert (await session_of(env, session_id)).active_agent == ""

    # Triage answers again: the calculator is back.
    events = await send(env, session_id, "What is 6 * 7?")
    assert next(e.tool_call_started for e in events if e.HasField("tool_call_started")).name == "calculator"
    events = await send(env, session_id, call("transfer_back", reason="nobody to go back to"))
    assert not any(e.HasField("handoff") for e in events)


async def test_reset_hands_the_session_back_to_its_own_agent(env: Env) -> None:
    session_id = await new_session(env.gateway, agent="triage")
    await send(env, session_id, call("transfer_to_agent", agent="billing", reason="billing"))
    assert (await session_of(env, session_id)).active_agent == "billing"
    events = await send(env, session_id, "/reset")
    handoff = next(e.handoff for e in events if e.HasField("handoff"))
    assert (handoff.from_agent, handoff.to_agent, handoff.reason, handoff.correlation_id) == (
        "billing",
        "triage",
        "/reset",
        "",
    )
    assert (await session_of(env, session_id)).active_agent == ""
    events = await send(env, session_id, "/reset")  # nothing to hand back: no handoff
    assert not any(e.HasField("handoff") for e in events)


async def test_the_session_counts_the_turns_that_delegated(env: Env) -> None:
    session_id = await new_session(env.gateway, agent="triage")
    assert (await session_of(env, session_id)).delegated_turn_count == 0
    for _ in range(2):
        events = await send(env, session_id, call("task", agent="helper", task="What is 2 + 2?"))
        assert any(e.HasField("delegation") for e in events)
    await send(env, session_id, "What is 2 + 2?")  # no delegation: not counted
    session = await session_of(env, session_id)
    assert session.delegated_turn_count == 2
    # The sessions service reports the same to the runtime (the turn's start reads it).
    reply = await env.stubs["sessions"].GetSession(
        sessions_pb2.GetSessionRequest(tenant_id=session.tenant_id, session_id=session_id), timeout=TIMEOUT_S
    )
    assert reply.session.delegated_turn_count == 2
