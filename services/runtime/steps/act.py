"""Acting on a model step's calls, then what the step's end decides.

Ordinary calls run concurrently (at most `max_parallel_tools` at once), each bounded
by its timeout, retried on transport failures and guarded by its server's circuit
breaker; POST_ACT sees each result. Each finished call is recorded before anything
else goes on, so a turn taken over by another replica never runs it again. Calls
answered from outside (approvals, the user's input, client tools) and subagents'
tasks follow, one after the other (steps/answers.py). Then the results join the
transcript and the step's end may stop the turn: a guardrail, a budget, structured
output, or the tool limit (the model is asked to answer without tools).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from cogmesh.common.v1 import events_pb2
from services.lib import journal_kinds
from services.lib.llm import ChatMessage
from services.runtime.steps.answers import settle
from services.runtime.steps.call import invoke, post_act
from services.runtime.steps.decide import NOT_RUN_BUDGET
from services.runtime.steps.delegate import delegate
from services.runtime.steps.finish import finish
from services.runtime.steps.session import session_call
from services.runtime.steps.state import SEQUENTIAL, CallState, Run, notice

TOOL_LIMIT_NOTICE = (
    "The tool call limit of this turn has been reached. Do not call any more tools: "
    "answer the user now with what you have."
)


async def act(run: Run) -> AsyncIterator[events_pb2.RuntimeEvent]:
    """Run the step's calls (ordinary ones in parallel, then the ones answered from outside, in order)."""
    refused_by_budget = any(item.result.startswith(NOT_RUN_BUDGET) for item in run.items)
    if run.ending is not None or run.ending_final is not None:
        for item in run.items:  # keep the history well-formed: every call gets an answer
            if item.state not in ("answered", "done"):
                item.answer("error: not run: the turn was stopped")
    for item in run.items:
        if item.state == "answered":
            item.state = "done"
            if not item.internal:
                yield run.finished(item)
    async for item in _invoke_all(run, [item for item in run.items if item.state == "run"]):
        await post_act(run, item)
        for out in run.drain():
            yield out
        item.state = "done"
        yield run.finished(item)
        await run.record(journal_kinds.TOOL, "act")
    for item in run.items:
        if item.state in SEQUENTIAL:
            answered = (
                delegate(run, item)
                if item.state == "delegate"
                else session_call(run, item)
                if item.state == "session"
                else settle(run, item)
            )
            async for out in answered:
                yield out
            if run.paused is not None:
                return
            await run.record(journal_kinds.TOOL, "act")
    run.record_results()
    async for out in _after_step(run, refused_by_budget):
        yield out


async def _after_step(run: Run, refused_by_budget: bool) -> AsyncIterator[events_pb2.RuntimeEvent]:
    turn = run.turn
    if run.ending is not None:
        kind, message = run.ending
        yield run.end_error(kind, message, kind == events_pb2.ERROR_KIND_OUTPUT_INVALID, run.step_text)
        return
    if run.ending_final is not None:
        async for out in finish(run, run.ending_final, stored=False):
            yield out
        return
    done, value = run.structured
    if done:
        async for out in finish(run, run.step_text or json.dumps(value, sort_keys=True), value):
            yield out
        return
    if run.tools_enabled and run.budget.is_exhausted():
        if run.limits.on_tool_limit == "error":
            message = f"tool limit: {run.budget.why_not(False)}"
            yield run.end_error(events_pb2.ERROR_KIND_BUDGET_EXCEEDED, message, False, run.step_text)
            return
        run.tools_enabled = False
        run.messages.append(ChatMessage("system", TOOL_LIMIT_NOTICE))
        yield notice(
            turn,
            "tool_limit",
            f"{run.budget.why_not(False)}: the model is asked to answer without tools",
            tool_calls=run.budget.total_calls,
            max_tool_calls=run.limits.max_tool_calls,
        )
    elif refused_by_budget:  # only the MCP limit: MCP tools stop being offered
        if run.limits.on_tool_limit == "error":
            message = f"tool limit: {run.budget.why_not(True)}"
            yield run.end_error(events_pb2.ERROR_KIND_BUDGET_EXCEEDED, message, False, run.step_text)
            return
        yield notice(
            turn,
            "tool_limit",
            f"{run.budget.why_not(True)}: MCP tools are no longer offered",
            mcp_calls=run.budget.mcp_calls,
            max_mcp_calls=run.limits.max_mcp_calls,
        )


async def _invoke_all(run: Run, items: list[CallState]) -> AsyncIterator[CallState]:
    """Run calls concurrently (at most max_parallel_tools at once), yielding each as it finishes."""
    if len(items) <= 1:  # the common case: no tasks to create
        for item in items:
            await invoke(run, item)
            yield item
        return
    gate = asyncio.Semaphore(max(1, run.limits.max_parallel_tools))

    async def one(item: CallState) -> CallState:
        async with gate:
            await invoke(run, item)
        return item

    tasks = [asyncio.create_task(one(item)) for item in items]
    try:
        for next_done in asyncio.as_completed(tasks):
            yield await next_done
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
