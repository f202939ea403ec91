"""Building a `Turn`: for a new turn, a resumed one, or a subagent's task.

A new turn starts from what its lease grant read (StartTurn's `TurnStart`: the session,
its state, the summary and the latest messages) and decides the rest in process,
concurrently: the model and its fallbacks from the catalogue snapshot, the system prompt
with the context service's own builder, and BeginTurn (slash commands, the role, the
tools to offer, the phases with work) from the policy snapshot. The system prompt is
built for the session's role while BeginTurn runs; only when routing picks another role
is it built again. A takeover has no grant and reads the session from the sessions
service; each part falls back to its service while its snapshot has not arrived.

A resumed turn is rebuilt from its checkpoint's snapshot: the same agent, model,
role, skills, tools and policy phases, with the services' current clients. A
subagent's turn shares the delegating turn's id, cost trackers, cancellation and
tool context, and keeps no history of its own.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cogmesh.common.v1 import errors_pb2, events_pb2, messages_pb2
from cogmesh.context.v1 import context_pb2
from cogmesh.models.v1 import models_pb2
from cogmesh.policy.v1 import policy_pb2
from cogmesh.runtime.v1 import runtime_pb2
from cogmesh.sessions.v1 import sessions_pb2
from services.kit.clients import Clients, call
from services.kit.errors import CogmeshError, FailedPrecondition, InvalidArgument, NotFound
from services.kit.protos import struct_to_dict
from services.lib import turn_options
from services.lib.agents import AgentDefinition, AgentRegistry, PinnedAgentRegistry, UnknownAgentError, agent_from_json
from services.lib.llm import ChatMessage, ChatModel, ToolSchema
from services.lib.policy.domain import PHASE_FROM_PROTO, PHASE_TO_PROTO
from services.lib.stored_agents import StoredAgents
from services.runtime.budget import CostBudget, CostTracker, Limits, SessionCosts
from services.runtime.context_link import (
    GET_TOOL_RESPONSE,
    ContextLink,
    Memory,
    SessionMemory,
    archive_tool,
    result_archiver,
)
from services.runtime.delegation import TASK_TOOL, task_tool
from services.runtime.engines import Engine, RuntimeRegistry, UnknownRuntime
from services.runtime.local_context import LocalContext
from services.runtime.model_catalog import ModelCatalogLink
from services.runtime.phases import Phase
from services.runtime.policy_link import (
    PolicyLink,
    begin_turn,
    message_from_proto,
    policy_version,
)
from services.runtime.providers.registry import ProviderRegistry, ProviderUnavailable
from services.runtime.structured import RESPOND_TOOL, OutputSpec
from services.runtime.tools.base import Tool, ToolContext, answered_outside
from services.runtime.tools.catalog import ToolCatalog
from services.runtime.tools.handoff import BACK_TOOL, TRANSFER_TOOL, back_tool, handoff_event, transfer_tool
from services.runtime.tools.memory_tools import memory_tool_names, recall, tools_for_agent
from services.runtime.tools.todo import TODO_TOOL, Plan, planning_prompt, todo_tool
from services.runtime.turn import ModelChoice, ModelInfo, ResumePoint, Turn, approvals_matcher, interrupt_matcher

HISTORY_MESSAGES = turn_options.HISTORY_MESSAGES
# Names of the runtime's own tools, which a client-side tool may not take.
RESERVED_TOOLS = frozenset({TASK_TOOL, RESPOND_TOOL, GET_TOOL_RESPONSE.name, TRANSFER_TOOL, BACK_TOOL, TODO_TOOL})


@dataclass
class NewTurn:
    """A turn ready to run."""

    turn: Turn
    engine: Engine
    events: list[events_pb2.RuntimeEvent] = field(default_factory=list)  # BeginTurn's, to yield first


@dataclass
class CommandTurn:
    """A slash command: answered by the policy service without the model."""

    reply: policy_pb2.CommandReply
    agent: AgentDefinition
    model: str
    runtime_config: dict[str, Any]
    message_count: int
    events: list[events_pb2.RuntimeEvent] = field(default_factory=list)


@dataclass
class BlockedTurn:
    """A UserPromptSubmit hook refused the message."""

    reason: str
    events: list[events_pb2.RuntimeEvent] = field(default_factory=list)


def merge_limits(agent: AgentDefinition, request: runtime_pb2.TurnLimits) -> Limits:
    """Built-in defaults, then the agent's limits, then the turn's non-zero fields."""
    base = Limits()
    mine = agent.limits
    values: dict[str, Any] = {
        "max_iterations": mine.max_iterations or agent.config.recursion_limit or base.max_iterations,
        "max_tool_calls": base.max_tool_calls if mine.max_tool_calls is None else mine.max_tool_calls,
        "max_mcp_calls": base.max_mcp_calls if mine.max_mcp_calls is None else mine.max_mcp_calls,
        "tool_timeout_s": mine.tool_timeout_s or base.tool_timeout_s,
        "max_parallel_tools": mine.max_parallel_tools or base.max_parallel_tools,
        "max_wall_clock_s": mine.max_wall_clock_s or base.max_wall_clock_s,
        "on_tool_limit": mine.on_tool_limit,
    }
    if request.max_iterations:
        values["max_iterations"] = request.max_iterations
    if request.max_tool_calls:
        values["max_tool_calls"] = request.max_tool_calls
    if request.max_mcp_calls:
        values["max_mcp_calls"] = request.max_mcp_calls
    if request.tool_timeout_ms:
        values["tool_timeout_s"] = request.tool_timeout_ms / 1000
    if request.max_parallel_tools:
        values["max_parallel_tools"] = request.max_parallel_tools
    if request.max_wall_clock_ms:
        values["max_wall_clock_s"] = request.max_wall_clock_ms / 1000
    return Limits(**values)


def merge_budget(agent: AgentDefinition, request: runtime_pb2.RunTurnRequest) -> CostBudget:
    mine = agent.budget
    budget = CostBudget(mine.max_cost_usd, mine.max_total_tokens, mine.action, mine.per_session)
    if not request.HasField("cost_budget"):
        return budget
    wanted = request.cost_budget
    action = {runtime_pb2.BUDGET_ACTION_ERROR: "error", runtime_pb2.BUDGET_ACTION_WARN: "warn"}.get(
        wanted.action, budget.action
    )
    return CostBudget(
        wanted.max_cost_usd or budget.max_cost_usd,
        wanted.max_total_tokens or budget.max_total_tokens,
        action,  # type: ignore[arg-type]
        wanted.per_session or budget.per_session,
    )


def client_tool(spec: Mapping[str, Any]) -> Tool:
    schema = ToolSchema(str(spec["name"]), str(spec.get("description", "")), dict(spec.get("parameters") or {}))
    return answered_outside(schema, "client", "client", policy_checked=False)


def client_tool_specs(specs: Sequence[messages_pb2.ToolSpec]) -> list[dict[str, Any]]:
    return [
        {"name": s.name, "description": s.description, "parameters": struct_to_dict(s.parameters) or {"type": "object"}}
        for s in specs
    ]


def explicit_role(role_id: str, agent: AgentDefinition) -> str:
    """The role pinned with /role. A session starts on the agent's default role, which pins nothing."""
    return role_id if role_id and role_id != agent.default_role else ""


class TurnBuilder:
    def __init__(
        self,
        clients: Clients,
        agents: AgentRegistry,
        catalog: ToolCatalog,
        local_model: ChatModel,
        providers: ProviderRegistry,
        engines: RuntimeRegistry,
        default_runtime: str,
        session_costs: SessionCosts,
        memory: SessionMemory,
        models: ModelCatalogLink | None = None,
        local_context: LocalContext | None = None,
        *,
        tool_result_limit_tokens: int,
    ) -> None:
        self.clients, self.agents, self.catalog, self.local_model = clients, agents, catalog, local_model
        self.tool_result_limit_tokens = tool_result_limit_tokens  # unless the agent sets its own
        self.providers, self.engines, self.default_runtime = providers, engines, default_runtime
        self.session_costs, self.memory = session_costs, memory
        self.models = models or ModelCatalogLink(clients)
        self.local_context = local_context  # prompts built in process; None: every one is a BuildContext call
        self.stored = StoredAgents(clients, agents)  # the tenants' versioned agents, read when a turn needs one

    # The stored agents (AgentService) the turn runs with, by name: set on a turn's own copy (`with_pins`).
    pinned: Mapping[str, runtime_pb2.PinnedAgent] = {}

    def with_pins(self, pins: Iterable[runtime_pb2.PinnedAgent]) -> TurnBuilder:
        """This builder for one turn that runs a tenant's stored agents: they stand in for built-ins of their
        names, and every step of the turn (its subagents' too) is built by the copy."""
        by_name = {pin.name: pin for pin in pins}
        if not by_name:
            return self
        definitions = {}
        for index, pin in enumerate(by_name.values()):
            try:
                definitions[pin.name] = agent_from_json(pin.name, pin.definition_json)
            except ValueError as exc:
                raise InvalidArgument([(f"agents[{index}].definition_json", str(exc))]) from exc
        turn = copy.copy(self)
        turn.agents = PinnedAgentRegistry(self.agents, definitions)
        turn.pinned = by_name
        return turn

    def _pins_meta(self, agent: AgentDefinition) -> dict[str, Any]:
        """What the turn's journal records of its stored agents: the version that answers, and each definition
        (a resume or a takeover rebuilds the turn from them, whatever the store holds by then)."""
        answering = self.pinned.get(agent.name)
        meta: dict[str, Any] = {"agent_version": answering.version if answering is not None else 0}
        if self.pinned:
            meta["agents"] = [[p.name, p.version, p.definition_json] for p in self.pinned.values()]
        return meta

    def _definition_json(self, agent: AgentDefinition) -> str:
        """A stored agent's definition, sent with every policy and context call of the turn ("" for a built-in)."""
        pin = self.pinned.get(agent.name)
        return pin.definition_json if pin is not None else ""

    @staticmethod
    def _pins_of(meta: Mapping[str, Any]) -> list[runtime_pb2.PinnedAgent]:
        return [
            runtime_pb2.PinnedAgent(name=name, version=version, definition_json=text)
            for name, version, text in meta.get("agents", ())
        ]

    # ------------------------------------------------------------------ lookups

    def agent(self, name: str) -> AgentDefinition:
        try:
            return self.agents.get(name)
        except UnknownAgentError as exc:
            raise NotFound(str(exc), reason=errors_pb2.ERROR_REASON_AGENT_NOT_FOUND) from exc

    def engine(self, override: str, agent: AgentDefinition) -> Engine:
        try:
            return self.engines.select(override, agent.runtime, self.default_runtime)
        except UnknownRuntime as exc:
            if exc.source == "the turn's runtime override":
                raise InvalidArgument([("runtime", str(exc))]) from exc
            raise FailedPrecondition(str(exc), metadata={"runtime": exc.name}) from exc

    async def resolve(self, name: str) -> Any:
        reply = await self.models.resolve(models_pb2.ResolveModelRequest(name=name, strict=bool(name.strip())))
        return reply.model

    async def _resolve_fallback(self, name: str) -> Any:
        """The fallback's model, or a string saying why it cannot be used (the turn still runs)."""
        try:
            return await self.resolve(name)
        except CogmeshError as exc:
            return exc.message

    def choice(self, model: Any, agent: AgentDefinition) -> ModelChoice:
        provider = agent.config.provider or model.provider
        info = ModelInfo(model.id, provider, model.pricing.input_per_million_usd, model.pricing.output_per_million_usd)
        if provider == "local":
            return ModelChoice(info, self.local_model)
        adapter = self.providers.model(
            provider, model.id, temperature=agent.config.temperature, max_tokens=agent.config.max_tokens
        )
        return ModelChoice(info, adapter)

    def _primary(self, model: Any, agent: AgentDefinition) -> ModelChoice:
        try:
            return self.choice(model, agent)
        except ProviderUnavailable as exc:
            raise FailedPrecondition(
                str(exc), metadata={"model": model.id, "provider": agent.config.provider or model.provider}
            ) from exc

    def _chain(
        self, names: Sequence[str], models: Sequence[Any], agent: AgentDefinition, notices: list[tuple[str, str]]
    ) -> list[ModelChoice]:
        chain: list[ModelChoice] = []
        for name, model in zip(names, models, strict=True):
            if isinstance(model, str):
                notices.append(("config", f"fallback model {name!r} is skipped: {model}"))
                continue
            try:
                chain.append(self.choice(model, agent))
            except ProviderUnavailable as exc:
                notices.append(("config", f"fallback model {name!r} is skipped: {exc}"))
        return chain

    def _selector(self, agent: AgentDefinition) -> Any:
        async def select(name: str) -> ModelChoice:
            return self.choice(await self.resolve(name), agent)

        return select

    def _subagents(self, agent: AgentDefinition) -> list[AgentDefinition]:
        found = []
        for name in agent.subagents:
            try:
                sub = self.agents.get(name)
            except UnknownAgentError:
                continue  # reported when the agents folder loaded
            if sub.mode != "primary":
                found.append(sub)
        return found

    def _handoff_targets(self, agent: AgentDefinition) -> list[AgentDefinition]:
        found = []
        for name in agent.handoffs:
            try:
                target = self.agents.get(name)
            except UnknownAgentError:
                continue  # reported when the agents folder loaded
            if target.is_primary:
                found.append(target)
        return found

    def _answering(self, session: Any) -> tuple[AgentDefinition, list[events_pb2.RuntimeEvent]]:
        """The agent that answers the session now (a handoff's, else its own), and the events of a hand-back
        when the agent it was handed to is gone from the registry or may no longer own a session."""
        if session.active_agent and session.active_agent != session.agent:
            try:
                active = self.agents.get(session.active_agent)
            except UnknownAgentError:
                why = f"agent {session.active_agent!r} is no longer defined"
            else:
                if active.is_primary:
                    return active, []
                why = f"agent {session.active_agent!r} has mode {active.mode!r}"
            back = handoff_event(session.active_agent, session.agent, f"{why}: the session's own agent answers")
            return self.agent(session.agent), [back]
        return self.agent(session.agent), []

    async def _tools_for(self, agent: AgentDefinition, skills: Sequence[str]) -> tuple[dict[str, Tool], list[str]]:
        """The catalogue's tools for the agent, plus the memory tools it lists (bound to its definition)."""
        own = memory_tool_names(agent)
        tools, problems = await self.catalog.tools_for([n for n in agent.tools if n not in own], skills)
        return tools | tools_for_agent(self.clients, agent), problems

    async def _recall_then_prompt(
        self,
        agent: AgentDefinition,
        role: str,
        text: str,
        summary: str | None,
        tenant: str,
        session_id: str,
        scope: Mapping[str, str],
    ) -> tuple[context_pb2.BuildContextResponse, list[tuple[str, str]], str]:
        """The memory context pack's search (when the agent has it on), then the prompt with it."""
        recalled, problem = await recall(self.clients, agent, tenant, scope, text)
        built = await self._build_prompt(agent, role, text, summary, tenant, session_id, recalled)
        return built, recalled, problem

    async def _build_prompt(
        self,
        agent: AgentDefinition,
        role: str,
        text: str,
        summary: str | None,
        tenant: str,
        session_id: str,
        recalled: Sequence[Sequence[str]] = (),
    ) -> context_pb2.BuildContextResponse:
        request = context_pb2.BuildContextRequest(agent=agent.name, role_id=role, user_text=text)
        request.agent_definition_json = self._definition_json(agent)  # a stored agent: no file to build from
        if recalled:
            request.recalled_memories.extend(context_pb2.RecalledMemory(key=k, text=t) for k, t in recalled)
            request.budget.recalled_memories_max = agent.memory.context.max_tokens
        if summary is not None:
            request.summary = summary
        else:  # this replica does not know the session's state: the context service loads it
            request.rehydrate, request.tenant_id, request.session_id = True, tenant, session_id
            request.rehydrate_without_messages = True  # the transcript goes to the model as chat messages
        if self.local_context is not None and self.local_context.answers(request):
            return await self.local_context.BuildContext(request)  # no session read needed: no hop
        return await call("context", self.clients.context.BuildContext, request)  # type: ignore[no-any-return]

    async def _history(
        self, tenant: str, session_id: str, count: int, remembered: Memory | None, live: int
    ) -> tuple[list[ChatMessage], str, int]:
        """(the live transcript, the rolling summary, stored messages before the transcript)."""
        if remembered is not None:
            want = min(count - remembered.covered, live)
            if want <= 0:
                return [], remembered.summary, count
            reply = await call(
                "sessions",
                self.clients.sessions.ListMessages,
                sessions_pb2.ListMessagesRequest(tenant_id=tenant, session_id=session_id, last_n=want),
            )
            messages = [message_from_proto(m) for m in reply.messages]
            return messages, remembered.summary, count - len(messages)
        if count == 0:
            return [], "", 0
        payload = await call(
            "sessions",
            self.clients.sessions.GetRehydrationPayload,
            sessions_pb2.GetRehydrationPayloadRequest(tenant_id=tenant, session_id=session_id, last_n=min(count, live)),
        )
        loaded = list(payload.last_messages)
        first = payload.session.message_count - len(loaded)
        covered = payload.summary.covered_message_count if payload.HasField("summary") else 0
        loaded = loaded[max(0, covered - first) :]
        return [message_from_proto(m) for m in loaded], payload.summary.text, max(covered, first)

    @staticmethod
    async def _granted(grant: sessions_pb2.TurnStart) -> tuple[list[ChatMessage], str, int]:
        """`_history` from what the lease grant read: the messages after the summary, the summary, the count before."""
        messages = [message_from_proto(m) for m in grant.messages]
        return messages, grant.summary.text, grant.session.message_count - len(messages)

    # ------------------------------------------------------------------ a new turn

    async def new_turn(
        self,
        request: runtime_pb2.RunTurnRequest,
        output: OutputSpec | None,
        grant: sessions_pb2.TurnStart | None = None,
    ) -> NewTurn | CommandTurn | BlockedTurn:
        """The turn; `grant` is the session as its lease grant read it (else it is read here)."""
        if request.agents and not self.pinned:
            return await self.with_pins(request.agents).new_turn(request, output, grant)
        tenant, session_id = request.tenant_id, request.session_id
        if grant is not None and grant.HasField("session"):
            session, state = grant.session, grant.state
        else:
            reply = await call(
                "sessions",
                self.clients.sessions.GetSession,
                sessions_pb2.GetSessionRequest(tenant_id=tenant, session_id=session_id),
            )
            session, state = reply.session, reply.state
            grant = None
        if session.agent_version and not self.pinned:  # a stored agent's session: the turn runs its version
            turn = self.with_pins(await self.stored.for_session(session))
            return await turn._new_turn(request, output, grant, session, state)
        return await self._new_turn(request, output, grant, session, state)

    async def _new_turn(
        self,
        request: runtime_pb2.RunTurnRequest,
        output: OutputSpec | None,
        grant: sessions_pb2.TurnStart | None,
        session: Any,
        state: Any,
    ) -> NewTurn | CommandTurn | BlockedTurn:
        tenant, session_id = request.tenant_id, request.session_id
        if session.active_turn_id != request.turn_id:
            # Fencing: only the turn holding the session's lease may run (and later write).
            raise FailedPrecondition(
                f"turn {request.turn_id!r} does not hold the lease of session {session_id!r}"
                + (f" (turn {session.active_turn_id!r} does)" if session.active_turn_id else ""),
                reason=errors_pb2.ERROR_REASON_TURN_NOT_FOUND,
                metadata={"active_turn_id": session.active_turn_id},
            )
        if state.pending_interrupt_ids:
            waiting = state.pending_interrupt_ids[0]
            raise FailedPrecondition(
                f"session {session_id!r} has a paused turn waiting for interrupt {waiting!r}: "
                "answer it or cancel the turn first",
                reason=errors_pb2.ERROR_REASON_TURN_IN_PROGRESS,
                metadata={"interrupt_id": waiting},
            )
        agent, handed_back = self._answering(session)
        if not agent.is_primary:
            raise FailedPrecondition(
                f"agent {agent.name!r} has mode {agent.mode!r}: only another agent can delegate to it",
                metadata={"agent": agent.name, "mode": agent.mode},
            )
        engine = self.engine(request.runtime, agent)
        if output is None and agent.output_schema is not None:
            output = OutputSpec.of(agent.output_schema)
        runtime_config = struct_to_dict(state.runtime_config)
        model_name = request.model or str(runtime_config.get("model") or "") or agent.model_name
        pinned = explicit_role(session.role_id, agent)
        remembered = self.memory.get(session_id, session.message_count)
        live = HISTORY_MESSAGES
        skills = list(session.active_skill_ids)
        session_scope = dict(session.scope)
        scope = policy_pb2.Scope(
            tenant_id=tenant,
            session_id=session_id,
            turn_id=request.turn_id,
            agent=agent.name,
            agent_definition_json=self._definition_json(agent),
            role_id=session.role_id,
            active_skill_ids=skills,
            session_scope=session_scope,
        )

        async def tools_then_policy() -> tuple[dict[str, Tool], list[str], policy_pb2.BeginTurnResponse]:
            tools, problems = await self._tools_for(agent, skills)
            begin = await begin_turn(
                self.clients, scope, request.content, pinned, model_name, list(tools), agent.default_role
            )
            return tools, problems, begin

        guessed_role = session.role_id
        summary = remembered.summary if remembered is not None else None
        if grant is not None:
            summary = grant.summary.text  # the grant read it: no rehydration round trip
        gathered = await asyncio.gather(
            self.resolve(model_name),
            asyncio.gather(*(self._resolve_fallback(name) for name in agent.config.fallback_models)),
            self._granted(grant)
            if grant is not None
            else self._history(tenant, session_id, session.message_count, remembered, live),
            self._recall_then_prompt(agent, guessed_role, request.content, summary, tenant, session_id, session_scope),
            tools_then_policy(),
        )
        resolved, fallbacks, (history, summary_text, covered), (built, recalled, recall_problem), rest = gathered
        tools, problems, begin = rest
        events = [*handed_back, *begin.events]
        plan = Plan.from_proto(state.plan)
        if begin.HasField("command"):
            if begin.command.effect.reset:  # /reset: the session's own agent and an empty todo list too
                events += _reset_events(session, agent, plan)
            return CommandTurn(begin.command, agent, model_name, runtime_config, session.message_count, events)
        if begin.blocked:
            return BlockedTurn(begin.block_reason or "the message was refused by a hook", events)
        role = begin.role.role_id
        if role != (guessed_role or agent.default_role):
            built = await self._build_prompt(agent, role, request.content, summary_text, tenant, session_id, recalled)
        role_skills = list(begin.role.skill_ids)
        offered = {name: tools[name] for name in begin.tool_names if name in tools}
        if set(role_skills) - set(skills):  # the role activates skills: their MCP servers' tools too
            more, more_problems = await self.catalog.tools_for(agent.tools, role_skills)
            problems += more_problems
            offered |= {name: tool for name, tool in more.items() if tool.is_mcp and tool.server in role_skills}
        client_specs = client_tool_specs(request.client_tools)
        taken = set(tools) | RESERVED_TOOLS
        clashes = [(i, s["name"]) for i, s in enumerate(client_specs) if s["name"] in taken]
        if clashes:
            raise InvalidArgument(
                [(f"client_tools[{i}].name", f"{name!r} is already one of the agent's tools") for i, name in clashes]
            )
        primary = self._primary(resolved, agent)
        notices = [("tool_server", problem) for problem in problems]
        if recall_problem:
            notices.append(("memory", recall_problem))
        chain = self._chain(agent.config.fallback_models, fallbacks, agent, notices)
        seed = None
        if request.HasField("session_usage"):
            usage = request.session_usage
            seed = CostTracker(usage.input_tokens, usage.output_tokens, usage.cost_usd)
        phases = frozenset(PHASE_FROM_PROTO[p] for p in begin.phases if p in PHASE_FROM_PROTO)
        meta = {
            "tenant": tenant,
            "session": session_id,
            "scope": session_scope,
            "content": request.content,
            "role": role,
            "skills": role_skills,
            "phases": sorted(PHASE_TO_PROTO[p] for p in phases),
            "tool_names": list(offered),
            "client_tools": client_specs,
            "runtime": engine.name,
            # The snapshots the turn was decided with ("" where the service was asked instead).
            "model_catalog": self.models.version,
            "policy": policy_version(self.clients, request.turn_id),
            "session_agent": session.agent,  # whom transfer_back hands the session to
            **self._pins_meta(agent),
        }
        system_prompt = built.system_prompt
        if agent.todo_list:  # the list the turn starts from; manage_todo_list keeps it here as it changes
            meta["plan"] = plan.to_json()
            system_prompt = f"{system_prompt}\n\n{planning_prompt(plan)}"
        if recalled:  # a prompt rebuilt later in the turn (compaction) keeps the same memories
            meta["recalled_memories"] = [list(pair) for pair in recalled]
        turn = self._turn(
            request.turn_id,
            agent,
            meta,
            primary,
            chain,
            offered,
            phases,
            request.lease_token,
            resolved.context_window,
            session_cost=self.session_costs.tracker(session_id, seed),
            system_prompt=system_prompt,
            history=history,
            user_text=request.content,
            limits=merge_limits(agent, request.limits),
            cost_budget=merge_budget(agent, request),
            output=output,
            notices=notices,
        )
        turn.summary, turn.covered = summary_text, covered
        return NewTurn(turn, engine, events)

    def _turn(
        self,
        turn_id: str,
        agent: AgentDefinition,
        meta: dict[str, Any],
        primary: ModelChoice,
        chain: list[ModelChoice],
        offered: dict[str, Tool],
        phases: frozenset[Phase],
        lease_token: int,
        context_window: int,
        **fields: Any,
    ) -> Turn:
        """The parts shared by new and resumed turns of the session's own agent."""
        tenant, session_id = str(meta["tenant"]), str(meta["session"])
        session_scope = {str(k): str(v) for k, v in meta.get("scope", {}).items()}
        tools = dict(offered)
        for spec in meta["client_tools"]:
            tools[spec["name"]] = client_tool(spec)
        subagents = self._subagents(agent)
        if subagents:
            tools[TASK_TOOL] = task_tool(subagents)
        tools |= self._session_tools(agent, meta)
        scope = policy_pb2.Scope(
            tenant_id=tenant,
            session_id=session_id,
            turn_id=turn_id,
            agent=agent.name,
            agent_definition_json=self._definition_json(agent),
            role_id=str(meta["role"]),
            active_skill_ids=list(meta["skills"]),
            session_scope=session_scope,
        )
        policy = PolicyLink(self.clients, scope, phases)
        role, content = str(meta["role"]), str(meta["content"])

        recalled = [(str(k), str(t)) for k, t in meta.get("recalled_memories", ())]

        async def rebuild(summary: str) -> str:
            built = await self._build_prompt(agent, role, content, summary, tenant, session_id, recalled)
            return str(built.system_prompt)

        compactor = (
            ContextLink(self.clients, tenant, session_id, agent, lease_token, context_window, rebuild)
            if agent.compaction.enabled
            else None
        )
        return Turn(
            turn_id=turn_id,
            model=primary.model,
            model_info=primary.info,
            tools=tools,
            check_tool=policy.check_one,
            fallbacks=chain,
            breakers=self.catalog.breakers,
            context=ToolContext(session_id=session_id, tenant_id=tenant, turn_id=turn_id, scope=session_scope),
            runtime=str(meta["runtime"]),
            agent=agent.name,
            interrupt_on=interrupt_matcher(agent.interrupt_on),
            approvals=approvals_matcher(agent.approvals),
            policy=policy,
            compactor=compactor,
            delegate=self.subagent,
            select_model=self._selector(agent),
            meta=meta,
            **self._archive(agent, tenant, session_id),
            **fields,
        )

    def _session_tools(self, agent: AgentDefinition, meta: Mapping[str, Any]) -> dict[str, Tool]:
        """The tools the loop answers from the session's state: the todo list, and handing the session on or back."""
        tools: dict[str, Tool] = {}
        if agent.todo_list and "plan" in meta:
            tools[TODO_TOOL] = todo_tool()
        targets = self._handoff_targets(agent)
        if targets:
            tools[TRANSFER_TOOL] = transfer_tool(targets)
        owner = str(meta.get("session_agent", ""))
        if owner and owner != agent.name:
            tools[BACK_TOOL] = back_tool(owner)
        return tools

    # ------------------------------------------------------------------ a resumed turn

    async def resumed_turn(
        self, request: runtime_pb2.ResumeTurnRequest, snapshot: Mapping[str, Any], point: ResumePoint
    ) -> tuple[Turn, Engine]:
        meta = dict(snapshot["meta"])
        if meta.get("agents") and not self.pinned:
            return await self.with_pins(self._pins_of(meta)).resumed_turn(request, snapshot, point)
        runtime = str(meta.get("runtime", ""))
        if point.abandon:
            return self._bare_turn(request, snapshot, point), self.engines.get(runtime) or self.engines.select()
        agent = self.agent(str(snapshot["agent"]))
        engine = self.engines.get(runtime) or self.engine("", agent)
        names = list(snapshot["fallbacks"])
        resolved, fallbacks, (tools, problems) = await asyncio.gather(
            self.resolve(str(snapshot["model"])),
            asyncio.gather(*(self._resolve_fallback(name) for name in names)),
            self._tools_for(agent, list(meta["skills"])),
        )
        wanted = meta.get("tool_names")
        offered = {n: t for n, t in tools.items() if wanted is None or n in wanted}
        notices = [("tool_server", problem) for problem in problems]
        phases = frozenset(PHASE_FROM_PROTO[p] for p in meta["phases"] if p in PHASE_FROM_PROTO)
        turn = self._turn(
            request.turn_id,
            agent,
            meta,
            self._primary(resolved, agent),
            self._chain(names, fallbacks, agent, notices),
            offered,
            phases,
            request.lease_token,
            resolved.context_window,
            session_cost=self.session_costs.tracker(request.session_id),
            system_prompt=str(snapshot["system_prompt"]),
            history=[],
            user_text=str(meta["content"]),
            notices=notices,
            resume=point,
        )
        return turn, engine

    def _bare_turn(
        self, request: runtime_pb2.ResumeTurnRequest, snapshot: Mapping[str, Any], point: ResumePoint
    ) -> Turn:
        """Enough of a turn to give it up: it calls no model and runs no tool."""
        meta = dict(snapshot["meta"])

        async def deny(name: str, arguments: Mapping[str, Any]) -> Any:
            raise RuntimeError("an abandoned turn runs no tools")

        return Turn(
            turn_id=request.turn_id,
            system_prompt=str(snapshot["system_prompt"]),
            history=[],
            user_text=str(meta.get("content", "")),
            model=self.local_model,
            model_info=ModelInfo(str(snapshot["model"]), "unknown"),
            tools={},
            check_tool=deny,
            runtime=str(meta.get("runtime", "")),
            agent=str(snapshot["agent"]),
            meta=meta,
            session_cost=self.session_costs.tracker(request.session_id),
            resume=point,
        )

    # ------------------------------------------------------------------ a subagent

    async def subagent(self, name: str, task: str, parent: Turn, resume: ResumePoint | None) -> Turn:
        """The Turn of a subagent the parent delegates to (the loop's `Turn.delegate`)."""
        parent_agent = self.agent(parent.agent)
        if resume is None and name not in parent_agent.subagents:
            known = ", ".join(parent_agent.subagents) or "none"
            raise ValueError(f"{name!r} is not a subagent of {parent.agent!r} (its subagents: {known})")
        agent = self.agent(name)
        if agent.mode == "primary":
            raise ValueError(f"agent {name!r} has mode 'primary' and cannot take delegated tasks")
        tenant, session_id = str(parent.meta["tenant"]), str(parent.meta["session"])
        skills = list(parent.meta.get("skills", []))
        if resume is not None:
            snapshot = resume.snapshot
            meta = dict(snapshot["meta"])
            model_name, fallback_names = str(snapshot["model"]), list(snapshot["fallbacks"])
        else:
            meta = {
                "tenant": tenant,
                "session": session_id,
                "scope": dict(parent.context.scope),
                "content": task,
                "skills": skills,
            }
            model_name, fallback_names = agent.model_name, list(agent.config.fallback_models)
        scope = policy_pb2.Scope(
            tenant_id=tenant,
            session_id=session_id,
            turn_id=parent.turn_id,
            agent=agent.name,
            agent_definition_json=self._definition_json(agent),
            role_id=str(meta.get("role", "")),
            active_skill_ids=skills,
            session_scope=parent.context.scope,
        )

        async def tools_then_policy() -> tuple[dict[str, Tool], list[str], policy_pb2.BeginTurnResponse | None]:
            tools, problems = await self._tools_for(agent, skills)
            if resume is not None:
                return tools, problems, None
            begin = await begin_turn(self.clients, scope, task, "", model_name, list(tools))
            return tools, problems, begin

        async def prompt() -> tuple[str, str]:
            if resume is not None:
                return str(resume.snapshot["system_prompt"]), ""
            built, _, problem = await self._recall_then_prompt(
                agent, "", task, "", tenant, session_id, parent.context.scope
            )
            return str(built.system_prompt), problem

        resolved, fallbacks, (tools, problems, begin), (system_prompt, recall_problem) = await asyncio.gather(
            self.resolve(model_name),
            asyncio.gather(*(self._resolve_fallback(n) for n in fallback_names)),
            tools_then_policy(),
            prompt(),
        )
        if begin is not None:
            if begin.HasField("command") or begin.blocked:
                raise ValueError(begin.block_reason or "the task was answered as a slash command, not delegated")
            meta["role"] = begin.role.role_id
            meta["phases"] = sorted(begin.phases)
            meta["tool_names"] = list(begin.tool_names)
        wanted = meta.get("tool_names")
        offered = {n: t for n, t in tools.items() if wanted is None or n in wanted}
        subagents = self._subagents(agent)
        if subagents:
            offered[TASK_TOOL] = task_tool(subagents)
        scope.role_id = str(meta.get("role", ""))
        phases = frozenset(PHASE_FROM_PROTO[p] for p in meta.get("phases", []) if p in PHASE_FROM_PROTO)
        policy = PolicyLink(self.clients, scope, phases, is_subagent=True)
        notices = [("tool_server", problem) for problem in problems]
        if recall_problem:
            notices.append(("memory", recall_problem))
        primary = self.choice(resolved, agent)
        return Turn(
            turn_id=parent.turn_id,
            system_prompt=system_prompt,
            history=[],
            user_text=task,
            model=primary.model,
            model_info=primary.info,
            tools=offered,
            check_tool=policy.check_one,
            fallbacks=self._chain(fallback_names, fallbacks, agent, notices),
            limits=merge_limits(agent, runtime_pb2.TurnLimits()),
            cost_budget=parent.cost_budget,
            session_cost=parent.session_cost,
            cost=parent.cost,
            cancel=parent.cancel,
            breakers=self.catalog.breakers,
            context=parent.context,
            notices=notices,
            runtime=parent.runtime,
            agent=agent.name,
            interrupt_on=interrupt_matcher(agent.interrupt_on),
            approvals=approvals_matcher(agent.approvals),
            policy=policy,
            delegate=self.subagent,
            select_model=self._selector(agent),
            depth=parent.depth + 1,
            meta=meta,
            resume=resume,
            **self._archive(agent, tenant, session_id),
        )

    def _archive(self, agent: AgentDefinition, tenant: str, session_id: str) -> dict[str, Any]:
        """The turn's limit on tool results, the archive over it and get_tool_response to page through it."""
        tokens = agent.config.tool_token_limit_before_evict or self.tool_result_limit_tokens
        limit = tokens * 4  # characters, at the 4 a token every local estimate uses
        return {
            "result_limit_chars": limit,
            "archive_result": result_archiver(self.clients, tenant, session_id),
            "archive_tool": archive_tool(self.clients, tenant, session_id, limit),
        }


def _reset_events(session: Any, agent: AgentDefinition, plan: Plan) -> list[events_pb2.RuntimeEvent]:
    """What /reset changes besides the history, as events the log applies to the session: the session goes
    back to its own agent, and its todo list is emptied (one version more)."""
    events = []
    if agent.name != session.agent:
        events.append(handoff_event(agent.name, session.agent, "/reset"))
    if plan.items:
        events.append(events_pb2.RuntimeEvent(plan=Plan((), plan.version + 1).to_proto()))
    return events
