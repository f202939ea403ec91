"""RuntimeService: checks requests beyond the protos' field rules (the kit checked those) and hands turns
to `TurnRunner` (services/runtime/runner.py), which builds them with `TurnBuilder`, runs them in the
background into the session's event log, and takes over turns whose runtime stopped."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from cogmesh.common.v1 import messages_pb2
from cogmesh.runtime.v1 import runtime_pb2, runtime_pb2_grpc
from services.kit.clients import Clients
from services.kit.errors import InvalidArgument, Violations
from services.kit.limits import MAX_ARGUMENT_DEPTH, json_depth
from services.kit.protos import struct_to_dict
from services.lib import turn_options
from services.lib.agents import AgentRegistry
from services.lib.llm import ChatModel
from services.runtime.assembly import TurnBuilder
from services.runtime.budget import SessionCosts
from services.runtime.context_link import SessionMemory
from services.runtime.engines import RuntimeRegistry, default_registry
from services.runtime.local_context import LocalContext
from services.runtime.providers.registry import ProviderRegistry
from services.runtime.runner import TurnRunner
from services.runtime.settings import RuntimeSettings
from services.runtime.structured import OutputSpec
from services.runtime.tools.builtin import builtin_tools
from services.runtime.tools.catalog import ToolCatalog
from services.runtime.turn_store import TurnStore, decision_of

__all__ = ["RuntimeServicer", "builtin_tools"]


@contextlib.contextmanager
def prefixed(prefix: str) -> Iterator[None]:
    """Field violations of a request nested in another name their field from the outer request."""
    try:
        yield
    except InvalidArgument as exc:
        raise InvalidArgument([(prefix + field, why) for field, why in exc.violations]) from None


def validate_run_turn(request: runtime_pb2.RunTurnRequest) -> OutputSpec | None:
    """Every problem of a turn to start beyond its fields' rules, at once; returns the parsed output schema.

    The turn's options follow services/lib/turn_options.py, the rules the gateway applies too.
    """
    problems = Violations()
    turn_options.check(request, problems)
    problems.raise_if_any()
    return OutputSpec.of(struct_to_dict(request.output_schema)) if request.HasField("output_schema") else None


def validate_resume(request: runtime_pb2.ResumeTurnRequest) -> str:
    """Problems of a resume beyond its fields' rules; returns which answer it carries ("" for none)."""
    problems = Violations()
    answer = request.WhichOneof("answer") or ""
    if answer and answer != "abandon":
        decision_of(request, answer, problems)  # the rules every layer applies (services/lib/answers.py)
    if answer == "approval":
        depth = json_depth(struct_to_dict(request.approval.edited_arguments))
        problems.check(
            depth <= MAX_ARGUMENT_DEPTH,
            "approval.edited_arguments",
            f"must be nested at most {MAX_ARGUMENT_DEPTH} levels deep, not {depth}",
        )
    if request.HasField("paused"):  # what sessions' AnswerPause returned: it must be this resume's
        paused = request.paused
        problems.check(
            paused.checkpoint.interrupt_id == request.interrupt_id,
            "paused.checkpoint.interrupt_id",
            "must be the interrupt_id answered",
        )
        problems.check(
            paused.checkpoint.turn_id == request.turn_id, "paused.checkpoint.turn_id", "must be the turn_id resumed"
        )
        problems.check(paused.lease_token == request.lease_token, "paused.lease_token", "must be the lease_token")
    problems.raise_if_any()
    return answer


class RuntimeServicer(runtime_pb2_grpc.RuntimeServiceServicer):
    def __init__(
        self,
        clients: Clients,
        agents: AgentRegistry,
        catalog: ToolCatalog,
        local_model: ChatModel,
        providers: ProviderRegistry | None = None,
        engines: RuntimeRegistry | None = None,
        default_runtime: str = "",
        settings: RuntimeSettings | None = None,
    ) -> None:
        self.clients, self.agents, self.catalog, self.local_model = clients, agents, catalog, local_model
        self.providers = providers or ProviderRegistry({})
        self.engines = engines or default_registry()
        self.default_runtime = default_runtime
        self.session_costs = SessionCosts()
        self.memory = SessionMemory()
        settings = settings or RuntimeSettings()
        self.builder = TurnBuilder(
            clients,
            agents,
            catalog,
            local_model,
            self.providers,
            self.engines,
            default_runtime,
            self.session_costs,
            self.memory,
            local_context=LocalContext.from_settings(agents, settings),
            tool_result_limit_tokens=settings.tool_result_limit_tokens,
        )
        self.store = TurnStore(clients, self.memory, self.builder.resolve)
        self.runner = TurnRunner(clients, settings, self.builder, self.store, self.memory)

    async def StartTurn(self, request: runtime_pb2.StartTurnRequest, context: Any) -> runtime_pb2.StartTurnResponse:
        with prefixed("turn."):
            output = validate_run_turn(request.turn)
        # RESOURCE_EXHAUSTED while this worker cannot renew its leases in time: the gateway tries another.
        self.runner.admit()
        expires = request.lease_expire_time.ToNanoseconds() / 1e9 if request.HasField("lease_expire_time") else None
        running = await self.runner.start(
            request.turn, output, grant=request.start if request.HasField("start") else None, lease_expires=expires
        )
        return runtime_pb2.StartTurnResponse(holder=self.runner.address if running is not None else "")

    async def ContinueTurn(
        self, request: runtime_pb2.ContinueTurnRequest, context: Any
    ) -> runtime_pb2.ContinueTurnResponse:
        resume = request.resume
        with prefixed("resume."):
            answer = validate_resume(resume)
        abandon = answer == "abandon"
        decision = decision_of(resume, answer) if answer and not abandon else None
        await self.runner.resume(resume, decision, abandon)
        return runtime_pb2.ContinueTurnResponse(holder=self.runner.address)

    async def CancelTurn(self, request: runtime_pb2.CancelTurnRequest, context: Any) -> runtime_pb2.CancelTurnResponse:
        return runtime_pb2.CancelTurnResponse(cancelled=self.runner.cancel(request.session_id, request.turn_id))

    async def AdoptTurn(self, request: runtime_pb2.AdoptTurnRequest, context: Any) -> runtime_pb2.AdoptTurnResponse:
        adopted = self.runner.adopt(request.session_id, request.turn_id, request.lease_token)
        return runtime_pb2.AdoptTurnResponse(adopted=adopted)

    async def ListTools(self, request: runtime_pb2.ListToolsRequest, context: Any) -> runtime_pb2.ListToolsResponse:
        tools, unlisted = await self.catalog.everything()
        return runtime_pb2.ListToolsResponse(
            tools=[messages_pb2.ToolSpec(name=t.name, description=t.schema.description) for t in tools],
            unlisted=[runtime_pb2.UnlistedToolServer(name=n, prefix=p, problem=why) for n, p, why in unlisted],
        )

    async def ListRuntimes(
        self, request: runtime_pb2.ListRuntimesRequest, context: Any
    ) -> runtime_pb2.ListRuntimesResponse:
        default = self.default_runtime or self.engines.default
        engines = []
        for name in self.engines.list_available():
            engine = self.engines.get(name)
            if engine is None:
                continue  # unregistered meanwhile
            capabilities = runtime_pb2.RuntimeCapabilities(**vars(engine.capabilities))
            engines.append(
                runtime_pb2.RuntimeEngine(
                    name=name, description=engine.description, capabilities=capabilities, is_default=name == default
                )
            )
        return runtime_pb2.ListRuntimesResponse(runtimes=engines, default_runtime=default)
