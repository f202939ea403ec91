"""Calls the runtime answers from the session's own state: handoffs and the todo list.

Their effect on the session is an event (`handoff`, `plan`), which the sessions service
applies to the session in the same write that logs it. What the call changed in the turn
(the list and its version, the agent handed to) is in the turn's `meta`, which every
journal entry keeps: the call's `tool` record stores it, so a turn taken over after that
record never makes the call again, and one taken over before it redoes the call from the
state before it, with the same result and the same version.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from cogmesh.common.v1 import events_pb2
from services.runtime.steps.decide import stop_after_step
from services.runtime.steps.state import CallState, Run
from services.runtime.tools.handoff import BACK_TOOL, TRANSFER_TOOL, final_text, handoff_event, target_of
from services.runtime.tools.todo import TODO_TOOL, Plan, replace_list


async def session_call(run: Run, item: CallState) -> AsyncIterator[events_pb2.RuntimeEvent]:
    """Answer a handoff or todo-list call, yielding the events that carry its effect, then its end."""
    turn, name = run.turn, item.call.name
    effects: list[events_pb2.RuntimeEvent] = []
    if name == TODO_TOOL:
        try:
            plan, effects = replace_list(Plan.from_json(turn.meta.get("plan")), item.arguments)
        except ValueError as exc:
            item.answer(f"error: {exc}")
        else:
            turn.meta["plan"] = plan.to_json()
            item.answer(plan.render(), ok=True)
    elif name in (TRANSFER_TOOL, BACK_TOOL):
        owner = str(turn.meta.get("session_agent") or turn.agent)
        target, reason = target_of(name, item.arguments, owner), str(item.arguments.get("reason", ""))
        if turn.meta.get("handed_to"):
            item.answer(f"error: this turn already handed the conversation to {turn.meta['handed_to']}")
        elif target == turn.agent:
            item.answer(f"error: {target} already answers this conversation")
        else:
            turn.meta["handed_to"] = target
            effects = [handoff_event(turn.agent, target, reason, item.call.id)]
            stop_after_step(run, 0, final_text(target, reason))  # the turn ends once the step's calls are answered
            item.answer(f"The conversation is now with {target}; end your turn.", ok=True)
    else:
        item.answer(f"error: {name} is not answered by the runtime")
    for out in effects:
        out.turn_id = turn.turn_id
        yield out
    item.state = "done"
    yield run.finished(item)
