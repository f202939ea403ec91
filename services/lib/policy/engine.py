"""PolicyEngine: every decision of the policy service, as plain async Python.

It reads the configuration in force (hot-reloaded by ConfigStore), builds one
Bundle per agent and role on first use, and answers the runtime's questions at
each phase of a turn. Every tool decision is logged as a structured event and,
when it denies, returned as a status notice for the client.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any

from services.kit.logging import log
from services.lib.agents import AgentDefinition, AgentRegistry, agent_from_json
from services.lib.policy.assembly import (
    Bundle,
    Router,
    Shared,
    build_bundle,
    commands_for,
    has_role_section,
    router_for,
)
from services.lib.policy.budget import is_mcp
from services.lib.policy.commands import CommandContext, CommandRegistry, CommandResult, parse
from services.lib.policy.config import ConfigError, ConfigStore, PolicyConfig
from services.lib.policy.domain import Notice, Phase, Scope, ToolInfo, TurnContext
from services.lib.policy.hooks import (
    HookPayload,
    run_post_tool_use,
    run_pre_tool_use,
    run_stop,
    run_user_prompt_submit,
)
from services.lib.policy.interceptors.base import Action, PhaseOutcome
from services.lib.policy.routing import RoleChoice
from services.lib.policy.selector import DEFAULT_GROUP_PATTERNS, ToolBudgetConfig, ToolGroup, ToolSelector, classify
from services.lib.policy.tool_policy import ToolPolicyInput


@dataclass
class ToolCallDecision:
    allowed: bool
    reason: str
    rule: str
    source: str
    arguments: dict[str, Any]
    arguments_modified: bool = False
    pre_act: PhaseOutcome | None = None
    notices: list[Notice] = field(default_factory=list)
    timeout_ms: int = 0
    state: dict[str, Any] | None = None  # set when interceptors changed it


@dataclass(frozen=True)
class ToolCallCheck:
    scope: Scope
    tool_name: str
    arguments: Mapping[str, Any]
    tool_call_id: str = ""


@dataclass
class StepDecisions:
    decisions: list[ToolCallDecision]
    state: dict[str, Any] | None  # set when interceptors changed it during the step


@dataclass
class ToolResultDecision:
    result: str
    modified: bool
    post_act: PhaseOutcome
    notices: list[Notice]
    state: dict[str, Any] | None = None


@dataclass
class PhaseRun:
    outcome: PhaseOutcome
    notices: list[Notice]
    state: dict[str, Any] | None = None


@dataclass(frozen=True)
class RoleResolution:
    role_id: str
    matched_by: str
    keyword: str
    skill_ids: tuple[str, ...]


@dataclass
class TurnStart:
    command: CommandResult | None = None
    command_name: str = ""
    role: RoleResolution | None = None
    blocked: bool = False
    block_reason: str = ""
    tool_names: list[str] = field(default_factory=list)
    phases: frozenset[Phase] = frozenset()
    config_version: int = 0
    notices: list[Notice] = field(default_factory=list)


@dataclass(frozen=True)
class Selection:
    selected: list[str]
    dropped: dict[str, str]


@dataclass(frozen=True)
class Status:
    version: int
    directory: str
    files: tuple[str, ...]
    errors: list[ConfigError]


# A tenant's stored agent (AgentService) the current call decides for: set from the request's definition by
# PolicyAPI, so the policy service and the runtime's local engine decide for it alike.
_STORED: ContextVar[AgentDefinition | None] = ContextVar("cogmesh_policy_stored_agent", default=None)


@functools.lru_cache(maxsize=256)
def _parsed(name: str, definition_json: str) -> AgentDefinition:
    return agent_from_json(name, definition_json)


@contextlib.contextmanager
def stored_agent(name: str, definition_json: str) -> Iterator[None]:
    """Inside, `name` is the stored agent `definition_json` defines (nothing changes when it is empty).
    Raises ValueError naming the agent when the definition does not load."""
    if not definition_json:
        yield
        return
    token = _STORED.set(_parsed(name, definition_json))
    try:
        yield
    finally:
        _STORED.reset(token)


class PolicyEngine:
    def __init__(self, agents: AgentRegistry, config: ConfigStore, shared: Shared):
        self.agents = agents
        self.config = config
        self.shared = shared
        self._version = 0
        self._bundles: dict[tuple[str, str], Bundle] = {}
        self._routers: dict[str, Router] = {}
        self._commands: CommandRegistry | None = None

    # ------------------------------------------------------------------ lookups

    def _fresh(self) -> PolicyConfig:
        config = self.config.current
        if config.version != self._version:
            # A new configuration: everything built from the old one goes.
            self._version = config.version
            self._bundles.clear()
            self._routers.clear()
            self._commands = None
        return config

    def agent(self, name: str) -> AgentDefinition:
        """The call's stored agent of that name (stored_agent), else the registry's; raises UnknownAgentError."""
        stored = _STORED.get()
        if stored is not None and stored.name == name:
            return stored
        return self.agents.get(name)

    def router(self, agent: AgentDefinition) -> Router:
        config = self._fresh()
        if agent is _STORED.get():  # a tenant's stored agent: built per call, never cached under a shared name
            return router_for(config, agent)
        router = self._routers.get(agent.name)
        if router is None:
            router = self._routers[agent.name] = router_for(config, agent)
        return router

    def bundle(self, agent_name: str, role_id: str = "") -> Bundle:
        config = self._fresh()
        agent = self.agent(agent_name)
        role = role_id or self.router(agent).router.default_role
        # Roles without a section of their own share the agent-level bundle, so role ids
        # that callers make up cannot grow the cache.
        if not has_role_section(config, agent.name, role):
            role = ""
        if agent is _STORED.get():
            return build_bundle(config, agent, role, self.shared)
        key = (agent.name, role)
        bundle = self._bundles.get(key)
        if bundle is None:
            bundle = self._bundles[key] = build_bundle(config, agent, role, self.shared)
        return bundle

    def commands(self) -> CommandRegistry:
        config = self._fresh()
        if self._commands is None:
            self._commands = commands_for(config)
        return self._commands

    # ------------------------------------------------------------------ PRE_ACT

    async def check_tool_call(
        self,
        scope: Scope,
        tool_name: str,
        arguments: Mapping[str, Any],
        ctx: TurnContext | None = None,
        tool_call_id: str = "",
    ) -> ToolCallDecision:
        version = self._fresh().digest  # the configuration the bundle below comes from
        bundle = self.bundle(scope.agent, scope.role_id)
        result = await self._decide(bundle, scope, tool_name, arguments, ctx or TurnContext(scope), tool_call_id)
        log.info(
            "policy_decision",
            policy_version=version,
            tool_name=tool_name,
            allowed=result.allowed,
            reason=result.reason,
            rule=result.rule,
            source=result.source,
            agent=scope.agent,
            role_id=scope.role_id,
            session_id=scope.session_id,
            turn_id=scope.turn_id,
        )
        if not result.allowed:
            result.notices.append(
                Notice(
                    "status",
                    result.reason,
                    {"kind": "tool_denied", "tool_name": tool_name, "rule": result.rule, "source": result.source},
                )
            )
        return result

    async def _decide(
        self,
        bundle: Bundle,
        scope: Scope,
        tool_name: str,
        arguments: Mapping[str, Any],
        ctx: TurnContext,
        tool_call_id: str,
    ) -> ToolCallDecision:
        policy = bundle.tool_policy.decide(
            ToolPolicyInput(tool_name, arguments, scope.active_skill_ids, bundle.allowed_local_tools)
        )
        args = dict(policy.updated_input or {})
        if not policy.allowed:
            return ToolCallDecision(False, policy.reason, policy.rule, "tool_policy", {})

        mcp = is_mcp(tool_name)
        if bundle.budget is not None:
            budget = bundle.budget.at(ctx.tool_calls, ctx.mcp_calls)
            if not budget.can_call(mcp):
                return ToolCallDecision(False, budget.denial(tool_name), "tool_budget", "tool_budget", {})

        notices: list[Notice] = []
        modified = False
        if len(bundle.hooks):
            hooks = await run_pre_tool_use(bundle.hooks, HookPayload(scope, tool_name, args, tool_call_id))
            notices += hooks.notices
            if hooks.denied:
                return ToolCallDecision(False, hooks.reason, hooks.rule, f"hook:{hooks.hook}", {}, notices=notices)
            args, modified = hooks.tool_input, hooks.modified

        ctx.tool_name, ctx.tool_call_id, ctx.tool_args = tool_name, tool_call_id, args
        outcome = await bundle.chain.run(Phase.PRE_ACT, ctx)
        notices += ctx.notices
        state = ctx.state if outcome.state_changed else None
        if outcome.action is Action.REQUIRE_APPROVAL:  # allowed, once a human says so (the runtime pauses)
            args = outcome.args if outcome.args is not None else args
            return ToolCallDecision(
                True,
                f"{outcome.decided_by} asks a human to approve tool {tool_name!r}: {outcome.reason}",
                "interceptor_approval",
                f"interceptor:{outcome.decided_by}",
                args,
                modified or outcome.args is not None,
                outcome,
                notices,
                bundle.budget.timeout_per_call_ms if (mcp and bundle.budget is not None) else 0,
                state,
            )
        if outcome.action is not Action.OK:
            rule = "interceptor_stop" if outcome.action is Action.STOP else "interceptor_skip"
            verb = "stopped the turn at" if outcome.action is Action.STOP else "skipped"
            reason = f"{outcome.decided_by} {verb} tool {tool_name!r}: {outcome.reason} ({rule})"
            return ToolCallDecision(
                False, reason, rule, f"interceptor:{outcome.decided_by}", {}, False, outcome, notices, state=state
            )
        if outcome.args is not None:
            args, modified = outcome.args, True
        timeout_ms = bundle.budget.timeout_per_call_ms if (mcp and bundle.budget is not None) else 0
        return ToolCallDecision(
            True, policy.reason, policy.rule, "tool_policy", args, modified, outcome, notices, timeout_ms, state
        )

    async def check_tool_calls(self, calls: Sequence[ToolCallCheck], ctx: TurnContext) -> StepDecisions:
        """The tool calls of one model step, decided in order as if one after the other."""
        decisions: list[ToolCallDecision] = []
        tool_calls, mcp_calls, state, changed, stopped = ctx.tool_calls, ctx.mcp_calls, ctx.state, False, False
        for call in calls:
            if stopped:
                reason = f"tool {call.tool_name!r} was not checked: an earlier call of this step stopped the turn"
                decisions.append(ToolCallDecision(False, f"{reason} (turn_stopped)", "turn_stopped", "tool_policy", {}))
                continue
            current = replace(
                ctx, scope=call.scope, tool_calls=tool_calls, mcp_calls=mcp_calls, state=state, notices=[]
            )
            decision = await self.check_tool_call(
                call.scope, call.tool_name, call.arguments, current, call.tool_call_id
            )
            if decision.state is not None:
                state, changed = decision.state, True
            if decision.allowed:
                tool_calls += 1
                mcp_calls += is_mcp(call.tool_name)
            stopped = decision.pre_act is not None and decision.pre_act.action is Action.STOP
            decisions.append(decision)
        return StepDecisions(decisions, state if changed else None)

    # ------------------------------------------------------------------ POST_ACT

    async def check_tool_result(
        self,
        ctx: TurnContext,
        tool_name: str,
        tool_call_id: str,
        arguments: Mapping[str, Any],
        result: str,
        is_error: bool,
    ) -> ToolResultDecision:
        bundle = self.bundle(ctx.scope.agent, ctx.scope.role_id)
        notices: list[Notice] = []
        modified = False
        if len(bundle.hooks):
            payload = HookPayload(ctx.scope, tool_name, arguments, tool_call_id, result, is_error)
            hooks = await run_post_tool_use(bundle.hooks, payload)
            notices += hooks.notices
            result, modified = hooks.result, hooks.modified
        ctx.tool_name, ctx.tool_call_id, ctx.tool_args = tool_name, tool_call_id, dict(arguments)
        ctx.tool_result, ctx.tool_error = result, (result if is_error else None)
        outcome = await bundle.chain.run(Phase.POST_ACT, ctx)
        notices += ctx.notices
        if outcome.tool_result is not None:
            result, modified = outcome.tool_result, True
        return ToolResultDecision(result, modified, outcome, notices, ctx.state if outcome.state_changed else None)

    # ------------------------------------------------------------------ any phase

    async def run_phase(self, phase: Phase, ctx: TurnContext) -> PhaseRun:
        bundle = self.bundle(ctx.scope.agent, ctx.scope.role_id)
        outcome = await bundle.chain.run(phase, ctx)
        notices = list(ctx.notices)
        if phase is Phase.POST_RUN and len(bundle.hooks):
            notices += await run_stop(bundle.hooks, HookPayload(ctx.scope, final_text=ctx.final_text))
        return PhaseRun(outcome, notices, ctx.state if outcome.state_changed else None)

    # ------------------------------------------------------------------ turn start

    def resolve_role(self, agent_name: str, text: str, explicit_role: str = "") -> RoleResolution:
        agent = self.agent(agent_name)
        router = self.router(agent)
        choice: RoleChoice = router.router.choose(text, explicit_role or None)
        return RoleResolution(
            choice.role_id, choice.matched_by, choice.keyword, router.skills_of(choice.role_id, agent)
        )

    async def handle_command(self, scope: Scope, text: str, model: str = "") -> tuple[str, CommandResult] | None:
        """(command name, answer) when `text` is a slash command, else None."""
        parsed = parse(text)
        if parsed is None:
            return None
        agent = self.agent(scope.agent)
        router = self.router(agent)
        ctx = CommandContext(scope, parsed.args, router.roles, scope.role_id, model)
        result = await self.commands().dispatch(text, ctx)
        assert result is not None  # parse() said it is a command
        if result.set_role is not None:
            result = CommandResult(
                result.reply,
                result.ok,
                result.set_role,
                router.skills_of(result.set_role, agent),
                result.set_model,
                result.reset,
            )
        log.info("policy_command", command=parsed.name, ok=result.ok, agent=scope.agent, session_id=scope.session_id)
        return parsed.name, result

    def select_tools(self, scope: Scope, tools: Sequence[ToolInfo]) -> Selection:
        """Tools the policy allows, picked by group priority within the caps; the rest with reasons."""
        bundle = self.bundle(scope.agent, scope.role_id)
        dropped: dict[str, str] = {}
        allowed: list[str] = []
        for tool in tools:
            decision = bundle.tool_policy.decide(
                ToolPolicyInput(tool.name, {}, scope.active_skill_ids, bundle.allowed_local_tools)
            )
            if decision.allowed:
                allowed.append(tool.name)
            else:
                dropped[tool.name] = decision.reason
        section = bundle.selector
        if section is None:
            return Selection(allowed, dropped)
        patterns = dict(DEFAULT_GROUP_PATTERNS)
        for group, globs in section.groups.items():
            patterns[ToolGroup[group.upper()]] = tuple(globs)
        selector = ToolSelector(
            ToolBudgetConfig(
                max_tools=section.max_tools,
                group_priority=[ToolGroup[g.upper()] for g in section.group_priority],
                group_limits={ToolGroup[g.upper()]: n for g, n in section.group_limits.items()},
            )
        )
        default = ToolGroup[section.default_group.upper()]
        for name in allowed:
            selector.add_group(classify(name, patterns, default), [name])
        selected, cut = selector.select_with_reasons()
        return Selection(selected, dropped | cut)

    async def begin_turn(
        self, scope: Scope, text: str, explicit_role: str, model: str, tools: Sequence[ToolInfo]
    ) -> TurnStart:
        version = self._fresh().version
        handled = await self.handle_command(scope, text, model)
        if handled is not None:
            return TurnStart(command=handled[1], command_name=handled[0], config_version=version)
        role = self.resolve_role(scope.agent, text, explicit_role)
        turn_scope = replace(scope, role_id=role.role_id, active_skill_ids=frozenset(role.skill_ids))
        bundle = self.bundle(scope.agent, role.role_id)
        start = TurnStart(role=role, phases=bundle.phases, config_version=version)
        if len(bundle.hooks):
            prompt = await run_user_prompt_submit(bundle.hooks, HookPayload(turn_scope, prompt=text))
            start.notices += prompt.notices
            if prompt.blocked:
                start.blocked, start.block_reason = True, prompt.reason
                log.info("policy_prompt_blocked", reason=prompt.reason, agent=scope.agent, session_id=scope.session_id)
                return start
        start.tool_names = self.select_tools(turn_scope, tools).selected
        return start

    def status(self) -> Status:
        config = self.config.current
        return Status(config.version, str(config.directory), config.files, list(self.config.errors))
