"""The Python SDK on paused turns and per-turn options, against a real suite: approvals,
user input, client-side tools as plain functions, SendMessage options, typed errors."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from cogmesh.client import (
    FailedPrecondition,
    GatewayClient,
    NotFound,
    client_tool,
    is_paused,
    is_terminal,
    kind,
)
from cogmesh.common.v1 import events_pb2
from services.suite.inprocess import Suite
from tests.integration.conftest import TIMEOUT_S

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def client(suite: Suite) -> AsyncIterator[GatewayClient]:
    async with GatewayClient(suite.gateway_address, timeout_s=TIMEOUT_S) as opened:
        yield opened


def seqs_are_contiguous(seqs: list[int]) -> bool:
    return seqs == list(range(seqs[0], seqs[0] + len(seqs)))


# --------------------------------------------------------------------------- approvals


async def test_an_approval_pauses_run_and_approve_finishes_the_same_turn(client: GatewayClient) -> None:
    session = await client.create_session(agent="careful")
    paused = await asyncio.wait_for(client.run(session.session_id, "What is 17 * 23?"), TIMEOUT_S)
    assert paused.paused and not paused.ok and paused.error is None
    assert is_terminal(paused.last) and is_paused(paused.last)
    pause = paused.pause
    assert pause is not None and pause.kind == "approval"
    assert (pause.tool_name, pause.arguments) == ("calculator", {"expression": "17 * 23"})
    assert pause.session_id == session.session_id and pause.turn_id == paused.turn_id

    # While paused the session takes no new message, and says what it waits for.
    with pytest.raises(FailedPrecondition) as busy:
        await client.run(session.session_id, "hello")
    assert busy.value.reason == "TURN_IN_PROGRESS"
    assert busy.value.metadata["interrupt_id"] == pause.interrupt_id

    # The wrong helper for this pause is refused before any call.
    with pytest.raises(ValueError, match="waits for approval, not for user input"):
        await client.answer(pause, "yes")

    done = await asyncio.wait_for(client.approve(pause), TIMEOUT_S)
    assert done.ok and done.text == "17 * 23 = 391." and done.turn_id == pause.turn_id
    assert seqs_are_contiguous([e.seq for e in paused.events + done.events])

    with pytest.raises(NotFound) as again:
        await client.approve(pause)
    assert again.value.reason == "TURN_NOT_FOUND"


async def test_edit_and_reject(client: GatewayClient) -> None:
    session = await client.create_session(agent="careful")
    first = await client.run(session.session_id, "What is 2 + 2?")
    assert first.pause is not None
    edited = await client.edit(first.pause, {"expression": "20 + 22"})
    finished = next(e.tool_call_finished for e in edited.events if e.HasField("tool_call_finished"))
    assert edited.ok and finished.result_summary == "42"  # the edited expression ran

    second = await client.run(session.session_id, "What is 9 - 1?")
    assert second.pause is not None
    rejected = await client.reject(second.pause, "not on a Sunday")
    assert rejected.text == 'The calculator tool failed: "a human reviewer rejected this call: not on a Sunday".'

    third = await client.run(session.session_id, "What is 3 * 3?")
    assert third.pause is not None
    with pytest.raises(TypeError, match="edited_arguments: expected a dict"):
        await client.edit(third.pause, "9")  # type: ignore[arg-type]
    # A paused turn can be given up: it ends with a cancelled error.
    assert (await client.cancel_turn(session.session_id)) == third.turn_id
    log = [e async for e in client.subscribe(session.session_id, third.last.seq, stop_when_idle=True)]
    assert log[-1].turn_id == third.turn_id and log[-1].error.kind == events_pb2.ERROR_KIND_CANCELLED


# --------------------------------------------------------------------------- user input


async def test_user_input_is_answered_with_answer(client: GatewayClient) -> None:
    session = await client.create_session(agent="careful")
    asked = await client.run(session.session_id, "@ask_user Which currency?")
    pause = asked.pause
    assert pause is not None and pause.kind == "user_input" and pause.prompt == "Which currency?"
    with pytest.raises(ValueError, match="waits for user input, not for approval"):
        await client.approve(pause)
    answered = await client.answer(pause, "euros")
    assert answered.ok and answered.text == "The ask_user tool returned: euros"


# --------------------------------------------------------------------------- client-side tools


async def test_client_tools_run_inside_run(client: GatewayClient) -> None:
    calls: list[dict[str, object]] = []

    def read_file(path: str, max_bytes: int = 4096) -> str:
        """Read a file on the user's machine.

        Args:
            path: file to read, relative to the working folder.
            max_bytes: read at most this much.
        """
        calls.append({"path": path, "max_bytes": max_bytes})
        if path == "missing.txt":
            raise FileNotFoundError(path)
        return "buy milk"

    async def get_location() -> dict[str, str]:
        """The device's location."""
        return {"city": "Porto"}

    session = await client.create_session()
    result = await asyncio.wait_for(
        client.run(session.session_id, '@read_file {"path": "notes.txt", "max_bytes": 10}', tools=[read_file]),
        TIMEOUT_S,
    )
    assert result.ok and result.text == "The read_file tool returned: buy milk"
    assert calls == [{"path": "notes.txt", "max_bytes": 10}]  # an int again, not JSON's 10.0
    assert {e.turn_id for e in result.events} == {result.turn_id}
    assert [kind(e) for e in result.events].count("client_tool_call") == 1
    assert seqs_are_contiguous([e.seq for e in result.events])
    started = next(e.tool_call_started for e in result.events if e.HasField("tool_call_started"))
    assert started.source == "client"

    failed = await client.run(session.session_id, '@read_file {"path": "missing.txt"}', tools=[read_file])
    assert failed.text == 'The read_file tool failed: "FileNotFoundError: missing.txt".'

    located = await client.run(session.session_id, "@get_location", tools=[get_location, read_file])
    assert located.text == 'The get_location tool returned: {"city": "Porto"}'

    # A tool the model may call but the SDK cannot run (a bare spec) pauses for the caller.
    paused = await client.run(session.session_id, '@read_file {"path": "a"}', tools=[client_tool(read_file).spec()])
    assert paused.pause is not None and paused.pause.kind == "client_tool"
    assert paused.pause.arguments == {"path": "a"}
    done = await client.send_tool_result(paused.pause, "from the caller")
    assert done.text == "The read_file tool returned: from the caller"


# --------------------------------------------------------------------------- per-turn options


async def test_send_message_options_with_python_types(client: GatewayClient) -> None:
    session = await client.create_session()
    sid = session.session_id
    single = await client.run(sid, "What is 5 * 5?", runtime="single-shot")
    assert single.final is not None and single.final.metrics.runtime == "single-shot"

    schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    shaped = await client.run(sid, '@final_response {"answer": "yes"}', output_schema=schema)
    assert shaped.structured_output == {"answer": "yes"}

    limited = await client.run(sid, "What is 1 + 1?", limits={"max_iterations": 1})
    assert limited.error is not None and limited.error.kind == events_pb2.ERROR_KIND_LOOP_LIMIT

    over = await client.run(sid, "hi", cost_budget={"max_total_tokens": 5, "action": "error"})
    assert over.error is not None and over.error.kind == events_pb2.ERROR_KIND_BUDGET_EXCEEDED

    # Two turns at once on one session: ENQUEUE runs them one after the other.
    both = await asyncio.wait_for(
        asyncio.gather(
            client.run(sid, "What is 6 * 7?", multitask_strategy="enqueue"),
            client.run(sid, "What is 8 * 9?", multitask_strategy="ENQUEUE"),
        ),
        TIMEOUT_S,
    )
    assert sorted(r.text for r in both) == ["6 * 7 = 42.", "8 * 9 = 72."]
