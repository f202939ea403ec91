"""Calls answered from outside: a human's approval, the user's input, a client-side tool.

Such a call waits for its answer by pausing the turn: the interrupt event goes out
with the run's state (kept by the journal), and the turn ends there. Resuming, on any
replica, restores that state and applies the answer: an approved or edited call runs,
a rejected one gives the model the reviewer's reason, user input and client results
become the call's result. Abandoning answers every pending call with a cancellation.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

from cogmesh.common.v1 import events_pb2, messages_pb2
from services.kit.limits import argument_depth_problem
from services.kit.protos import APPROVAL_DECISIONS, dict_to_struct
from services.runtime.steps.call import idempotency_key, run_now
from services.runtime.steps.evict import bound_result
from services.runtime.steps.state import CallState, Run, event, validate
from services.runtime.turn import Decision

ALLOWED_DECISIONS = sorted(APPROVAL_DECISIONS)  # approve, edit, reject: every answer a turn knows


async def settle(run: Run, item: CallState) -> AsyncIterator[events_pb2.RuntimeEvent]:
    """A call that waits for an answer: apply the answer, or pause for it."""
    decision = take_decision(run, item)
    if decision is None:
        pause(run, item)
        return
    kind = item.state
    if kind == "approval":
        if decision.kind == "reject":
            reason = decision.text.strip() or "no reason given"
            item.answer(f"error: a human reviewer rejected this call: {reason}")
        elif decision.kind == "edit" and decision.arguments is not None:
            assert item.tool is not None
            problems = argument_depth_problem(decision.arguments) or validate(item.tool, decision.arguments)
            if problems:
                item.answer(f"error: the reviewer's edited arguments are invalid for {item.call.name}: {problems}")
            else:
                item.arguments = decision.arguments
                await run_now(run, item)
        else:
            await run_now(run, item)
    elif kind == "ask_user":
        item.answer(decision.text, ok=True)
    else:  # a client-side tool
        text = decision.text
        failed = decision.is_error or text.startswith("error:")
        if decision.is_error and not text.startswith("error:"):
            text = f"error: {text}"
        item.answer(text, ok=not failed)
        await bound_result(run, item)
    for out in run.drain():
        yield out
    item.state = "done"
    yield run.finished(item)


def take_decision(run: Run, item: CallState) -> Decision | None:
    if run.decision is None or run.decision[0] != item.call.id:
        return None
    decision: Decision | None = run.decision[1]
    run.decision = None
    return decision


def pause(run: Run, item: CallState) -> None:
    """Capture the state and the interrupt event; the driver records them and the turn ends here."""
    turn = run.turn
    interrupt_id = f"int_{uuid.uuid4().hex}"
    if item.state == "approval":
        settings = turn.approvals(item.call.name)
        required = events_pb2.ApprovalRequired(
            action_name=item.call.name,
            arguments=dict_to_struct(item.arguments),
            allowed_decisions=ALLOWED_DECISIONS,
            interrupt_id=interrupt_id,
            description=item.approval_reason
            or f"agent {turn.agent or 'the agent'} wants to run {item.call.name}, which needs a human's approval",
            correlation_id=item.call.id,
        )
        if settings is not None:
            required.prompt = fill_prompt(settings.prompt, item.arguments)
            if settings.defaults:
                required.defaults.CopyFrom(dict_to_struct(settings.defaults))
        paused = event(turn, approval_required=required)
    elif item.state == "ask_user":
        paused = event(
            turn,
            user_input_requested=events_pb2.UserInputRequested(
                prompt=str(item.arguments.get("prompt", "")), interrupt_id=interrupt_id, correlation_id=item.call.id
            ),
        )
    else:
        paused = event(
            turn,
            client_tool_call=events_pb2.ClientToolCall(
                call=messages_pb2.ToolCall(
                    id=item.call.id, name=item.call.name, arguments=dict_to_struct(item.arguments)
                ),
                interrupt_id=interrupt_id,
                idempotency_key=idempotency_key(run, item),
                scope=turn.context.scope,
            ),
        )
    run.snapshot = run.capture(item.state, item.call.id)
    run.paused = paused
    run.done = True


_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def fill_prompt(prompt: str, arguments: Mapping[str, Any]) -> str:
    """An approval prompt with `{name}` replaced by the call's argument `name` (text as is, other values
    as JSON); a name the call does not have stays as written."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in arguments:
            return match.group(0)
        found = arguments[name]
        return found if isinstance(found, str) else json.dumps(found, sort_keys=True, default=str)

    return _PLACEHOLDER.sub(value, prompt)
