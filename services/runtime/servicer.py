"""RuntimeService: validates, has `TurnBuilder` gather what a turn needs, runs the selected
engine, checkpoints a turn that pauses, and persists the turn's messages before its last
event goes out."""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from cogmesh.common.v1 import events_pb2, messages_pb2
from cogmesh.runtime.v1 import runtime_pb2, runtime_pb2_grpc
from cogmesh.sessions.v1 import sessions_pb2
from services.kit import turn_options
from services.kit.agents import AgentRegistry
from services.kit.clients import Clients
from services.kit.errors import FailedPrecondition, InvalidArgument, Violations
from services.kit.limits import MAX_ARGUMENT_DEPTH, json_depth
from services.kit.llm import ChatMessage, ChatModel
from services.kit.logging import bind_request, log
from services.kit.protos import APPROVAL_DECISIONS, struct_to_dict
from services.kit.streams import batched
from services.runtime.assembly import BlockedTurn, CommandTurn, NewTurn, TurnBuilder
from services.runtime.budget import SessionCosts
from services.runtime.context_link import SessionMemory
from services.runtime.engines import Engine, RuntimeRegistry, default_registry
from services.runtime.providers.registry import ProviderRegistry
from services.runtime.steps.finish import close_open_calls
from services.runtime.steps.state import decode_snapshot
from services.runtime.structured import OutputSpec
from services.runtime.tools.builtin import builtin_tools
from services.runtime.tools.catalog import ToolCatalog
from services.runtime.turn import Decision, ResumePoint, Turn
from services.runtime.turn_store import TurnStore

__all__ = ["RuntimeServicer", "builtin_tools"]

MAX_CONTENT = 100_000
MAX_MODEL_NAME = 256
MAX_SCHEMA_BYTES = turn_options.MAX_SCHEMA_BYTES
MAX_ID = 256


class _Preparing:
    """A turn still gathering what it needs: cancelling it cancels the gathering."""

    def __init__(self) -> None:
        self.task = asyncio.current_task()
        self.cancelled = False

    def request_cancel(self) -> bool:
        if self.cancelled or self.task is None:
            return False
        self.cancelled = True
        self.task.cancel()
        return True


def _cancelled_event(turn_id: str) -> events_pb2.RuntimeEvent:
    return events_pb2.RuntimeEvent(
        turn_id=turn_id,
        error=events_pb2.TurnError(kind=events_pb2.ERROR_KIND_CANCELLED, message="turn cancelled on request"),
    )


def validate_run_turn(request: runtime_pb2.RunTurnRequest) -> OutputSpec | None:
    """Every field problem of a RunTurn request at once; returns the parsed output schema.

    The turn's options follow services/kit/turn_options.py, the rules the gateway applies too.
    """
    problems = Violations()
    for name in ("tenant_id", "session_id", "turn_id", "content"):
        problems.require(getattr(request, name), name)
    problems.check(len(request.content) <= MAX_CONTENT, "content", f"must be at most {MAX_CONTENT} characters")
    problems.check(len(request.model) <= MAX_MODEL_NAME, "model", f"must be at most {MAX_MODEL_NAME} characters")
    problems.check(request.lease_token > 0, "lease_token", "is required: run turns while holding the lease")
    turn_options.check(request, problems)
    usage = request.session_usage
    problems.check(
        math.isfinite(usage.cost_usd) and usage.cost_usd >= 0 and usage.input_tokens >= 0 and usage.output_tokens >= 0,
        "session_usage",
        "must not be negative",
    )
    problems.raise_if_any()
    return OutputSpec.of(struct_to_dict(request.output_schema)) if request.HasField("output_schema") else None


def validate_resume(request: runtime_pb2.ResumeTurnRequest) -> str:
    """Field problems of a ResumeTurn request; returns which answer it carries ("" for none)."""
    problems = Violations()
    for name in ("tenant_id", "session_id", "turn_id", "interrupt_id"):
        problems.require(getattr(request, name), name)
        problems.check(len(getattr(request, name)) <= MAX_ID, name, f"must be at most {MAX_ID} characters")
    problems.check(request.lease_token > 0, "lease_token", "is required: resume turns while holding the lease")
    answer = request.WhichOneof("answer") or ""
    if answer == "approval":
        decision = request.approval.decision
        problems.check(
            decision in APPROVAL_DECISIONS, "approval.decision", f"must be APPROVE, EDIT or REJECT, not {decision}"
        )
        problems.check(
            decision != events_pb2.APPROVAL_DECISION_EDIT or request.approval.HasField("edited_arguments"),
            "approval.edited_arguments",
            "is required with APPROVAL_DECISION_EDIT",
        )
        problems.check(
            request.approval.edited_arguments.ByteSize() <= MAX_SCHEMA_BYTES,
            "approval.edited_arguments",
            f"must be at most {MAX_SCHEMA_BYTES} bytes",
        )
        depth = json_depth(struct_to_dict(request.approval.edited_arguments))
        problems.check(
            depth <= MAX_ARGUMENT_DEPTH,
            "approval.edited_arguments",
            f"must be nested at most {MAX_ARGUMENT_DEPTH} levels deep, not {depth}",
        )
        problems.check(len(request.approval.reason) <= MAX_CONTENT, "approval.reason", "is too long")
    elif answer == "user_input":
        problems.require(request.user_input, "user_input")
        problems.check(
            len(request.user_input) <= MAX_CONTENT, "user_input", f"must be at most {MAX_CONTENT} characters"
        )
    elif answer == "tool_result":
        problems.check(
            len(request.tool_result.content) <= MAX_CONTENT,
            "tool_result.content",
            f"must be at most {MAX_CONTENT} characters",
        )
    elif answer == "abandon":
        problems.check(request.abandon, "abandon", "must be true when set")
    problems.raise_if_any()
    return answer


def decision_of(request: runtime_pb2.ResumeTurnRequest, answer: str) -> sessions_pb2.CheckpointDecision:
    """The request's answer as the sessions service records it."""
    if answer == "approval":
        approval = request.approval
        decision = sessions_pb2.CheckpointDecision(
            approval=approval.decision, text=approval.reason, decided_by=approval.decided_by
        )
        if approval.decision == events_pb2.APPROVAL_DECISION_EDIT:
            decision.edited_arguments.CopyFrom(approval.edited_arguments)
        return decision
    if answer == "user_input":
        return sessions_pb2.CheckpointDecision(text=request.user_input)
    content = request.tool_result.content
    if request.tool_result.is_error and not content.startswith("error:"):
        content = f"error: {content}"
    return sessions_pb2.CheckpointDecision(
        tool_result=messages_pb2.Message(role=messages_pb2.ROLE_TOOL, content=content)
    )


def decision_from(checkpoint: sessions_pb2.Checkpoint) -> Decision | None:
    """The loop's view of a recorded answer."""
    if not checkpoint.HasField("decision"):
        return None
    recorded = checkpoint.decision
    kind = checkpoint.WhichOneof("request")
    if kind == "approval":
        if recorded.approval == events_pb2.APPROVAL_DECISION_EDIT:
            return Decision("edit", struct_to_dict(recorded.edited_arguments), decided_by=recorded.decided_by)
        if recorded.approval == events_pb2.APPROVAL_DECISION_APPROVE:
            return Decision("approve", decided_by=recorded.decided_by)
        # Fail closed: only an explicit APPROVE runs the call; anything else that got this far is a rejection.
        reason = recorded.text if recorded.approval == events_pb2.APPROVAL_DECISION_REJECT else ""
        reason = reason or f"unknown approval decision {recorded.approval}: rejected"
        return Decision("reject", text=reason, decided_by=recorded.decided_by)
    if kind == "user_input":
        return Decision("input", text=recorded.text, decided_by=recorded.decided_by)
    content = recorded.tool_result.content
    return Decision("tool_result", text=content, is_error=content.startswith("error:"), decided_by=recorded.decided_by)


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
    ) -> None:
        self.clients, self.agents, self.catalog, self.local_model = clients, agents, catalog, local_model
        self.providers = providers or ProviderRegistry({})
        self.engines = engines or default_registry()
        self.default_runtime = default_runtime
        self.session_costs = SessionCosts()
        self.memory = SessionMemory()
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
        )
        self.store = TurnStore(clients, self.memory, self.builder.resolve)
        self._running: dict[tuple[str, str], Turn | _Preparing] = {}

    # ------------------------------------------------------------------ RunTurn

    async def RunTurn(
        self, request: runtime_pb2.RunTurnRequest, context: Any
    ) -> AsyncIterator[runtime_pb2.RunTurnResponse]:
        output = validate_run_turn(request)
        bind_request(session_id=request.session_id, turn_id=request.turn_id, tenant=request.tenant_id)
        async with self._preparing(request.session_id, request.turn_id) as preparing:
            start = await self.builder.new_turn(request, output)
        if preparing.cancelled:
            yield runtime_pb2.RunTurnResponse(events=[_cancelled_event(request.turn_id)])
            return
        if isinstance(start, NewTurn):  # cancellable from now on, before its first step runs
            self._running[(request.session_id, request.turn_id)] = start.turn
        async for batch in batched(self._start(start, request)):
            yield runtime_pb2.RunTurnResponse(events=batch)

    @contextlib.asynccontextmanager
    async def _preparing(self, session_id: str, turn_id: str) -> AsyncIterator[_Preparing]:
        """While a turn gathers what it needs, CancelTurn cancels the gathering."""
        key = (session_id, turn_id)
        preparing = _Preparing()
        self._running[key] = preparing
        try:
            yield preparing
        except asyncio.CancelledError:
            if not preparing.cancelled:
                raise  # the caller went away
            asyncio.current_task().uncancel()  # type: ignore[union-attr]
        finally:
            if self._running.get(key) is preparing:
                del self._running[key]

    async def _start(
        self, start: NewTurn | CommandTurn | BlockedTurn, request: runtime_pb2.RunTurnRequest
    ) -> AsyncIterator[events_pb2.RuntimeEvent]:
        for event in start.events:
            event.turn_id = request.turn_id
            yield event
        if isinstance(start, BlockedTurn):
            log.info("turn blocked by a hook", reason=start.reason)
            yield events_pb2.RuntimeEvent(
                turn_id=request.turn_id,
                error=events_pb2.TurnError(kind=events_pb2.ERROR_KIND_GUARDRAIL, message=start.reason),
            )
            return
        if isinstance(start, CommandTurn):
            async for event in self._command(start, request):
                yield event
            return
        async for event in self._drive(
            start.turn, start.engine, request.tenant_id, request.session_id, request.lease_token
        ):
            yield event

    async def _drive(
        self, turn: Turn, engine: Engine, tenant: str, session_id: str, lease_token: int
    ) -> AsyncIterator[events_pb2.RuntimeEvent]:
        """Run the engine; checkpoint before a pause is announced, persist before the end is."""
        key = (session_id, turn.turn_id)
        self._running[key] = turn
        stream: AsyncGenerator[events_pb2.RuntimeEvent, None] = engine.run(turn)  # type: ignore[assignment]
        try:
            async with contextlib.aclosing(stream):
                async for event in stream:
                    pause = turn.pause
                    if pause is not None and event is pause.event:
                        failure = await self.store.checkpoint(turn, tenant, session_id, lease_token)
                        if failure is not None:
                            close_open_calls(turn, "the turn could not pause to wait for an answer")
                            yield await self.store.persist(turn, tenant, session_id, lease_token, failure)
                            return
                        log.info("turn paused", interrupt_id=pause.interrupt_id, waiting=pause.snapshot["waiting"])
                    kind = event.WhichOneof("payload")
                    if kind in ("final", "error"):
                        event = await self.store.persist(turn, tenant, session_id, lease_token, event)
                        outcome = event.WhichOneof("payload")
                        log.info("turn ended", outcome=outcome, messages=len(turn.new_messages), runtime=engine.name)
                    yield event
        finally:
            self._running.pop(key, None)

    # ------------------------------------------------------------------ slash commands

    async def _command(
        self, start: CommandTurn, request: runtime_pb2.RunTurnRequest
    ) -> AsyncIterator[events_pb2.RuntimeEvent]:
        """Answer a slash command without the model and apply what it changes."""
        reply, turn_id = start.reply, request.turn_id
        yield events_pb2.RuntimeEvent(
            turn_id=turn_id,
            status=events_pb2.StatusUpdate(state=events_pb2.TURN_STATE_RUNNING, text=f"command /{reply.command}"),
        )
        for text in await self.store.apply_command(start, request):
            yield events_pb2.RuntimeEvent(
                turn_id=turn_id, native_notice=events_pb2.NativeNotice(kind="command", text=text)
            )
        yield events_pb2.RuntimeEvent(turn_id=turn_id, assistant_delta=events_pb2.AssistantDelta(text=reply.reply))
        final = events_pb2.RuntimeEvent(
            turn_id=turn_id,
            final=events_pb2.FinalResult(text=reply.reply, metrics=events_pb2.TurnMetrics(runtime="command")),
        )
        exchange = [ChatMessage("user", request.content), ChatMessage("assistant", reply.reply)]
        final = await self.store.store(
            turn_id, exchange, None, request.tenant_id, request.session_id, request.lease_token, final
        )
        if reply.effect.reset and final.HasField("final"):
            await self.store.reset(request, len(final.final.new_messages) + start.message_count)
        log.info("command answered", command=reply.command, ok=reply.ok)
        yield final

    # ------------------------------------------------------------------ ResumeTurn

    async def ResumeTurn(
        self, request: runtime_pb2.ResumeTurnRequest, context: Any
    ) -> AsyncIterator[runtime_pb2.ResumeTurnResponse]:
        answer = validate_resume(request)
        bind_request(session_id=request.session_id, turn_id=request.turn_id, tenant=request.tenant_id)
        tenant, session_id = request.tenant_id, request.session_id
        abandon = answer == "abandon"
        decision = decision_of(request, answer) if answer and not abandon else None
        checkpoint = await self.store.answered(request, decision)
        if checkpoint.turn_id != request.turn_id:
            raise InvalidArgument(
                [("interrupt_id", f"belongs to turn {checkpoint.turn_id!r}, not to turn {request.turn_id!r}")]
            )
        if not abandon and not checkpoint.HasField("decision"):
            raise FailedPrecondition(
                f"interrupt {request.interrupt_id!r} has no answer yet: send it in this request",
                metadata={"interrupt_id": request.interrupt_id},
            )
        try:
            snapshot = decode_snapshot(checkpoint.payload)
        except ValueError as exc:
            raise FailedPrecondition(
                f"the checkpoint of interrupt {request.interrupt_id!r} is unreadable: {exc}"
            ) from exc
        point = ResumePoint(snapshot, decision_from(checkpoint), abandon)
        async with self._preparing(session_id, request.turn_id) as preparing:
            turn, engine = await self.builder.resumed_turn(request, snapshot, point)
        if preparing.cancelled:  # the checkpoint is left as it was: the turn is still paused
            raise FailedPrecondition("the resume was cancelled before the turn continued; it is still paused")
        await self.store.consume(request, allow_undecided=abandon)  # now this is the one resume of the turn
        log.info("turn resumed", interrupt_id=request.interrupt_id, answer=answer or "recorded")
        async for batch in batched(self._drive(turn, engine, tenant, session_id, request.lease_token)):
            yield runtime_pb2.ResumeTurnResponse(events=batch)

    # ------------------------------------------------------------------ the rest

    async def CancelTurn(self, request: runtime_pb2.CancelTurnRequest, context: Any) -> runtime_pb2.CancelTurnResponse:
        problems = Violations()
        problems.require(request.session_id, "session_id")
        problems.require(request.turn_id, "turn_id")
        problems.raise_if_any()
        turn = self._running.get((request.session_id, request.turn_id))
        return runtime_pb2.CancelTurnResponse(cancelled=turn is not None and turn.request_cancel())

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
