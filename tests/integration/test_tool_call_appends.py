"""What a tool call writes to the session's log: two appends, each an event with its step's record.

The DECIDE step's record is durable before the call runs and the TOOL step's before the loop goes on
(a takeover must find the decision and the result, not run the tool again). Sent apart, the call's
announcement and its result each went in an append of their own and each record waited for it: four
appends and four round trips per tool call. A record with no side effect after it (START, MODEL, STEP)
never goes alone. Every append the runtime sends is captured here, whichever transport carries it (its
append stream, or unary AppendEvents).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cogmesh.sessions.v1 import sessions_pb2
from services.lib import journal_kinds
from tests.integration.conftest import new_session
from tests.integration.test_pause_resume import agents_suite, message, stream

pytestmark = pytest.mark.asyncio(loop_scope="function")


def kinds_of(request: sessions_pb2.AppendEventsRequest) -> tuple[list[str], list[int]]:
    return [e.WhichOneof("payload") or "" for e in request.events], [journal_kinds.kind_of(e) for e in request.entries]


async def calculator_turn(tmp_path: Path) -> list[tuple[list[str], list[int]]]:
    """The kinds of events and entries of each append of one calculator turn, in order.

    The model takes a while per chunk, as a real one does: each append is answered before the next is due.
    """
    async with agents_suite(tmp_path, local_delay_ms=20) as env:
        runtime = env.suite.servers["runtime"].app.mounts[0].servicer
        sent: list[sessions_pb2.AppendEventsRequest] = []
        targets = [runtime.runner.clients.sessions, getattr(runtime.runner, "appends", None)]
        for target in [t for t in targets if t is not None]:
            original = target.AppendEvents

            def capture(request: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
                sent.append(request)
                return _original(request, *args, **kwargs)

            target.AppendEvents = capture

        session_id = await new_session(env.gateway)
        events = await stream(env.gateway.SendMessage(message(session_id, "What is 17 * 23?")))
        assert events[-1].final.text == "17 * 23 = 391."
    return [kinds_of(r) for r in sent]


@pytest.mark.parametrize(
    ("event", "record"),
    [("tool_call_started", journal_kinds.DECIDE), ("tool_call_finished", journal_kinds.TOOL)],
    ids=["announcement and decision", "result and its record"],
)
async def test_a_tool_calls_event_and_its_steps_record_go_in_one_append(
    tmp_path: Path, event: str, record: int
) -> None:
    appends = await calculator_turn(tmp_path)
    with_event = [a for a in appends if event in a[0]]
    with_record = [a for a in appends if record in a[1]]
    assert len(with_event) == 1 and with_record == with_event, appends
    events_of_it, records = with_event[0]
    assert events_of_it[-1] == event and records[-1] == record, "the record after it"
    assert all(events for events, _ in appends), f"a record went in an append of its own: {appends}"
