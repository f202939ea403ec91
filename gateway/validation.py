"""The gateway's request checks beyond the field rules, made before anything is asked of another service.

The rules of single fields (lengths, ranges, required ids, label and scope maps, known enum values)
are declared on the protos and checked for every RPC before its servicer runs
(services/kit/validation.py). What stays here are the rules across fields or needing a meaning: an
update mask's paths, a fork's turn, blank content, a turn's options. Each RPC's problems are named
at once (BadRequest violations, as the caller spelled the field). `Names` then checks what only
another service knows: a runtime engine, a model, a client tool clashing with the agent's own,
before a turn takes the lease.
"""

from __future__ import annotations

import asyncio

import grpc

from cogmesh.common.v1 import errors_pb2
from cogmesh.gateway.v1 import gateway_pb2
from cogmesh.models.v1 import models_pb2
from cogmesh.runtime.v1 import runtime_pb2
from cogmesh.sessions.v1 import sessions_pb2
from gateway import answers
from gateway.sessions import Sessions
from services.kit.clients import Clients, call
from services.kit.dependencies import ModelsClient
from services.kit.errors import DependencyError, InvalidArgument, NotFound, Violations
from services.lib import session_search as search
from services.lib import turn_options
from services.lib.agents import AgentRegistry, UnknownAgentError
from services.lib.models.watch import CatalogWatcher, resolve_held


def check_message(request: gateway_pb2.SendMessageRequest, problems: Violations, prefix: str = "") -> None:
    """A message's rules beyond its fields' own (SendMessage, or a Converse frame's under `prefix`)."""
    # (Empty content breaks its rule already.)
    problems.check(not request.content or bool(request.content.strip()), f"{prefix}content", "must not be blank")
    # The turn's options: the runtime's own rules (output schema, client tools).
    turn_options.check(request, problems, prefix)


# --------------------------------------------------------------------------- the RPCs with more than field rules


def list_sessions(request: gateway_pb2.ListSessionsRequest) -> None:
    problems = Violations()
    search.filter_of(request, problems)  # the time ranges: the sessions service's rules
    problems.raise_if_any()


def update_session(request: gateway_pb2.UpdateSessionRequest) -> None:
    """Label paths ("labels": all of them, "labels.<key>": one) and "agent" (a move to another agent or version)."""
    problems = Violations()
    paths = list(request.update_mask.paths)
    problems.check(bool(paths), "update_mask", "must name 'labels', 'labels.<key>' or 'agent' paths")
    for path in paths:
        known = path in ("labels", "agent") or path.startswith("labels.")
        problems.check(known, "update_mask", f"unknown path {path!r}: only labels and the agent can be updated")
    if "agent" in paths:
        problems.require(request.agent, "agent")
    search.label_update([p for p in paths if p != "agent"], request.labels, problems)
    problems.raise_if_any()


def send_message(request: gateway_pb2.SendMessageRequest) -> None:
    problems = Violations()
    check_message(request, problems)
    problems.raise_if_any()


def resolve_approval(request: gateway_pb2.ResolveApprovalRequest) -> sessions_pb2.CheckpointDecision:
    """The decision to record (gateway/answers.py says what fits)."""
    problems = Violations()
    decision = answers.resolve_approval(request, problems)
    problems.raise_if_any()
    return decision


def answer_interrupt(request: gateway_pb2.AnswerInterruptRequest) -> tuple[str, sessions_pb2.CheckpointDecision]:
    """The answer field set, and the decision to record."""
    problems = Violations()
    given, decision = answers.answer_interrupt(request, problems)
    problems.raise_if_any()
    return given, decision


def fork_session(request: gateway_pb2.ForkSessionRequest) -> None:
    problems = Violations()
    # "Before the last turn" would silently depend on what ran last: name the turn.
    problems.check(bool(request.turn_id) or not request.before_turn, "turn_id", "is required with before_turn")
    problems.raise_if_any()


# --------------------------------------------------------------------------- names other services know


class Names:
    """Names that only another service knows, checked before the turn takes the lease.

    A runtime engine the runtime does not have is INVALID_ARGUMENT naming `runtime`. A named
    model is resolved strictly, as the runtime resolves it (a turn's model is never replaced
    by the default), so one the catalogue lacks is NOT_FOUND (MODEL_NOT_FOUND) naming the
    field. A client tool named like one of the session's agent's tools is INVALID_ARGUMENT
    naming it. A model is checked against the catalogue snapshot the gateway holds (pushed on every
    change), engines by asking the runtime each time.
    """

    def __init__(
        self, clients: Clients, agents: AgentRegistry, sessions: Sessions, catalog: CatalogWatcher | None
    ) -> None:
        self.clients, self.agents, self.sessions, self.catalog = clients, agents, sessions, catalog

    async def check(self, tenant: str, request: gateway_pb2.SendMessageRequest, prefix: str = "") -> None:
        checks = []
        if request.runtime:
            checks.append(self._runtime(request.runtime, f"{prefix}runtime"))
        if request.model.strip():
            checks.append(self._model(request.model, f"{prefix}model"))
        if request.client_tools:
            checks.append(self._client_tools(tenant, request, prefix))
        failures = [r for r in await asyncio.gather(*checks, return_exceptions=True) if isinstance(r, BaseException)]
        failures.sort(key=lambda exc: not isinstance(exc, InvalidArgument))  # bad input first, then not found
        if failures:
            raise failures[0]

    async def _runtime(self, name: str, field: str) -> None:
        reply = await call("runtime", self.clients.runtime.ListRuntimes, runtime_pb2.ListRuntimesRequest())
        known = [engine.name for engine in reply.runtimes]
        if name not in known:
            raise InvalidArgument([(field, f"unknown runtime {name!r}; known runtimes: {', '.join(known)}")])

    async def _client_tools(self, tenant: str, request: gateway_pb2.SendMessageRequest, prefix: str) -> None:
        session = await self.sessions.visible(tenant, request.session_id)
        try:
            agent = self.agents.get(session.active_agent or session.agent)  # a handoff's agent answers
        except UnknownAgentError:
            return  # the runtime refuses the turn of an agent gone from the registry, naming it
        problems = Violations()
        turn_options.client_tool_clashes(request.client_tools, agent.tools, problems, prefix)
        problems.raise_if_any()

    async def _model(self, name: str, field: str) -> None:
        request = models_pb2.ResolveModelRequest(name=name, strict=True)
        try:
            # The snapshot held answers as ResolveModel would (services/lib/models); the service until one is held.
            if self.catalog is None or resolve_held(self.catalog, request) is None:
                await ModelsClient.of(self.clients).ResolveModel(request)
        except (NotFound, DependencyError) as exc:
            if isinstance(exc, DependencyError) and exc.status_code != grpc.StatusCode.NOT_FOUND:
                raise
            raise NotFound(
                f"{field}: model {name!r} is not in the catalogue (no alias, model id or id prefix matches)",
                reason=errors_pb2.ERROR_REASON_MODEL_NOT_FOUND,
                metadata={"field": field, "model": name},
            ) from exc
