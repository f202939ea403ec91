"""The todo list through the gateway, on the memory store and on Redis: an agent with `todo_list: true`
keeps a versioned list in the session with `manage_todo_list`; each update is a `plan` event with the
whole list, each item it completes a `step_complete`, and the list carries over to the next turns."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from cogmesh.common.v1 import events_pb2
from cogmesh.sessions.v1 import sessions_pb2
from tests.integration.conftest import TIMEOUT_S, new_session
from tests.integration.test_handoff import call, handoff_suite, send
from tests.integration.test_pause_resume import Env, session_of

pytestmark = pytest.mark.asyncio(loop_scope="module")

PENDING, IN_PROGRESS, COMPLETED = (
    events_pb2.TODO_STATUS_PENDING,
    events_pb2.TODO_STATUS_IN_PROGRESS,
    events_pb2.TODO_STATUS_COMPLETED,
)


@pytest_asyncio.fixture(loop_scope="module", scope="module", params=["memory", "redis"])
async def env(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    url = request.getfixturevalue("redis_url") if request.param == "redis" else ""
    async with handoff_suite(tmp_path_factory.mktemp("plans"), url) as found:
        yield found


def item(item_id: str, content: str, status: str) -> dict[str, str]:
    return {"id": item_id, "content": content, "status": status}


async def stored_plan(env: Env, session_id: str) -> events_pb2.PlanUpdated:
    session = await session_of(env, session_id)
    reply = await env.stubs["sessions"].GetSession(
        sessions_pb2.GetSessionRequest(tenant_id=session.tenant_id, session_id=session_id), timeout=TIMEOUT_S
    )
    return reply.state.plan  # type: ignore[no-any-return]


async def test_a_plan_updated_over_turns(env: Env) -> None:
    session_id = await new_session(env.gateway, agent="todo")
    first = [item("a", "gather the numbers", "in_progress"), item("b", "add them up", "pending")]
    events = await send(env, session_id, call("manage_todo_list", items=first))
    plans = [e.plan for e in events if e.HasField("plan")]
    assert [(p.version, [(i.id, i.content, i.status) for i in p.items]) for p in plans] == [
        (1, [("a", "gather the numbers", IN_PROGRESS), ("b", "add them up", PENDING)])
    ]
    assert not any(e.HasField("step_complete") for e in events)
    finished = next(e.tool_call_finished for e in events if e.HasField("tool_call_finished"))
    assert finished.ok and "Todo list (version 1)" in finished.result_summary
    assert "Todo list (version 1)" in events[-1].final.text  # the model saw the list it stored
    assert await stored_plan(env, session_id) == plans[0]

    # The next turn goes on from version 1: completing an item is version 2 and a step_complete.
    second = [item("a", "gather the numbers", "completed"), item("b", "add them up", "in_progress")]
    events = await send(env, session_id, call("manage_todo_list", items=second))
    plan = next(e.plan for e in events if e.HasField("plan"))
    assert plan.version == 2 and [i.status for i in plan.items] == [COMPLETED, IN_PROGRESS]
    steps = [e.step_complete for e in events if e.HasField("step_complete")]
    assert [(s.step_number, s.total_steps, s.description, s.version) for s in steps] == [
        (1, 2, "gather the numbers", 2)
    ]
    # The events come in order: the plan, its completions, then the call's end.
    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds.index("plan") < kinds.index("step_complete") < kinds.index("tool_call_finished")

    # An item completed before is not completed again; a bad list is the model's error and changes nothing.
    third = [*second[:1], item("b", "add them up", "completed")]
    events = await send(env, session_id, call("manage_todo_list", items=third))
    assert [s.step_complete.description for s in events if s.HasField("step_complete")] == ["add them up"]
    events = await send(env, session_id, call("manage_todo_list", items=[third[0], third[0]]))
    finished = next(e.tool_call_finished for e in events if e.HasField("tool_call_finished"))
    assert not finished.ok and "repeated: a" in finished.result_summary
    assert not any(e.HasField("plan") for e in events)
    assert (await stored_plan(env, session_id)).version == 3

    # /reset empties the list, one version more.
    events = await send(env, session_id, "/reset")
    assert [(e.plan.version, len(e.plan.items)) for e in events if e.HasField("plan")] == [(4, 0)]
    assert (await stored_plan(env, session_id)).version == 4


async def test_only_an_agent_with_a_todo_list_gets_the_tool(env: Env) -> None:
    session_id = await new_session(env.gateway, agent="triage")
    events = await send(env, session_id, call("manage_todo_list", items=[item("a", "x", "pending")]))
    assert not any(e.HasField("tool_call_started") or e.HasField("plan") for e in events)
    assert not (await stored_plan(env, session_id)).items
