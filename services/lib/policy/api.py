"""PolicyService's decisions as protos in, protos out: a thin layer over PolicyEngine.

The policy service serves it over gRPC (services/policy/servicer.py); the runtime calls
it in process over an engine built from the policy snapshot it holds. Bad input raises
the kit's CogmeshError subclasses, which the server turns into gRPC statuses.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from cogmesh.common.v1 import errors_pb2
from cogmesh.policy.v1 import policy_pb2
from services.kit.errors import InvalidArgument, NotFound, Violations
from services.kit.protos import dict_to_struct, struct_to_dict
from services.lib.agents import UnknownAgentError
from services.lib.policy import wire
from services.lib.policy.commands import CommandResult
from services.lib.policy.config import ConfigError, ConfigRejected, ConfigStore, PolicyConfig, digest_of
from services.lib.policy.domain import MODEL_FAILURE_KINDS, PHASE_FROM_PROTO, PHASE_TO_PROTO, Phase, Scope
from services.lib.policy.engine import PolicyEngine, RoleResolution, ToolCallCheck, ToolCallDecision, stored_agent


@contextlib.contextmanager
def _agent_lookup(name: str = "", definition_json: str = "") -> Iterator[None]:
    """The engine's agent lookups inside: a tenant's stored agent from the request's definition (when it sends
    one) stands in for `name`; an agent found nowhere is NOT_FOUND."""
    try:
        stored = stored_agent(name, definition_json)
    except ValueError as exc:
        raise InvalidArgument([("agent_definition_json", str(exc))]) from exc
    try:
        with stored:
            yield
    except UnknownAgentError as exc:
        raise NotFound(str(exc), reason=errors_pb2.ERROR_REASON_AGENT_NOT_FOUND) from exc


def _call_scope(request: policy_pb2.CheckToolCallRequest) -> Scope:
    return Scope(
        request.agent,
        request.tenant_id,
        request.session_id,
        request.turn_id,
        request.role_id,
        frozenset(request.active_skill_ids),
        dict(request.session_scope),
    )


def _decision(
    decision: ToolCallDecision, request: policy_pb2.CheckToolCallRequest, scope: Scope, state: dict[str, Any] | None
) -> policy_pb2.CheckToolCallResponse:
    response = policy_pb2.CheckToolCallResponse(
        verdict=policy_pb2.VERDICT_ALLOW if decision.allowed else policy_pb2.VERDICT_DENY,
        reason=decision.reason,
        rule=decision.rule,
        source=decision.source,
        timeout_ms=decision.timeout_ms,
        events=wire.events_to(decision.notices, scope),
    )
    if decision.allowed:
        # Unchanged arguments go back as they came: no dict round trip on the hot path.
        if decision.arguments_modified:
            response.updated_arguments.CopyFrom(dict_to_struct(decision.arguments))
        else:
            response.updated_arguments.CopyFrom(request.arguments)
    if decision.pre_act is not None:
        response.pre_act.CopyFrom(wire.outcome_to(decision.pre_act, state))
    return response


class PolicyAPI:
    """Each RPC of PolicyService but WatchPolicy; `context` (gRPC's) is not used.

    The requests' field rules (policy.proto: an agent, tool names, counters not negative, a known
    phase...) are checked by the kit before PolicyService runs these; the runtime's in-process calls
    (services/runtime/local_policy.py) build their requests themselves. What is checked here goes beyond
    single fields."""

    def __init__(self, engine: PolicyEngine):
        self.engine = engine

    async def CheckToolCall(
        self, request: policy_pb2.CheckToolCallRequest, context: Any = None
    ) -> policy_pb2.CheckToolCallResponse:
        scope = _call_scope(request)
        ctx = wire.context_from(scope, request.context) if request.HasField("context") else None
        with _agent_lookup(request.agent, request.agent_definition_json):
            decision = await self.engine.check_tool_call(
                scope, request.tool_name, struct_to_dict(request.arguments), ctx, request.tool_call_id
            )
        return _decision(decision, request, scope, decision.state)

    async def CheckToolCalls(
        self, request: policy_pb2.CheckToolCallsRequest, context: Any = None
    ) -> policy_pb2.CheckToolCallsResponse:
        first = request.calls[0]
        ctx = wire.context_from(_call_scope(first), first.context)
        calls = [
            ToolCallCheck(_call_scope(c), c.tool_name, struct_to_dict(c.arguments), c.tool_call_id)
            for c in request.calls
        ]
        with _agent_lookup(first.agent, first.agent_definition_json):
            step = await self.engine.check_tool_calls(calls, ctx)
        response = policy_pb2.CheckToolCallsResponse(
            decisions=[
                _decision(d, c, check.scope, None)
                for d, c, check in zip(step.decisions, request.calls, calls, strict=True)
            ]
        )
        if step.state is not None:
            response.state.CopyFrom(dict_to_struct(step.state))
        return response

    async def CheckToolResult(
        self, request: policy_pb2.CheckToolResultRequest, context: Any = None
    ) -> policy_pb2.CheckToolResultResponse:
        scope = wire.scope_from(request.scope)
        ctx = wire.context_from(scope, request.context)
        with _agent_lookup(request.scope.agent, request.scope.agent_definition_json):
            decision = await self.engine.check_tool_result(
                ctx,
                request.tool_name,
                request.tool_call_id,
                struct_to_dict(request.arguments),
                request.result,
                request.is_error,
            )
        return policy_pb2.CheckToolResultResponse(
            result=decision.result,
            modified=decision.modified,
            post_act=wire.outcome_to(decision.post_act, decision.state),
            events=wire.events_to(decision.notices, scope),
        )

    async def RunInterceptors(
        self, request: policy_pb2.RunInterceptorsRequest, context: Any = None
    ) -> policy_pb2.RunInterceptorsResponse:
        problems = Violations()
        phase = PHASE_FROM_PROTO[request.phase]  # one of the seven, by the request's rules
        if phase is Phase.ON_ERROR:
            problems.check(
                request.error.kind in MODEL_FAILURE_KINDS,
                "error.kind",
                f"must be one of {', '.join(MODEL_FAILURE_KINDS)} at PHASE_ON_ERROR",
            )
        if phase in (Phase.PRE_ACT, Phase.POST_ACT):
            problems.require(request.tool_call.name, "tool_call.name")
        problems.raise_if_any()
        scope = wire.scope_from(request.scope)
        ctx = wire.context_from(scope, request.context)
        if request.HasField("model_response"):
            ctx.model_response = wire.msg_from(request.model_response)
        if request.HasField("error"):
            ctx.error = wire.failure_from(request.error)
        if request.HasField("tool_call"):
            ctx.tool_name, ctx.tool_call_id = request.tool_call.name, request.tool_call.id
            ctx.tool_args = struct_to_dict(request.tool_call.arguments)
        ctx.tool_result = request.tool_result
        ctx.tool_error = request.tool_result if request.tool_is_error else None
        ctx.final_text = request.final_text
        with _agent_lookup(request.scope.agent, request.scope.agent_definition_json):
            run = await self.engine.run_phase(phase, ctx)
        return policy_pb2.RunInterceptorsResponse(
            outcome=wire.outcome_to(run.outcome, run.state), events=wire.events_to(run.notices, scope)
        )

    async def BeginTurn(
        self, request: policy_pb2.BeginTurnRequest, context: Any = None
    ) -> policy_pb2.BeginTurnResponse:
        problems = Violations()
        for i, tool in enumerate(request.tools):
            problems.require(tool.name, f"tools[{i}].name")
        problems.raise_if_any()
        scope = wire.scope_from(request.scope)
        with _agent_lookup(request.scope.agent, request.scope.agent_definition_json):
            start = await self.engine.begin_turn(
                scope, request.text, request.explicit_role, request.model, wire.tools_from(request.tools)
            )
        response = policy_pb2.BeginTurnResponse(
            blocked=start.blocked,
            block_reason=start.block_reason,
            tool_names=start.tool_names,
            phases=sorted(PHASE_TO_PROTO[p] for p in start.phases),
            config_version=start.config_version,
            events=wire.events_to(start.notices, scope),
        )
        if start.command is not None:
            response.command.CopyFrom(_command_reply(start.command_name, start.command))
        if start.role is not None:
            response.role.CopyFrom(_role(start.role))
        return response

    async def ResolveRole(
        self, request: policy_pb2.ResolveRoleRequest, context: Any = None
    ) -> policy_pb2.ResolveRoleResponse:
        with _agent_lookup(request.agent, request.agent_definition_json):
            role = self.engine.resolve_role(request.agent, request.text, request.explicit_role)
        return policy_pb2.ResolveRoleResponse(role=_role(role))

    async def HandleCommand(
        self, request: policy_pb2.HandleCommandRequest, context: Any = None
    ) -> policy_pb2.HandleCommandResponse:
        with _agent_lookup(request.scope.agent, request.scope.agent_definition_json):
            handled = await self.engine.handle_command(wire.scope_from(request.scope), request.text, request.model)
        if handled is None:
            return policy_pb2.HandleCommandResponse(is_command=False)
        return policy_pb2.HandleCommandResponse(is_command=True, command=_command_reply(*handled))

    async def SelectTools(
        self, request: policy_pb2.SelectToolsRequest, context: Any = None
    ) -> policy_pb2.SelectToolsResponse:
        problems = Violations()
        for i, tool in enumerate(request.tools):
            problems.require(tool.name, f"tools[{i}].name")
        problems.raise_if_any()
        with _agent_lookup(request.scope.agent, request.scope.agent_definition_json):
            selection = self.engine.select_tools(wire.scope_from(request.scope), wire.tools_from(request.tools))
        return policy_pb2.SelectToolsResponse(
            tool_names=selection.selected,
            dropped=[policy_pb2.DroppedTool(name=n, reason=r) for n, r in selection.dropped.items()],
        )

    async def GetPolicyStatus(
        self, request: policy_pb2.GetPolicyStatusRequest, context: Any = None
    ) -> policy_pb2.GetPolicyStatusResponse:
        status = self.engine.status()
        return policy_pb2.GetPolicyStatusResponse(
            config_version=status.version,
            directory=status.directory,
            files=status.files,
            errors=[
                policy_pb2.ConfigError(file=e.file, line=e.line, field=e.field, message=e.message)
                for e in status.errors
            ],
        )


def _role(role: RoleResolution) -> policy_pb2.RoleResolution:
    return policy_pb2.RoleResolution(
        role_id=role.role_id, matched_by=role.matched_by, keyword=role.keyword, skill_ids=role.skill_ids
    )


def _command_reply(name: str, result: CommandResult) -> policy_pb2.CommandReply:
    effect = policy_pb2.CommandEffect(skill_ids=result.skill_ids, reset=result.reset)
    if result.set_role is not None:
        effect.set_role = result.set_role
    if result.set_model is not None:
        effect.set_model = result.set_model
    return policy_pb2.CommandReply(command=name, reply=result.reply, ok=result.ok, effect=effect)


def snapshot_of(config: PolicyConfig) -> policy_pb2.PolicySnapshot:
    """The configuration as WatchPolicy sends it: the validated files and their digest."""
    return policy_pb2.PolicySnapshot(
        version=config.digest, files=[policy_pb2.PolicyFile(path=path, content=text) for path, text in config.texts]
    )


def store_of(snapshot: policy_pb2.PolicySnapshot, version: int) -> ConfigStore:
    """The configuration a snapshot carries, validated as the service validated it; ConfigRejected
    when it does not validate here, or when its files do not hash to its version (a torn snapshot)."""
    texts: dict[str, str] = {}
    for file in snapshot.files:
        if file.path in texts:
            raise ConfigRejected([ConfigError(file.path, 0, "", "appears twice in the snapshot")])
        texts[file.path] = file.content
    digest = digest_of(texts)
    if digest != snapshot.version:
        raise ConfigRejected(
            [ConfigError("", 0, "", f"the snapshot's files hash to {digest}, not to its version {snapshot.version!r}")]
        )
    return ConfigStore.from_texts(texts, version, f"snapshot:{snapshot.version}")
