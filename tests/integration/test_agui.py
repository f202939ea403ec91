"""AG-UI on the browser edge (gateway/web/agui.py), against the real suite with API keys.

The real `@ag-ui/client` HttpAgent (tests/node_agui/run.mjs) runs turns through its own schema
enforcement and event verifier; every event the endpoint sends, to it or read here off the wire,
validates against the `ag_ui.core` pydantic types with no field those types lack.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from ag_ui.core import BaseEvent, Event, EventType
from pydantic import BaseModel, TypeAdapter

from cogmesh.common.v1 import events_pb2
from cogmesh.gateway.v1 import gateway_pb2
from tests.integration.test_web_edge import AUTH, Edge, edge_for, replay, settings_with_keys

pytestmark = pytest.mark.asyncio(loop_scope="module")

ROOT = Path(__file__).resolve().parents[2]
NODE_AGUI = ROOT / "tests" / "node_agui"
DEFAULTS = ROOT / "services" / "defaults" / "agents"
TIMEOUT_S = 30.0
EVENTS: TypeAdapter[Any] = TypeAdapter(Event)

# `default` with one model call per turn: "What is 1 + 1?" calls the calculator, then the loop's
# limit ends the turn before the model can answer: an error mid-turn, after a tool call.
ONE_STEP_AGENT = """\
name: one-step
description: The default agent allowed a single model call per turn.
prompts_dir: default
model: local
tools: [calculator]
default_role: assistant
mode: primary
limits: {max_iterations: 1}
"""
WEATHER_TOOL = {
    "name": "weather",
    "description": "The weather in a city, from the browser.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def edge(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Edge]:
    tmp = tmp_path_factory.mktemp("agui")
    agents = tmp / "agents"
    shutil.copytree(DEFAULTS, agents)
    (agents / "one-step.yaml").write_text(ONE_STEP_AGENT)
    async with edge_for(settings_with_keys(tmp, agents_dir=agents)) as edge:
        yield edge


def unknown_fields(model: BaseModel, path: str = "") -> list[str]:
    """Fields a model was given that its type does not declare (pydantic keeps them as extras)."""
    found = [f"{path}.{name}" for name in model.model_extra or {}]
    for name, value in model:
        items = value if isinstance(value, list) else [value]
        found += [f for item in items if isinstance(item, BaseModel) for f in unknown_fields(item, f"{path}.{name}")]
    return found


def validated(raw: list[dict[str, Any]]) -> list[BaseEvent]:
    """Each event as its ag_ui.core type; fails on a missing or mistyped field, or one the type lacks."""
    events = []
    for data in raw:
        event = EVENTS.validate_python(data)
        assert not unknown_fields(event), (data, unknown_fields(event))
        events.append(event)
    return events


def types(events: list[BaseEvent]) -> list[str]:
    return [EventType(e.type).value for e in events]


async def post(edge: Edge, agent: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> Any:
    return await edge.http.post(f"/agui/{agent}", json=body, headers={**AUTH, **(headers or {})})


async def wire(edge: Edge, agent: str, body: dict[str, Any]) -> list[BaseEvent]:
    """One run read off the wire: the SSE data lines, validated."""
    response = await post(edge, agent, body)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    frames = [frame for frame in response.text.split("\n\n") if frame]
    assert all(frame.startswith("data: ") for frame in frames), frames
    return validated([json.loads(frame.removeprefix("data: ")) for frame in frames])


def run_input(thread_id: str, text: str = "", **fields: Any) -> dict[str, Any]:
    messages = [{"id": "m1", "role": "user", "content": text}] if text else []
    return {"threadId": thread_id, "runId": "r1", "messages": messages, **fields}


async def node(scenario: dict[str, Any] | None) -> dict[str, Any]:
    """run.mjs with this scenario (None: its verifier self-check); what it saw, as JSON."""
    if shutil.which("node") is None or not (NODE_AGUI / "node_modules" / "@ag-ui" / "client").is_dir():
        pytest.fail("the AG-UI client tests need node and `npm ci --prefix tests/node_agui` (make test installs it)")
    args = ["--selfcheck"] if scenario is None else []
    process = await asyncio.create_subprocess_exec(
        "node",
        str(NODE_AGUI / "run.mjs"),
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(json.dumps(scenario or {}).encode()), TIMEOUT_S)
    assert process.returncode == 0, stderr.decode()
    return json.loads(stdout)  # type: ignore[no-any-return]


async def client_runs(edge: Edge, agent: str, *runs: dict[str, Any], thread_id: str = "") -> dict[str, Any]:
    scenario = {"url": f"{edge.url}/agui/{agent}", "headers": AUTH, "threadId": thread_id, "runs": list(runs)}
    result = await node(scenario)
    for run in result["runs"]:
        assert run["error"] is None, run["error"]  # the client's enforcement and verifier accepted the run
        validated(run["events"])
    return result


async def test_the_clients_verifier_is_on_and_refuses_a_stream_out_of_order() -> None:
    # Without this, a client that skipped verification would pass every test below.
    check = await node(None)
    assert check["rejected"], check
    assert "TEXT_MESSAGE_CONTENT" in check["error"]["message"], check


async def test_a_text_turn_with_httpagent(edge: Edge) -> None:
    result = await client_runs(edge, "default", {"user": "hello there"})
    (run,) = result["runs"]
    assert types(validated(run["events"])) == [
        "RUN_STARTED",
        "STATE_SNAPSHOT",
        "STATE_DELTA",  # accepted
        "STATE_DELTA",  # thinking
        "TEXT_MESSAGE_START",
        *["TEXT_MESSAGE_CONTENT"] * (len(run["events"]) - 8),
        "TEXT_MESSAGE_END",
        "STATE_DELTA",  # completed
        "RUN_FINISHED",
    ]
    started, finished = run["events"][0], run["events"][-1]
    session_id = result["threadId"]
    assert started["threadId"] == session_id and finished["threadId"] == session_id
    assert run["outcome"] == "success" and finished["usage"][0]["model"] == "cogmesh-local"
    reply = result["messages"][-1]
    assert reply["role"] == "assistant" and reply["content"].startswith('You said: "hello there".')
    # threadId is the session, runId the turn: the gateway's log agrees.
    log = await replay(edge, session_id)
    assert started["runId"] == log[0].turn_id and log[-1].final.text == reply["content"]
    assert result["state"]["sessionId"] == session_id and result["state"]["agent"] == "default"
    assert result["state"]["turn"] == {"id": log[0].turn_id, "state": "completed", "status": ""}


async def test_a_tool_turn_and_a_second_run_on_the_same_thread(edge: Edge) -> None:
    result = await client_runs(edge, "default", {"user": "What is 17 * 23?"}, {"user": "and 2 + 2?"})
    first, second = result["runs"]
    kinds = types(validated(first["events"]))
    tool_events = [e for e in first["events"] if e["type"].startswith("TOOL_CALL")]
    call_id = tool_events[0]["toolCallId"]
    assert [e["type"] for e in tool_events] == [
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
    ]
    assert tool_events[0]["toolCallName"] == "calculator"
    assert json.loads(tool_events[1]["delta"]) == {"expression": "17 * 23"}
    assert tool_events[3]["content"] == "391" and all(e["toolCallId"] == call_id for e in tool_events)
    assert kinds.index("TOOL_CALL_RESULT") < kinds.index("TEXT_MESSAGE_START")
    # The client built the conversation from the events: each call in an assistant message, its result, the answer.
    turns = [(m["role"], m.get("content"), [c["id"] for c in m.get("toolCalls", [])]) for m in result["messages"]]
    second_call = next(e["toolCallId"] for e in second["events"] if e["type"] == "TOOL_CALL_START")
    assert turns[1:4] == [("assistant", None, [call_id]), ("tool", "391", []), ("assistant", "17 * 23 = 391.", [])]
    assert turns[5:] == [("assistant", None, [second_call]), ("tool", "4", []), ("assistant", "2 + 2 = 4.", [])]
    assert second["events"][0]["threadId"] == first["events"][0]["threadId"]  # the same session
    assert result["messages"][-1]["content"] == "2 + 2 = 4."


async def test_an_approval_is_an_interrupt_and_a_resume_entry_answers_it(edge: Edge) -> None:
    result = await client_runs(
        edge, "careful", {"user": "What is 2 + 3?"}, {"resume": {"payload": {"decision": "approve"}}}
    )
    paused, resumed = result["runs"]
    start = next(e for e in paused["events"] if e["type"] == "TOOL_CALL_START")
    assert paused["outcome"] == "interrupt" and paused["events"][-1]["outcome"]["type"] == "interrupt"
    (interrupt,) = paused["interrupts"]
    assert interrupt["reason"] == "tool_approval" and interrupt["toolCallId"] == start["toolCallId"]
    assert interrupt["id"].startswith("int_") and interrupt["responseSchema"]["required"] == ["decision"]
    assert interrupt["metadata"]["cogmesh"]["arguments"] == {"expression": "2 + 3"}
    assert "TOOL_CALL_RESULT" not in types(validated(paused["events"])), "the call waits: it has not run"
    assert result["state"]["turn"]["state"] == "completed" and resumed["pendingInterrupts"] == []
    # The resumed run carries the approved call's result and the answer, under the same turn.
    assert resumed["outcome"] == "success"
    result_event = next(e for e in resumed["events"] if e["type"] == "TOOL_CALL_RESULT")
    assert result_event["toolCallId"] == start["toolCallId"] and result_event["content"] == "5"
    assert result["messages"][-1] == {**result["messages"][-1], "role": "assistant", "content": "2 + 3 = 5."}
    turn_id = paused["events"][0]["runId"]
    assert resumed["events"][0]["runId"].startswith(f"{turn_id}:") and resumed["events"][0]["runId"] != turn_id


async def test_rejected_edited_and_cancelled_approvals_on_the_wire(edge: Edge) -> None:
    paused = await wire(edge, "careful", run_input("", "What is 6 * 7?"))
    thread, interrupt = paused[0].thread_id, paused[-1].outcome.interrupts[0]  # type: ignore[attr-defined]
    reject = {"interruptId": interrupt.id, "status": "resolved", "payload": {"decision": "reject", "reason": "no"}}
    rejected = await wire(edge, "careful", run_input(thread, resume=[reject]))
    result = next(e for e in rejected if e.type == EventType.TOOL_CALL_RESULT)
    assert result.tool_call_id == interrupt.tool_call_id and "no" in result.content  # type: ignore[attr-defined]
    assert rejected[-1].type == EventType.RUN_FINISHED and rejected[-1].outcome.type == "success"  # type: ignore[attr-defined]

    paused = await wire(edge, "careful", run_input(thread, "What is 6 * 8?"))
    interrupt = paused[-1].outcome.interrupts[0]  # type: ignore[attr-defined]
    edit = {"decision": "edit", "arguments": {"expression": "6 * 9"}}
    edited = await wire(
        edge,
        "careful",
        run_input(thread, resume=[{"interruptId": interrupt.id, "status": "resolved", "payload": edit}]),
    )
    assert [e.content for e in edited if e.type == EventType.TOOL_CALL_RESULT] == ["54"]  # type: ignore[attr-defined]

    paused = await wire(edge, "careful", run_input(thread, "What is 6 * 7?"))
    interrupt = paused[-1].outcome.interrupts[0]  # type: ignore[attr-defined]
    cancelled = await wire(
        edge, "careful", run_input(thread, resume=[{"interruptId": interrupt.id, "status": "cancelled"}])
    )
    assert types(cancelled) == ["RUN_STARTED", "RUN_FINISHED"] and cancelled[-1].outcome.type == "cancelled"  # type: ignore[attr-defined]
    log = await replay(edge, thread)
    assert log[-1].error.kind == events_pb2.ERROR_KIND_CANCELLED, "the paused turn was given up"
    again = await post(
        edge, "careful", run_input(thread, resume=[{"interruptId": interrupt.id, "status": "cancelled"}])
    )
    assert again.status_code == 404 and again.json()["error"]["code"] == "not_found", again.text


async def test_a_question_is_an_interrupt_answered_by_resume(edge: Edge) -> None:
    result = await client_runs(
        edge, "careful", {"user": "@ask_user Which colour?"}, {"resume": {"payload": {"answer": "blue"}}}
    )
    paused, resumed = result["runs"]
    (interrupt,) = paused["interrupts"]
    assert interrupt["reason"] == "user_input" and interrupt["message"] == "Which colour?"
    assert resumed["outcome"] == "success"
    assert result["messages"][-1]["content"] == "The ask_user tool returned: blue"


async def test_client_tools_are_tool_calls_the_frontend_answers_with_a_tool_message(edge: Edge) -> None:
    result = await client_runs(
        edge,
        "default",
        {"user": "@weather Paris", "tools": [WEATHER_TOOL]},
        {"toolResult": {"content": "sunny, 21 °C"}, "tools": [WEATHER_TOOL]},
    )
    asked, answered = result["runs"]
    start = next(e for e in asked["events"] if e["type"] == "TOOL_CALL_START")
    args = next(e for e in asked["events"] if e["type"] == "TOOL_CALL_ARGS")
    assert start["toolCallName"] == "weather" and json.loads(args["delta"]) == {"city": "Paris"}
    # A success outcome naming the call the frontend is to answer, as AG-UI has frontend tools.
    assert asked["outcome"] == "success" and asked["pendingToolCallIds"] == [start["toolCallId"]]
    assert asked["events"][-1]["outcome"] == {"type": "success", "pendingToolCallIds": [start["toolCallId"]]}
    # The frontend's tool message resumed the turn; its result is not sent back to it a second time.
    assert "TOOL_CALL_RESULT" not in types(validated(answered["events"]))
    assert [m["role"] for m in result["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert result["messages"][-1]["content"] == "The weather tool returned: sunny, 21 °C"
    log = await replay(edge, result["threadId"])
    assert log[-1].final.text == "The weather tool returned: sunny, 21 °C"


async def test_an_error_mid_turn_is_run_error(edge: Edge) -> None:
    result = await node(
        {"url": f"{edge.url}/agui/one-step", "headers": AUTH, "threadId": "", "runs": [{"user": "What is 1 + 1?"}]}
    )
    (run,) = result["runs"]
    events = validated(run["events"])
    assert types(events)[-1] == "RUN_ERROR" and "TOOL_CALL_RESULT" in types(events), "after the turn's tool call"
    assert run["runError"]["code"] == "LOOP_LIMIT" and run["runError"]["message"], run
    assert run["events"][-2] == {**run["events"][-2], "type": "STATE_DELTA"}
    assert run["events"][-2]["delta"][0]["value"] == "failed"


async def test_a_bad_key_is_401_and_an_unknown_agent_404_before_any_event(edge: Edge) -> None:
    body = run_input("", "hello")
    bad = await post(edge, "default", body, headers={"authorization": "Bearer wrong"})
    assert bad.status_code == 401 and bad.headers["content-type"] == "application/json", bad.text
    assert bad.json()["error"]["code"] == "unauthenticated" and bad.json()["error"]["reason"] == "UNAUTHENTICATED"
    missing = await post(edge, "nope", body)
    assert missing.status_code == 404, missing.text
    assert missing.json()["error"] == {**missing.json()["error"], "code": "not_found", "reason": "AGENT_NOT_FOUND"}
    assert "nope" in missing.json()["error"]["message"]
    # The real client surfaces both as a failed run carrying the status and the JSON body.
    result = await node({"url": f"{edge.url}/agui/nope", "headers": AUTH, "threadId": "", "runs": [{"user": "hello"}]})
    (run,) = result["runs"]
    assert run["events"] == [] and run["error"]["status"] == 404
    assert run["error"]["payload"]["error"]["reason"] == "AGENT_NOT_FOUND"


async def test_bad_input_is_400_naming_the_field(edge: Edge) -> None:
    cases = [
        ({"threadId": "", "messages": []}, "runId"),
        (run_input(""), "messages"),
        (run_input("", "hi", forwardedProps={"cogmesh": {"scopes": {}}}), "forwardedProps.cogmesh.scopes"),
        (run_input("", "hi", resume=[{"interruptId": "int_x", "status": "resolved", "payload": {}}]), "resume"),
    ]
    for body, field in cases:
        response = await post(edge, "default", body)
        assert response.status_code == 400, (body, response.text)
        error = response.json()["error"]
        assert error["code"] == "invalid_argument" and field in error["message"], (field, error)
    tool_message = {"id": "t1", "role": "tool", "toolCallId": "call_1", "content": "x"}
    unknown = await post(edge, "default", {"threadId": "", "runId": "r", "messages": [tool_message]})
    assert unknown.status_code == 400, unknown.text


async def test_scope_from_forwarded_props_and_a_thread_of_another_agent(edge: Edge) -> None:
    events = await wire(
        edge, "default", run_input("", "hi", forwardedProps={"cogmesh": {"scope": {"end_user": "alice"}}})
    )
    snapshot = next(e for e in events if e.type == EventType.STATE_SNAPSHOT)
    assert snapshot.snapshot["scope"] == {"end_user": "alice"}  # type: ignore[attr-defined]
    reply = await edge.gateway.GetSession(
        gateway_pb2.GetSessionRequest(session_id=events[0].thread_id),  # type: ignore[attr-defined]
        metadata=tuple(AUTH.items()),
    )
    assert dict(reply.session.scope) == {"end_user": "alice"}
    wrong = await post(edge, "careful", run_input(events[0].thread_id, "hi"))  # type: ignore[attr-defined]
    assert wrong.status_code == 400 and "not of 'careful'" in wrong.json()["error"]["message"], wrong.text
