"""Deciding on the tool calls of a model step: local checks, the policy's verdicts, PRE_ACT.

The loop decides alone what it can (an unknown tool, broken arguments, the tool
budget, the tool's schema); the rest goes to the policy service in one round trip
for the whole step, then through the in-process PRE_ACT interceptors. Each call ends
up answered (not run, with why), to run, to wait for an answer from outside, or to
hand to a subagent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from cogmesh.common.v1 import events_pb2
from services.kit.limits import argument_depth_problem
from services.kit.protos import dict_to_struct
from services.lib.llm import ToolCallRequest
from services.runtime.phases import Phase
from services.runtime.steps.finish import invalid_message
from services.runtime.steps.state import CallState, Run, event, validate
from services.runtime.structured import MAX_REPAIRS, RESPOND_TOOL, repair_message
from services.runtime.turn import Verdict

MAX_DELEGATION_DEPTH = 3
NOT_RUN_BUDGET = "error: not run: "


async def decide(run: Run) -> AsyncIterator[events_pb2.RuntimeEvent]:
    """Decide on `run.calls`; announce every call that is not the structured-output tool."""
    turn = run.turn
    run.step_text = run.text
    run.items = await _prepare(run, run.calls)
    for out in run.drain():
        yield out
    for item in run.items:
        if item.internal:
            continue
        tool = item.tool
        yield event(
            turn,
            tool_call_started=events_pb2.ToolCallStarted(
                name=item.call.name,
                arguments=dict_to_struct(item.arguments),
                correlation_id=item.call.id,
                source=tool.source if tool and tool.source not in ("builtin", "internal") else "",
                server=tool.server if tool else "",
            ),
        )


async def _prepare(run: Run, calls: list[ToolCallRequest]) -> list[CallState]:
    """Local checks, then one policy round trip for the step, then the in-process PRE_ACT interceptors."""
    turn = run.turn
    items: list[CallState] = []
    before = (run.budget.total_calls, run.budget.mcp_calls)
    for call in calls:
        if turn.output is not None and call.name == RESPOND_TOOL:
            items.append(_respond(run, call))
            continue
        run.metrics.tool_calls += 1
        item = CallState(call, None, call.arguments)
        items.append(item)
        if run.ending is not None or run.ending_final is not None:
            continue
        _check_locally(run, item)
    checked = [i for i in items if i.state == "check" and i.tool is not None and i.tool.policy_checked]
    if checked:
        verdicts = await _verdicts(run, checked, before)
        for item, verdict in zip(checked, verdicts, strict=True):
            run.buffer.extend(verdict.events)
            assert item.tool is not None
            if not verdict.allowed:
                run.budget.release_call(item.tool.is_mcp)
                item.answer(f"error: {verdict.reason}")
                if verdict.stop:
                    stop_after_step(run, verdict.stop_kind, verdict.reason)
                continue
            problem = argument_depth_problem(verdict.arguments)
            if problem:
                run.budget.release_call(item.tool.is_mcp)
                item.answer(f"error: the policy's arguments for {item.call.name} are invalid: {problem}")
                continue
            item.arguments, item.wait_s, item.timeout_s = verdict.arguments, verdict.wait_s, verdict.timeout_s
            item.needs_approval, item.approval_reason = verdict.needs_approval, verdict.approval_reason
    for item in items:
        if item.state != "check":
            continue
        assert item.tool is not None
        if run.ending is not None or run.ending_final is not None:
            run.budget.release_call(item.tool.is_mcp)
            continue  # answered "not run" when the step acts
        if turn.interceptors:
            change = await run.phase_change(
                Phase.PRE_ACT, tool_name=item.call.name, tool_args=item.arguments, tool_call_id=item.call.id
            )
            if change.stop is not None:
                run.budget.release_call(item.tool.is_mcp)
                run.ending = (events_pb2.ERROR_KIND_GUARDRAIL, f"stopped by an interceptor: {change.stop}")
                item.answer(f"error: not run: stopped by an interceptor: {change.stop}")
                continue
            if change.skip is not None:
                run.budget.release_call(item.tool.is_mcp)
                item.answer(change.skip, ok=True)
                continue
            if change.tool_args is not None:
                problem = argument_depth_problem(change.tool_args)
                if problem:
                    run.budget.release_call(item.tool.is_mcp)
                    item.answer(f"error: an interceptor's arguments for {item.call.name} are invalid: {problem}")
                    continue
                item.arguments = change.tool_args
        item.state = _handling(run, item)
    return items


def _check_locally(run: Run, item: CallState) -> None:
    """What the loop can decide alone: unknown tool, broken arguments, the tool budget, the schema."""
    call = item.call
    tool = run.tool(call.name) if run.tools_enabled else None
    if tool is None or (run.offered_names is not None and call.name not in run.offered_names and tool.policy_checked):
        why = "is not available to this agent" if run.tools_enabled else "was called after the tool limit"
        item.answer(f"error: tool {call.name!r} {why}")
        return
    item.tool = tool
    if call.arguments_error:
        item.answer(f"error: invalid arguments for {call.name}: {call.arguments_error}")
        return
    if tool.handling == "delegate" and run.turn.depth >= MAX_DELEGATION_DEPTH:
        item.answer(f"error: {call.name}: delegation is nested too deep ({MAX_DELEGATION_DEPTH} levels)")
        return
    if not run.budget.can_call(tool.is_mcp):
        why = run.budget.why_not(tool.is_mcp)
        item.answer(f"{NOT_RUN_BUDGET}{why}; answer with what you have")
        return
    problems = validate(tool, call.arguments)
    if problems:
        item.answer(f"error: invalid arguments for {call.name}: {problems}")
        return
    run.budget.record_call(tool.is_mcp)  # reserved; given back if the call is then not run


async def _verdicts(run: Run, items: list[CallState], before: tuple[int, int]) -> list[Verdict]:
    turn = run.turn
    if turn.policy is not None:
        context = run.context(Phase.PRE_ACT, tool_calls=before[0], mcp_calls=before[1])
        verdicts = await turn.policy.check_calls([(i.call, i.arguments) for i in items], context)
        if len(verdicts) != len(items):
            raise RuntimeError(f"the policy answered {len(verdicts)} of {len(items)} tool calls")
        return verdicts
    return [await turn.check_tool(i.call.name, i.arguments) for i in items]


def _handling(run: Run, item: CallState) -> str:
    tool = item.tool
    assert tool is not None
    if tool.handling != "run":
        return tool.handling
    return "approval" if item.needs_approval or run.turn.interrupt_on(item.call.name) else "run"


def stop_after_step(run: Run, kind: int, reason: str) -> None:
    """End the turn once the step's calls are answered: with an error of `kind`, or (0) a final answer."""
    if kind:
        run.ending = run.ending or (kind, reason)
    elif run.ending is None:
        run.ending_final = run.ending_final or reason


def _respond(run: Run, call: ToolCallRequest) -> CallState:
    """The structured-output tool: accept the answer, or ask for one repair."""
    output = run.turn.output
    assert output is not None
    item = CallState(call, None, call.arguments, internal=True)
    if call.arguments_error:
        errors = [call.arguments_error]
    else:
        value = output.from_tool_arguments(call.arguments)
        errors = output.errors(value)
        if not errors:
            run.structured = (True, value)
            item.answer("ok", ok=True)
            return item
    if run.repairs >= MAX_REPAIRS:
        run.ending = (events_pb2.ERROR_KIND_OUTPUT_INVALID, invalid_message(errors))
    else:
        run.repairs += 1
    item.answer(repair_message(errors))
    return item
