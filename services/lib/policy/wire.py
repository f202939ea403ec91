"""Conversions between the policy protos and the domain values (kept out of the servicer)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from cogmesh.common.v1 import events_pb2, messages_pb2
from cogmesh.policy.v1 import policy_pb2
from services.kit.protos import dict_to_struct, now, struct_to_dict
from services.lib.policy.domain import ModelFailure, Msg, Notice, Scope, ToolCallRef, ToolInfo, TurnContext
from services.lib.policy.interceptors.base import Action, PhaseOutcome

ROLE_NAMES = {
    messages_pb2.ROLE_USER: "user",
    messages_pb2.ROLE_ASSISTANT: "assistant",
    messages_pb2.ROLE_SYSTEM: "system",
    messages_pb2.ROLE_TOOL: "tool",
}
ROLE_VALUES = {name: value for value, name in ROLE_NAMES.items()}


ACTIONS = {
    Action.OK: policy_pb2.INTERCEPT_ACTION_OK,
    Action.STOP: policy_pb2.INTERCEPT_ACTION_STOP,
    Action.SKIP: policy_pb2.INTERCEPT_ACTION_SKIP,
    Action.MODIFY_MESSAGES: policy_pb2.INTERCEPT_ACTION_MODIFY_MESSAGES,
    Action.MODIFY_ARGS: policy_pb2.INTERCEPT_ACTION_MODIFY_ARGS,
    Action.MODIFY_TOOLS: policy_pb2.INTERCEPT_ACTION_MODIFY_TOOLS,
    Action.USE_MODEL: policy_pb2.INTERCEPT_ACTION_USE_MODEL,
    Action.MODIFY_PROMPT: policy_pb2.INTERCEPT_ACTION_MODIFY_PROMPT,
    Action.MODIFY_TOOL_RESULT: policy_pb2.INTERCEPT_ACTION_MODIFY_TOOL_RESULT,
    Action.REQUIRE_APPROVAL: policy_pb2.INTERCEPT_ACTION_REQUIRE_APPROVAL,
}

ERROR_KINDS = {
    "budget_exceeded": events_pb2.ERROR_KIND_BUDGET_EXCEEDED,
    "rate_limited": events_pb2.ERROR_KIND_RATE_LIMITED,
    "guardrail": events_pb2.ERROR_KIND_GUARDRAIL,
    "internal": events_pb2.ERROR_KIND_INTERNAL,
}


def scope_from(message: policy_pb2.Scope) -> Scope:
    return Scope(
        agent=message.agent,
        tenant_id=message.tenant_id,
        session_id=message.session_id,
        turn_id=message.turn_id,
        role_id=message.role_id,
        active_skill_ids=frozenset(message.active_skill_ids),
        session_scope=dict(message.session_scope),
    )


def msg_from(message: messages_pb2.Message) -> Msg:
    calls = tuple(ToolCallRef(c.id, c.name, struct_to_dict(c.arguments)) for c in message.tool_calls)
    return Msg(
        ROLE_NAMES.get(message.role, "user"),
        message.content,
        calls,
        message.tool_call_id,
        message.name,
        message.turn_id,
    )


def msg_to(message: Msg) -> messages_pb2.Message:
    return messages_pb2.Message(
        role=ROLE_VALUES.get(message.role, messages_pb2.ROLE_USER),
        content=message.content,
        tool_calls=[
            messages_pb2.ToolCall(id=c.id, name=c.name, arguments=dict_to_struct(c.arguments))
            for c in message.tool_calls
        ],
        tool_call_id=message.tool_call_id,
        name=message.name,
        turn_id=message.turn_id,
    )


def tools_from(specs: Iterable[messages_pb2.ToolSpec]) -> list[ToolInfo]:
    return [ToolInfo(s.name, s.description) for s in specs]


def context_from(scope: Scope, message: policy_pb2.TurnContext) -> TurnContext:
    return TurnContext(
        scope=scope,
        task=message.task,
        messages=[msg_from(m) for m in message.messages],
        message_count=message.message_count,
        system_prompt=message.system_prompt,
        tools=tools_from(message.tools),
        model=message.model,
        model_calls=message.model_calls,
        tool_calls=message.tool_calls,
        mcp_calls=message.mcp_calls,
        run_context=struct_to_dict(message.run_context) if message.HasField("run_context") else {},
        state=struct_to_dict(message.state) if message.HasField("state") else {},
        is_subagent=message.is_subagent,
    )


def failure_from(message: policy_pb2.ModelFailure) -> ModelFailure:
    return ModelFailure(message.kind or "error", message.message)  # type: ignore[arg-type]


def outcome_to(outcome: PhaseOutcome, state: dict[str, object] | None) -> policy_pb2.InterceptOutcome:
    out = policy_pb2.InterceptOutcome(
        action=ACTIONS[outcome.action],
        steps=[
            policy_pb2.InterceptStep(interceptor=s.interceptor, action=ACTIONS[s.action], detail=s.detail)
            for s in outcome.steps
        ],
        reason=outcome.reason,
        wait_ms=round(outcome.wait_s * 1000),
    )
    if outcome.error_kind is not None:
        out.error_kind = ERROR_KINDS[outcome.error_kind]
    if outcome.messages is not None:
        out.messages_modified = True
        out.messages.extend(msg_to(m) for m in outcome.messages)
    if outcome.tools is not None:
        out.tools_modified = True
        out.tool_names.extend(outcome.tools)
    if outcome.model is not None:
        out.model = outcome.model
    if outcome.prompt is not None:
        out.system_prompt = outcome.prompt
    if outcome.args is not None:
        out.tool_args.CopyFrom(dict_to_struct(outcome.args))
    if outcome.tool_result is not None:
        out.tool_result = outcome.tool_result
    if state is not None:
        out.state.CopyFrom(dict_to_struct(state))
    return out


def events_to(notices: Sequence[Notice], scope: Scope) -> list[events_pb2.RuntimeEvent]:
    """Notices as the runtime events the client sees (seq is stamped by the gateway)."""
    if not notices:
        return []
    events = []
    stamp = now()
    for notice in notices:
        event = events_pb2.RuntimeEvent(session_id=scope.session_id, turn_id=scope.turn_id, create_time=stamp)
        if notice.kind == "status":
            event.status.CopyFrom(events_pb2.StatusUpdate(state=events_pb2.TURN_STATE_RUNNING, text=notice.text))
        elif notice.kind == "compacted":
            event.context_compacted.CopyFrom(
                events_pb2.ContextCompacted(
                    summary_tokens=int(notice.metadata.get("summary_tokens", 0)),
                    archived_count=int(notice.metadata.get("archived_count", 0)),
                )
            )
        else:
            metadata = dict_to_struct(_jsonable(dict(notice.metadata)))  # type: ignore[arg-type]
            event.native_notice.CopyFrom(events_pb2.NativeNotice(text=notice.text, metadata=metadata))
        events.append(event)
    return events


def _jsonable(value: object) -> object:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)
