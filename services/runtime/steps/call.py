"""Running one tool call: its idempotency key, timeout, retries, circuit breaker, then POST_ACT."""

from __future__ import annotations

import asyncio
import time

from cogmesh.common.v1 import events_pb2
from services.runtime import genai_telemetry
from services.runtime.phases import Phase, run_phase
from services.runtime.steps.decide import stop_after_step
from services.runtime.steps.evict import bound_result
from services.runtime.steps.state import CallState, Run
from services.runtime.tools.base import ToolContext, ToolError, ToolUnavailable


def idempotency_key(run: Run, item: CallState) -> str:
    """The same for every attempt and every replica that runs this call: the turn, its step and the call
    (in a subagent, under the key of the call that delegated to it)."""
    return f"{run.turn.call_path}{run.turn.turn_id}:{run.iteration}:{item.call.id}"


async def invoke(run: Run, item: CallState) -> None:
    """Run one call: timeout per attempt, retries with the tool's backoff on transport failures, circuit breaker."""
    turn, tool, call = run.turn, item.tool, item.call
    assert tool is not None
    timeout = min(run.limits.tool_timeout_s, tool.timeout_s or run.limits.tool_timeout_s)
    if item.timeout_s:
        timeout = item.timeout_s
    breaker = turn.breakers.get(tool.server) if tool.server else None
    context = ToolContext(
        call.id,
        turn.context.session_id,
        turn.context.tenant_id,
        turn.turn_id,
        idempotency_key(run, item),
        turn.context.scope,
    )
    if item.wait_s > 0:
        await asyncio.sleep(item.wait_s)
    with genai_telemetry.execute_tool(run, item) as traced:
        t0 = time.perf_counter()
        for attempt in range(1, tool.retries + 2):
            if breaker is not None and not breaker.allow_request():
                item.result = (
                    f"error: tool server {tool.server!r} is unavailable (circuit open after repeated failures; "
                    f"retry in {breaker.retry_in_s():.0f}s)"
                )
                traced.error_type = "circuit_open"
                break
            item.attempts = attempt
            try:
                async with asyncio.timeout(timeout):  # cheaper than wait_for: no extra task
                    item.result = await tool.run(item.arguments, context)
                item.ok = True
                if breaker is not None:
                    breaker.record_success()
                break
            except TimeoutError:
                if breaker is not None:
                    breaker.record_failure()
                item.result = f"error: tool {call.name!r} timed out after {timeout:g}s"
                traced.error_type = "timeout"
                break  # not retried: the call may have had effects
            except ToolUnavailable as exc:
                if breaker is not None:
                    breaker.record_failure()
                item.result = f"error: {exc}"
                traced.error_type = "tool_unavailable"
                if attempt <= tool.retries:
                    await asyncio.sleep(tool.backoff.delay_s(attempt, turn.tool_retry_base_s))
            except ToolError as exc:
                if breaker is not None:
                    breaker.record_success()  # the server answered
                item.result = f"error: {exc}"
                traced.error_type = "tool_error"
                break
            except Exception as exc:  # noqa: BLE001 - a failing tool's error goes back to the model
                item.result = f"error: {exc}"
                traced.error_type = type(exc).__qualname__
                break
        item.duration_ms = (time.perf_counter() - t0) * 1000
        await bound_result(run, item)  # before POST_ACT: hooks and the policy see what the model will


async def post_act(run: Run, item: CallState) -> None:
    turn = run.turn
    fields = {
        "tool_name": item.call.name,
        "tool_args": item.arguments,
        "tool_result": item.result,
        "tool_ok": item.ok,
        "tool_call_id": item.call.id,
    }
    if turn.interceptors:
        change = await run_phase(turn.interceptors, run.context(Phase.POST_ACT, **fields))
        if change.tool_result is not None:
            item.result = fields["tool_result"] = change.tool_result
        if change.stop is not None and run.ending is None:
            run.ending = (events_pb2.ERROR_KIND_GUARDRAIL, f"stopped by an interceptor: {change.stop}")
    policy = turn.policy
    if policy is not None and Phase.POST_ACT in policy.phases and item.tool and item.tool.policy_checked:
        checked = await policy.check_result(run.context(Phase.POST_ACT, **fields))
        run.buffer.extend(checked.events or ())
        if checked.tool_result is not None:
            item.result = checked.tool_result
        if checked.stop is not None:
            stop_after_step(
                run, events_pb2.ERROR_KIND_GUARDRAIL if checked.stop_kind is None else checked.stop_kind, checked.stop
            )


async def run_now(run: Run, item: CallState) -> None:
    await invoke(run, item)
    await post_act(run, item)
