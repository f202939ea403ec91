"""The turn's first step: PRE_RUN may change the system prompt, the tools on offer and the model."""

from __future__ import annotations

from collections.abc import AsyncIterator

from cogmesh.common.v1 import events_pb2
from services.lib.llm import ChatMessage
from services.runtime.phases import Phase
from services.runtime.steps.finish import stopped
from services.runtime.steps.state import Run, event, notice
from services.runtime.steps.think import switch_model


async def start(run: Run) -> AsyncIterator[events_pb2.RuntimeEvent]:
    turn = run.turn
    user = ChatMessage("user", turn.user_text)
    turn.new_messages.append(user)
    history = list(turn.history)
    # A compacted conversation (a rolling summary) may have archived tool results behind it.
    run.archived = turn.archive_tool is not None and (bool(turn.summary) or any(is_marker(m) for m in history))
    change = await run.phase_change(
        Phase.PRE_RUN, system_prompt=run.system_prompt, messages=[*history, user], tools=run.offered()
    )
    for out in run.drain():
        yield out
    if change.stop is not None:
        yield stopped(run, change)
        return
    if change.system_prompt is not None:
        run.system_prompt = change.system_prompt
    if change.tools is not None:
        run.offered_names = {t.name for t in change.tools}
    if change.model is not None:
        switched = await switch_model(run, change.model, "pre_run")
        if switched is not None:
            yield switched
    working = list(change.messages) if change.replace_messages and change.messages is not None else [*history, user]
    run.messages = [ChatMessage("system", run.system_prompt), *working]
    yield event(turn, status=events_pb2.StatusUpdate(state=events_pb2.TURN_STATE_RUNNING, text="thinking"))
    for kind, text in turn.notices:
        yield notice(turn, kind, text)


MARKER_PREFIX = "SUMMARIZED executionId:"  # as the context service's archive writes it


def is_marker(message: ChatMessage) -> bool:
    """A tool result archived behind a marker, by compaction or as too long (get_tool_response reads it back)."""
    return message.role == "tool" and message.content.startswith(MARKER_PREFIX)
