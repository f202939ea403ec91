"""The policy as the loop's `TurnPolicy`: one decision per phase, only where there is work.

`begin_turn` asks BeginTurn at the start of a turn (slash commands, role routing,
UserPromptSubmit hooks, tool selection, the phases that have work). `PolicyLink`
then answers the loop at each phase: RunInterceptors for PRE_RUN, PRE_THINK,
POST_THINK, ON_ERROR and POST_RUN, CheckToolCalls once per model step (PRE_ACT),
CheckToolResult after each tool (POST_ACT). Phases missing from BeginTurn's list
cost nothing. Every answer's events go back to the loop to be yielded, and the
interceptor state the policy returns is sent with the next call (and kept in a
paused turn's snapshot).

The calls go to `clients.policy_api`: in a runtime that is services/runtime/local_policy.py,
which decides in process from the policy snapshot it holds (and asks the service until it
has one); elsewhere the PolicyService stub. `policy_version` names the snapshot a turn's
BeginTurn was decided with, for the turn's start record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cogmesh.common.v1 import events_pb2, messages_pb2
from cogmesh.policy.v1 import policy_pb2
from services.kit.clients import Clients, call
from services.kit.errors import Unavailable
from services.kit.protos import dict_to_struct, struct_to_dict
from services.lib.llm import ChatMessage, ToolCallRequest, ToolSchema
from services.lib.policy.domain import PHASE_TO_PROTO
from services.runtime.phases import Intercept, Phase, PhaseContext
from services.runtime.turn import Verdict

# The loop's model failure kinds -> the policy's ModelFailure.kind.
FAILURE_KINDS = {"rate_limited": "rate_limit", "timeout": "timeout", "context_length": "context_length"}
_ROLES = {
    "user": messages_pb2.ROLE_USER,
    "assistant": messages_pb2.ROLE_ASSISTANT,
    "tool": messages_pb2.ROLE_TOOL,
    "system": messages_pb2.ROLE_SYSTEM,
}
_FROM_ROLES = {v: k for k, v in _ROLES.items()}


def message_to_proto(message: ChatMessage, turn_id: str = "") -> messages_pb2.Message:
    """The loop's message on the wire (for the policy, the context service and the session's store)."""
    return messages_pb2.Message(
        role=_ROLES[message.role],
        content=message.content,
        tool_calls=[
            messages_pb2.ToolCall(id=c.id, name=c.name, arguments=dict_to_struct(c.arguments))
            for c in message.tool_calls
        ],
        tool_call_id=message.tool_call_id,
        name=message.name,
        turn_id=turn_id,
    )


def message_from_proto(message: messages_pb2.Message) -> ChatMessage:
    return ChatMessage(
        _FROM_ROLES.get(message.role, "user"),  # type: ignore[arg-type]
        message.content,
        tuple(ToolCallRequest(c.id, c.name, struct_to_dict(c.arguments)) for c in message.tool_calls),
        message.tool_call_id,
        message.name,
    )


def tool_specs(schemas: Sequence[ToolSchema]) -> list[messages_pb2.ToolSpec]:
    # Names are enough for the policy's gates and selector: no schema round trip on the hot path.
    return [messages_pb2.ToolSpec(name=schema.name) for schema in schemas]


async def begin_turn(
    clients: Clients,
    scope: policy_pb2.Scope,
    text: str,
    explicit_role: str,
    model: str,
    tools: Sequence[str],
    default_role: str = "",
) -> policy_pb2.BeginTurnResponse:
    """BeginTurn; when the policy service cannot be reached, the turn starts without it.

    Without BeginTurn there are no slash commands, no role routing and no prompt hooks
    for this turn (a notice says so), but every tool call is still checked: PRE_ACT stays
    on, so tools are refused (the turn fails) while the policy service is away.
    """
    try:
        return await call(  # type: ignore[no-any-return]
            "policy",
            clients.policy_api.BeginTurn,
            policy_pb2.BeginTurnRequest(
                scope=scope,
                text=text,
                explicit_role=explicit_role,
                model=model,
                tools=[messages_pb2.ToolSpec(name=name) for name in tools],
            ),
        )
    except Unavailable as exc:
        notice = events_pb2.NativeNotice(
            kind="policy_unavailable",
            text=f"{exc.message}: the turn starts without slash commands, role routing and prompt hooks; "
            "tool calls still need the policy service",
        )
        return policy_pb2.BeginTurnResponse(
            role=policy_pb2.RoleResolution(
                role_id=scope.role_id or default_role, matched_by="default", skill_ids=list(scope.active_skill_ids)
            ),
            tool_names=list(tools),
            phases=[policy_pb2.PHASE_PRE_ACT],
            events=[events_pb2.RuntimeEvent(native_notice=notice)],
        )


def policy_version(clients: Clients, turn_id: str) -> str:
    """The policy snapshot digest the turn's BeginTurn was decided with: the runtime's own, or the
    service's when the service was asked and had announced one; "" when not known."""
    versions = getattr(clients.policy_api, "turn_version", None)
    return str(versions(turn_id)) if versions is not None else ""


class PolicyLink:
    """One turn's (or one subagent's) conversation with the policy service."""

    def __init__(
        self,
        clients: Clients,
        scope: policy_pb2.Scope,
        phases: frozenset[Phase],
        *,
        is_subagent: bool = False,
        state: dict[str, Any] | None = None,
    ) -> None:
        self.clients = clients
        self.scope = scope
        self.phases = phases
        self.is_subagent = is_subagent
        self.state = state
        # The working messages are the same objects from step to step: convert each once.
        self._protos: dict[int, tuple[ChatMessage, messages_pb2.Message]] = {}

    def _proto(self, message: ChatMessage) -> messages_pb2.Message:
        known = self._protos.get(id(message))
        if known is not None and known[0] is message:
            return known[1]
        converted = message_to_proto(message)
        self._protos[id(message)] = (message, converted)
        return converted

    def _turn_context(self, context: PhaseContext, with_messages: bool) -> policy_pb2.TurnContext:
        messages = [m for m in context.messages if m.role != "system"] if with_messages else []
        turn = policy_pb2.TurnContext(
            task=context.task,
            messages=[self._proto(m) for m in messages],
            message_count=len(context.messages),
            system_prompt=context.system_prompt,
            tools=tool_specs(context.tools),
            model=context.model,
            model_calls=context.model_calls,
            tool_calls=context.tool_calls,
            mcp_calls=context.mcp_calls,
            is_subagent=self.is_subagent,
        )
        if self.state is not None:
            turn.state.CopyFrom(dict_to_struct(self.state))
        return turn

    def _keep_state(self, outcome: policy_pb2.InterceptOutcome) -> None:
        if outcome.HasField("state"):
            self.state = struct_to_dict(outcome.state)

    async def run_phase(self, context: PhaseContext) -> Intercept:
        phase = context.phase
        request = policy_pb2.RunInterceptorsRequest(
            phase=PHASE_TO_PROTO[phase],
            scope=self.scope,
            context=self._turn_context(context, phase in (Phase.PRE_RUN, Phase.PRE_THINK)),
        )
        if phase is Phase.POST_THINK:
            request.model_response.CopyFrom(
                message_to_proto(ChatMessage("assistant", context.model_text, tuple(context.calls)))
            )
        elif phase is Phase.ON_ERROR:
            request.error.CopyFrom(
                policy_pb2.ModelFailure(kind=FAILURE_KINDS.get(context.error_kind, "error"), message=context.error)
            )
        elif phase is Phase.POST_RUN:
            request.final_text = context.model_text
        reply = await call("policy", self.clients.policy_api.RunInterceptors, request)
        self._keep_state(reply.outcome)
        return self._intercept(reply.outcome, reply.events, context)

    def _intercept(
        self,
        outcome: policy_pb2.InterceptOutcome,
        events: Sequence[events_pb2.RuntimeEvent],
        context: PhaseContext,
    ) -> Intercept:
        fields: dict[str, Any] = {"events": list(events)}
        if outcome.action == policy_pb2.INTERCEPT_ACTION_STOP:
            fields["stop"] = outcome.reason or "stopped by policy"
            fields["stop_kind"] = int(outcome.error_kind)
        if outcome.messages_modified:
            fields["messages"] = [message_from_proto(m) for m in outcome.messages]
            fields["replace_messages"] = True
        if outcome.tools_modified:
            keep = list(outcome.tool_names)
            by_name = {schema.name: schema for schema in context.tools}
            fields["tools"] = [by_name[name] for name in keep if name in by_name]
        if outcome.HasField("model"):
            fields["model"] = outcome.model
        if outcome.HasField("system_prompt"):
            fields["system_prompt"] = outcome.system_prompt
        if outcome.HasField("tool_result"):
            fields["tool_result"] = outcome.tool_result
        if outcome.wait_ms > 0:
            fields["wait_s"] = outcome.wait_ms / 1000
        return Intercept(**fields)

    def _call_request(
        self, call_: ToolCallRequest, arguments: Mapping[str, Any], context: policy_pb2.TurnContext | None
    ) -> policy_pb2.CheckToolCallRequest:
        request = policy_pb2.CheckToolCallRequest(
            tenant_id=self.scope.tenant_id,
            agent=self.scope.agent,
            role_id=self.scope.role_id,
            active_skill_ids=self.scope.active_skill_ids,
            tool_name=call_.name,
            arguments=dict_to_struct(arguments),
            session_id=self.scope.session_id,
            turn_id=self.scope.turn_id,
            tool_call_id=call_.id,
            session_scope=self.scope.session_scope,
            agent_definition_json=self.scope.agent_definition_json,
        )
        if context is not None:
            request.context.CopyFrom(context)
        return request

    async def check_calls(
        self, calls: Sequence[tuple[ToolCallRequest, Mapping[str, Any]]], context: PhaseContext
    ) -> list[Verdict]:
        """One CheckToolCalls round trip for the calls of a model step (CheckToolCall for a single one)."""
        turn_context = self._turn_context(context, with_messages=False)
        requests = [self._call_request(c, args, turn_context if i == 0 else None) for i, (c, args) in enumerate(calls)]
        if len(requests) == 1:
            decisions = [await call("policy", self.clients.policy_api.CheckToolCall, requests[0])]
            if decisions[0].HasField("pre_act"):
                self._keep_state(decisions[0].pre_act)
        else:
            reply = await call(
                "policy", self.clients.policy_api.CheckToolCalls, policy_pb2.CheckToolCallsRequest(calls=requests)
            )
            decisions = list(reply.decisions)
            if reply.HasField("state"):
                self.state = struct_to_dict(reply.state)
        return [self._verdict(d) for d in decisions]

    @staticmethod
    def _verdict(decision: policy_pb2.CheckToolCallResponse) -> Verdict:
        allowed = decision.verdict == policy_pb2.VERDICT_ALLOW
        pre_act = decision.pre_act
        stop = decision.HasField("pre_act") and pre_act.action == policy_pb2.INTERCEPT_ACTION_STOP
        approval = allowed and pre_act.action == policy_pb2.INTERCEPT_ACTION_REQUIRE_APPROVAL
        return Verdict(
            allowed,
            decision.reason,
            struct_to_dict(decision.updated_arguments) if allowed else {},
            stop=stop,
            stop_kind=int(pre_act.error_kind) if stop else 0,
            wait_s=pre_act.wait_ms / 1000 if allowed and pre_act.wait_ms > 0 else 0.0,
            timeout_s=decision.timeout_ms / 1000 if decision.timeout_ms > 0 else None,
            events=list(decision.events),
            needs_approval=approval,
            approval_reason=pre_act.reason if approval else "",
        )

    async def check_one(self, name: str, arguments: Mapping[str, Any]) -> Verdict:
        """The loop's per-call fallback (`Turn.check_tool`)."""
        decision = await call(
            "policy",
            self.clients.policy_api.CheckToolCall,
            self._call_request(ToolCallRequest("", name, arguments), arguments, None),
        )
        return self._verdict(decision)

    async def check_result(self, context: PhaseContext) -> Intercept:
        reply = await call(
            "policy",
            self.clients.policy_api.CheckToolResult,
            policy_pb2.CheckToolResultRequest(
                scope=self.scope,
                context=self._turn_context(context, with_messages=False),
                tool_name=context.tool_name,
                tool_call_id=context.tool_call_id,
                arguments=dict_to_struct(context.tool_args),
                result=context.tool_result,
                is_error=not context.tool_ok,
            ),
        )
        self._keep_state(reply.post_act)
        change = self._intercept(reply.post_act, reply.events, context)
        if reply.modified:
            return Intercept(
                **{**{k: v for k, v in vars(change).items() if v is not None}, "tool_result": reply.result}
            )
        return change
