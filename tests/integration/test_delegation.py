"""Delegation through the whole suite: an agent hands a task to a subagent from its YAML; the
subagent's events stream in the same turn, and a pause inside the subagent pauses the turn."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from cogmesh.common.v1 import events_pb2, messages_pb2
from cogmesh.gateway.v1 import gateway_pb2
from tests.integration.conftest import TIMEOUT_S, new_session, payload
from tests.integration.test_pause_resume import Env, agents_suite, message, stream

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def env(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    async with agents_suite(tmp_path_factory.mktemp("delegation")) as found:
        yield found


def task(agent: str, text: str) -> str:
    return "@task " + json.dumps({"agent": agent, "task": text})


async def test_the_subagents_events_stream_in_the_same_turn(env: Env) -> None:
    session_id = await new_session(env.gateway, agent="boss")
    events = await stream(
        env.gateway.SendMessage(message(session_id, task("helper", "What is 6 * 7?")), timeout=TIMEOUT_S)
    )
    turn_id = events[0].turn_id
    assert {e.turn_id for e in events} == {turn_id}
    assert [e.seq for e in events] == sorted(e.seq for e in events)

    started = next(e.tool_call_started for e in events if e.HasField("tool_call_started"))
    delegation = next(e.delegation for e in events if e.HasField("delegation"))
    assert (delegation.from_agent, delegation.to_agent, delegation.task) == ("boss", "helper", "What is 6 * 7?")
    assert delegation.correlation_id == started.correlation_id and started.name == "task"

    helper = [e for e in events if e.agent == "helper"]
    helper_kinds = [payload(e) for e in helper]
    assert "tool_call_started" in helper_kinds and "assistant_delta" in helper_kinds
    assert "final" not in helper_kinds
    calc = next(e.tool_call_finished for e in helper if e.HasField("tool_call_finished"))
    assert calc.name == "calculator" and calc.result_summary == "42"

    final = events[-1].final
    assert final.text == "The task tool returned: 6 * 7 = 42."
    assert final.metrics.model_calls == 4  # two of the boss, two of the helper
    assert [m.role for m in final.new_messages] == [
        messages_pb2.ROLE_USER,
        messages_pb2.ROLE_ASSISTANT,
        messages_pb2.ROLE_TOOL,
        messages_pb2.ROLE_ASSISTANT,
    ]
    assert final.new_messages[2].content == "6 * 7 = 42."  # the subagent's answer is the task's result


async def test_an_approval_inside_a_subagent_pauses_the_turn(env: Env) -> None:
    session_id = await new_session(env.gateway, agent="boss")
    paused = await stream(
        env.gateway.SendMessage(message(session_id, task("checker", "What is 9 * 9?")), timeout=TIMEOUT_S)
    )
    approval = paused[-2]
    assert approval.HasField("approval_required") and approval.agent == "checker"
    assert paused[-1].status.state == events_pb2.TURN_STATE_PAUSED

    resolve = gateway_pb2.ResolveApprovalRequest(
        session_id=session_id,
        interrupt_id=approval.approval_required.interrupt_id,
        decision=events_pb2.APPROVAL_DECISION_APPROVE,
    )
    resumed = await stream(env.gateway.ResolveApproval(resolve, timeout=TIMEOUT_S))
    assert [e.agent for e in resumed if e.HasField("tool_call_finished")] == ["checker", ""]
    assert resumed[-1].final.text == "The task tool returned: 9 * 9 = 81."


async def test_only_the_agents_own_subagents_take_tasks(env: Env) -> None:
    session_id = await new_session(env.gateway, agent="boss")
    events = await stream(env.gateway.SendMessage(message(session_id, task("careful", "hi")), timeout=TIMEOUT_S))
    assert "delegation" not in [payload(e) for e in events]
    finished = next(e.tool_call_finished for e in events if e.HasField("tool_call_finished"))
    assert not finished.ok and "is not one of ['helper', 'checker']" in finished.result_summary
    assert events[-1].HasField("final")  # the model is told, the turn goes on


async def test_the_shipped_planner_delegates_to_its_arithmetic_subagent(env: Env) -> None:
    session_id = await new_session(env.gateway, agent="planner")
    events = await stream(
        env.gateway.SendMessage(message(session_id, task("arithmetic", "What is 11 * 11?")), timeout=TIMEOUT_S)
    )
    assert any(e.HasField("delegation") and e.delegation.to_agent == "arithmetic" for e in events)
    assert events[-1].final.text == "The task tool returned: 11 * 11 = 121."
