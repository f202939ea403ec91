"""Turns a configuration snapshot into what decides for one agent and role: a Bundle."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from services.lib.agents import AgentDefinition
from services.lib.policy import interceptors as icp
from services.lib.policy.budget import ToolBudget
from services.lib.policy.commands import CommandRegistry, builtin_registry, static_reply
from services.lib.policy.config import (
    BudgetGuardSpec,
    BudgetSection,
    CircuitBreakerSpec,
    ContentFilterSpec,
    ContextCompressorSpec,
    ContextPromptSpec,
    ConversationGateSpec,
    ConversationPromptSpec,
    CustomSpec,
    FailoverSpec,
    HITLSpec,
    HookSection,
    InterceptorSpec,
    LambdaPromptSpec,
    Layer,
    LoggingSpec,
    PermissionGateSpec,
    PIIShieldSpec,
    PolicyConfig,
    RateLimiterSpec,
    RoleGateSpec,
    RouterSection,
    SafeGateSpec,
    SelectorSection,
    ThrottleSpec,
    TokenLimiterSpec,
    ToolGateSpec,
    resolve_entry_point,
)
from services.lib.policy.domain import Phase
from services.lib.policy.hooks import Hook, HookEvent, HookHandler, HookRegistry, LocalHook
from services.lib.policy.interceptors.context import Compactor
from services.lib.policy.ratelimit import WindowStore
from services.lib.policy.resilience import CircuitBreakerRegistry
from services.lib.policy.routing import KeywordRoleRouter
from services.lib.policy.tool_policy import DefaultToolPolicy

RemoteHookFactory = Callable[[str, float], HookHandler]

_HOOK_PHASES = {
    HookEvent.PRE_TOOL_USE: Phase.PRE_ACT,
    HookEvent.POST_TOOL_USE: Phase.POST_ACT,
    HookEvent.STOP: Phase.POST_RUN,
}


@dataclass(frozen=True)
class Router:
    """An agent's role router with each role's skills."""

    router: KeywordRoleRouter
    skills: dict[str, tuple[str, ...]]
    roles: tuple[str, ...]  # every role /role accepts

    @classmethod
    def build(cls, section: RouterSection, agent: AgentDefinition) -> Router:
        default = section.default_role or agent.default_role
        keyword_map = {role: route.keywords for role, route in section.roles.items()}
        roles = list(section.roles)
        if default and default not in roles:
            roles.insert(0, default)
        skills = {role: tuple(route.skills) for role, route in section.roles.items()}
        return cls(KeywordRoleRouter(default, keyword_map), skills, tuple(roles))

    def skills_of(self, role: str, agent: AgentDefinition) -> tuple[str, ...]:
        # A role the router configures brings its own skills; otherwise the agent's apply.
        return self.skills.get(role, tuple(agent.skills))


@dataclass(frozen=True)
class Bundle:
    """Everything configured for one agent and role."""

    agent: AgentDefinition
    role_id: str
    tool_policy: DefaultToolPolicy
    allowed_local_tools: frozenset[str]
    budget: ToolBudget | None
    selector: SelectorSection | None
    hooks: HookRegistry
    chain: icp.Chain
    phases: frozenset[Phase]


@dataclass
class Shared:
    """State that outlives configuration reloads: rate windows, breakers, hook channels."""

    windows: WindowStore
    remote_hook: RemoteHookFactory
    compactor: Compactor | None
    breakers: dict[tuple[str, int, float], CircuitBreakerRegistry]

    def breaker_registry(self, label: str, threshold: int, cooldown: float) -> CircuitBreakerRegistry:
        key = (label, threshold, cooldown)
        registry = self.breakers.get(key)
        if registry is None:
            registry = self.breakers[key] = CircuitBreakerRegistry(threshold, cooldown)
        return registry


def router_for(config: PolicyConfig, agent: AgentDefinition) -> Router:
    return Router.build(config.router.agents.get(agent.name, config.router), agent)


def has_role_section(config: PolicyConfig, agent: str, role: str) -> bool:
    """Whether policy.yaml or interceptors.yaml configures `role` of `agent` on its own."""
    policy, interceptors = config.policy.agents.get(agent), config.interceptors.agents.get(agent)
    return bool(role) and (
        (policy is not None and role in policy.roles) or (interceptors is not None and role in interceptors.roles)
    )


def commands_for(config: PolicyConfig) -> CommandRegistry:
    registry = builtin_registry()
    for command in config.policy.commands:
        handler = (
            static_reply(command.reply) if command.reply is not None else resolve_entry_point(command.entry_point or "")
        )
        registry.register(command.name, handler, command.aliases, command.description)
    return registry


def build_bundle(config: PolicyConfig, agent: AgentDefinition, role_id: str, shared: Shared) -> Bundle:
    agent_layer = config.policy.agents.get(agent.name)
    layers: list[Layer] = [config.policy]
    if agent_layer is not None:
        layers.append(agent_layer)
        role_layer = agent_layer.roles.get(role_id)
        if role_layer is not None:
            layers.append(role_layer)
    # Lists add up from the top level down; budget and selector: the most specific level that sets one.
    extra_denied = {t for layer in layers for t in layer.tools.extra_denied}
    allowed_system = {t for layer in layers for t in layer.tools.allowed_system_tools}
    allowed_local = frozenset(agent.tools) | {t for layer in layers for t in layer.tools.allowed_local_tools}
    budget_section: BudgetSection | None = _most_specific(layers, "budget")
    selector: SelectorSection | None = _most_specific(layers, "selector")
    hooks = HookRegistry()
    for layer in layers:
        hooks = hooks.merge(HookRegistry(_hook(h, shared) for h in layer.hooks))

    specs: list[InterceptorSpec] = list(config.interceptors.interceptors)
    agent_icps = config.interceptors.agents.get(agent.name)
    if agent_icps is not None:
        specs += agent_icps.interceptors
        specs += agent_icps.roles.get(role_id, [])
    chain = icp.Chain(_unique_names([_interceptor(spec, shared) for spec in specs]))
    phases = set(chain.phases()) | {Phase.PRE_ACT}  # CheckToolCall always has the tool policy to apply
    phases |= {_HOOK_PHASES[e] for e in hooks.events() if e in _HOOK_PHASES}

    budget = None
    if budget_section is not None:
        budget = ToolBudget(
            budget_section.max_tool_calls, budget_section.max_mcp_calls, budget_section.timeout_per_call_ms
        )
    return Bundle(
        agent=agent,
        role_id=role_id,
        tool_policy=DefaultToolPolicy(extra_denied, allowed_system),
        allowed_local_tools=allowed_local,
        budget=budget,
        selector=selector,
        hooks=hooks,
        chain=chain,
        phases=frozenset(phases),
    )


def _most_specific(layers: Sequence[Layer], name: str) -> Any:
    """The value of the most specific level that sets `name` (null included: it switches it off)."""
    for layer in reversed(layers[1:]):
        if name in layer.model_fields_set:
            return getattr(layer, name)
    return getattr(layers[0], name)


def _hook(section: HookSection, shared: Shared) -> Hook:
    timeout_s = section.timeout_ms / 1000
    handler: HookHandler
    if section.local is not None:
        handler = LocalHook(resolve_entry_point(section.local), section.local)
        default_name = section.local
    else:
        address = section.remote or ""
        handler = shared.remote_hook(address, timeout_s)
        default_name = f"remote:{address}"
    return Hook(
        HookEvent(section.event),
        handler,
        section.name or default_name,
        section.matcher,
        timeout_s,
        section.fail,
    )


def _unique_names(chain: Sequence[icp.Interceptor]) -> list[icp.Interceptor]:
    """Labels key each interceptor's state and rate windows: make repeats distinct (Name, Name#2)."""
    seen: dict[str, int] = {}
    for interceptor in chain:
        label = interceptor.label
        seen[label] = seen.get(label, 0) + 1
        if seen[label] > 1:
            interceptor.name = f"{label}#{seen[label]}"
    return list(chain)


def _interceptor(spec: InterceptorSpec, shared: Shared) -> icp.Interceptor:
    built: icp.Interceptor
    match spec:
        case BudgetGuardSpec():
            built = icp.BudgetGuard(spec.model_calls, spec.tool_calls, spec.exit_behavior, spec.warning_threshold)
        case PIIShieldSpec():
            built = icp.PIIShield(spec.patterns, spec.action)
        case ContentFilterSpec():
            built = icp.ContentFilter(spec.blocked_words, spec.blocked_patterns, spec.action, spec.case_sensitive)
        case TokenLimiterSpec():
            built = icp.TokenLimiter(spec.max_tokens, spec.message, spec.exit_behavior)
        case ContextCompressorSpec():
            built = icp.ContextCompressor(shared.compactor, spec.threshold_tokens, spec.keep_recent)
        case ToolGateSpec():
            fn = resolve_entry_point(spec.filter) if spec.filter else None
            built = icp.PatternGate(spec.allow, spec.deny, fn)
        case PermissionGateSpec():
            built = icp.PermissionGate(spec.tools, spec.by_role)
        case ConversationGateSpec():
            built = icp.ConversationGate(spec.stages)
        case SafeGateSpec():
            built = icp.SafeGate(spec.tools)
        case RoleGateSpec():
            built = icp.RoleGate(spec.tools, spec.admin_roles, spec.by_role, spec.role_key)
        case LoggingSpec():
            built = icp.LoggingInterceptor(spec.phases, spec.level, spec.include_args)
        case HITLSpec():
            built = icp.HITLInterceptor(spec.tools, spec.except_tools, spec.description)
        case RateLimiterSpec():
            built = icp.RateLimiter(
                shared.windows,
                spec.calls_per_window,
                spec.window_seconds,
                spec.action,
                spec.per_tool,
                spec.scope,
                spec.max_wait_seconds,
            )
        case ThrottleSpec():
            built = icp.ThrottleInterceptor(shared.windows, spec.min_delay, spec.per_tool, spec.scope)
        case FailoverSpec():
            built = icp.Failover(spec.fallbacks, spec.on, spec.max_retries_per_model)
        case CircuitBreakerSpec():
            label = spec.name or "CircuitBreaker"
            registry = shared.breaker_registry(label, spec.failure_threshold, spec.reset_timeout)
            built = icp.CircuitBreaker(registry, spec.tools)
        case ContextPromptSpec():
            built = icp.ContextPrompt(spec.template)
        case ConversationPromptSpec():
            built = icp.ConversationPrompt(spec.stages)
        case LambdaPromptSpec():
            built = icp.LambdaPrompt(resolve_entry_point(spec.adapter))
        case CustomSpec():
            built = _custom(spec)
    if spec.name:
        built.name = spec.name
    if spec.on_error is not None:
        built.fail = spec.on_error
    return built


def _custom(spec: CustomSpec) -> icp.Interceptor:
    factory: Any = resolve_entry_point(spec.entry_point)
    built = factory(**spec.options)
    assert isinstance(built, icp.Interceptor), "checked when the configuration was loaded"
    return built
