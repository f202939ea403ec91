"""GatewayService: the public API. Thin: validates, asks the internal services,
and serves each session's event log to every caller watching it.

Turns (gateway/turns.py) run on runtime replicas and write the event log themselves;
SendMessage's stream reads the log and ends at the turn's end or pause;
ResolveApproval and AnswerInterrupt record the answer and resume the turn on any
runtime replica, streaming the rest of it; Converse carries all of it on one stream."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
from google.rpc import error_details_pb2

from cogmesh.common.v1 import errors_pb2, events_pb2, resources_pb2, turns_pb2
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from cogmesh.models.v1 import models_pb2
from cogmesh.runtime.v1 import runtime_pb2
from cogmesh.sessions.v1 import sessions_pb2
from gateway import answers, auth, capabilities, contract
from gateway.delivery import Outlet
from gateway.turns import TurnOptions, Turns, ends_stream
from services.kit import scope as scopes
from services.kit import turn_options
from services.kit.agents import AgentDefinition, AgentRegistry, UnknownAgentError
from services.kit.clients import Clients, call
from services.kit.config import Settings
from services.kit.errors import (
    CogmeshError,
    InvalidArgument,
    NotFound,
    Unavailable,
    Violations,
    from_dependency,
)
from services.kit.event_log import Batch, EventLogReader
from services.kit.logging import bind_request, log
from services.kit.protos import MAX_ID, dict_to_struct
from services.lib.models.watch import CatalogWatcher, resolve_held

MAX_CONTENT = 100_000
_MODES = {
    "primary": resources_pb2.AGENT_MODE_PRIMARY,
    "subagent": resources_pb2.AGENT_MODE_SUBAGENT,
    "all": resources_pb2.AGENT_MODE_ALL,
}


def agent_to_proto(agent: AgentDefinition) -> resources_pb2.Agent:
    return resources_pb2.Agent(
        name=agent.name,
        description=agent.description,
        model=agent.model,
        tools=list(agent.tools),
        skills=list(agent.skills),
        mode=_MODES[agent.mode],
        a2a_exposed=agent.a2a_exposed,
        mcp_exposed=agent.mcp_exposed,
        output_schema=None if agent.output_schema is None else dict_to_struct(agent.output_schema),
    )


class GatewayServicer(gateway_pb2_grpc.GatewayServiceServicer):
    def __init__(
        self,
        settings: Settings,
        clients: Clients,
        agents: AgentRegistry,
        events: EventLogReader,
        catalog: CatalogWatcher | None = None,
    ):
        self.catalog = catalog  # the models service's catalogue snapshot: named models are checked against it
        self.settings, self.clients, self.agents, self.events = settings, clients, agents, events
        self.turns = Turns(settings, clients)
        self.stall_s = settings.subscriber_stall_s
        self._subscribers: set[asyncio.Task[Any]] = set()  # the tasks of open Subscribe streams
        self._handing_off = False

    def _outlet(self, context: Any, session_id: str, cursor: int) -> Outlet:
        return Outlet(context, self.stall_s, session_id, cursor)

    def _tenant(self, context: Any) -> str:
        # Set by GatewayGuard from the caller's API key (or dev mode) in this RPC's task.
        return auth.current.get().tenant_id

    async def _session(self, tenant: str, session_id: str) -> resources_pb2.Session:
        """The session, if the caller may see it: its tenant's, holding the scope values its key pins."""
        reply = await call(
            "sessions",
            self.clients.sessions.GetSession,
            sessions_pb2.GetSessionRequest(tenant_id=tenant, session_id=session_id),
        )
        return auth.current.get().check_sees(reply.session)

    async def _tenant_of(self, context: Any, session_id: str) -> str:
        """The caller's tenant, once the session is known to be the caller's.

        The sessions service checks the tenant on every call; a key that pins scope values
        costs one GetSession more, to check those too.
        """
        principal = auth.current.get()
        if principal.pinned_scope:
            await self._session(principal.tenant_id, session_id)
        return principal.tenant_id

    @staticmethod
    def _check_session_id(value: str, problems: Violations) -> None:
        problems.require(value, "session_id")
        problems.check(len(value) <= MAX_ID, "session_id", f"must be at most {MAX_ID} characters")

    async def CreateSession(
        self, request: gateway_pb2.CreateSessionRequest, context: Any
    ) -> gateway_pb2.CreateSessionResponse:
        problems = Violations()
        for name in ("agent", "user_id", "topic_id"):
            problems.check(len(getattr(request, name)) <= MAX_ID, name, f"must be at most {MAX_ID} characters")
        problems.raise_if_any()
        try:
            agent = self.agents.get(request.agent or "default")
        except UnknownAgentError as exc:
            raise NotFound(
                str(exc), reason=errors_pb2.ERROR_REASON_AGENT_NOT_FOUND, metadata={"agent": request.agent}
            ) from exc
        if not agent.is_primary:
            raise InvalidArgument(
                [("agent", f"{agent.name!r} is a subagent (mode {agent.mode!r}): only other agents delegate to it")]
            )
        scope = auth.current.get().session_scope(request.scope)
        reply = await call(
            "sessions",
            self.clients.sessions.CreateSession,
            sessions_pb2.CreateSessionRequest(
                tenant_id=self._tenant(context),
                user_id=request.user_id,
                topic_id=request.topic_id,
                agent=agent.name,
                role_id=agent.default_role,
                scope=scope,
            ),
        )
        return gateway_pb2.CreateSessionResponse(session=reply.session)

    async def GetSession(self, request: gateway_pb2.GetSessionRequest, context: Any) -> gateway_pb2.GetSessionResponse:
        problems = Violations()
        self._check_session_id(request.session_id, problems)
        problems.raise_if_any()
        return gateway_pb2.GetSessionResponse(session=await self._session(self._tenant(context), request.session_id))

    async def ListSessions(
        self, request: gateway_pb2.ListSessionsRequest, context: Any
    ) -> gateway_pb2.ListSessionsResponse:
        principal = auth.current.get()
        problems = Violations()
        scopes.check(request.scope_filter, "scope_filter", problems)
        problems.raise_if_any()
        conflicting = [k for k, v in principal.pinned_scope.items() if request.scope_filter.get(k, v) != v]
        if conflicting:  # no session of this key can match: an empty page, as for any filter matching nothing
            return gateway_pb2.ListSessionsResponse()
        reply = await call(
            "sessions",
            self.clients.sessions.ListSessions,
            sessions_pb2.ListSessionsRequest(
                tenant_id=principal.tenant_id,
                page_size=request.page_size,
                page_token=request.page_token,
                scope_filter={**request.scope_filter, **principal.pinned_scope},
            ),
        )
        return gateway_pb2.ListSessionsResponse(sessions=reply.sessions, next_page_token=reply.next_page_token)

    async def DeleteSession(
        self, request: gateway_pb2.DeleteSessionRequest, context: Any
    ) -> gateway_pb2.DeleteSessionResponse:
        """Stop the session's running turn, then delete the session and its event log.

        The turn is cancelled first (on the runtime replica running it) and its end waited
        for, briefly, so it does not keep working for a session that is gone; an event it
        still tries to log after the delete is refused, which stops it. Only a session of
        the caller's tenant is touched: an unknown or foreign one is `deleted: false`.
        """
        problems = Violations()
        self._check_session_id(request.session_id, problems)
        problems.raise_if_any()
        tenant, session_id = self._tenant(context), request.session_id
        try:
            found = await self.clients.sessions.GetSession(
                sessions_pb2.GetSessionRequest(tenant_id=tenant, session_id=session_id)
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.NOT_FOUND:
                raise from_dependency(exc, "sessions") from exc
            return gateway_pb2.DeleteSessionResponse(deleted=False)
        if not auth.current.get().sees(found.session):
            return gateway_pb2.DeleteSessionResponse(deleted=False)
        if found.session.active_turn_id:
            await self._stop_turn(session_id, tenant)
        reply = await call(
            "sessions",
            self.clients.sessions.DeleteSession,
            sessions_pb2.DeleteSessionRequest(tenant_id=tenant, session_id=session_id),
        )
        if reply.deleted:
            await self.events.drop(session_id)
        return gateway_pb2.DeleteSessionResponse(deleted=reply.deleted)

    async def _stop_turn(self, session_id: str, tenant: str) -> None:
        """Cancel the session's turn and give it (one call deadline at most) to log its end.

        Its end then lands before the log is dropped, and its lease is released while the
        session still exists. A turn that takes longer, or cannot be reached, is left to the
        dropped log, which refuses its next event.
        """
        try:
            after = await self.events.last_seq(session_id)
            turn_id = await self.turns.cancel(session_id, "", tenant)
            if not turn_id:
                return
            reading = self.events.read(session_id, after, self.settings.heartbeat_s)
            try:
                async with asyncio.timeout(self.settings.call_timeout_s):
                    async for batch in reading:
                        if batch and any(e.turn_id == turn_id and ends_stream(e) for e in batch):
                            return
            finally:
                await aclose(reading)
        except (CogmeshError, TimeoutError) as exc:  # e.g. the runtime away: delete the session all the same
            log.warning("the turn of a session being deleted did not end in time", error=str(exc))

    @staticmethod
    def _check_message(request: gateway_pb2.SendMessageRequest, problems: Violations, prefix: str = "") -> None:
        problems.require(request.content, f"{prefix}content")
        problems.check(
            len(request.content) <= MAX_CONTENT, f"{prefix}content", f"must be at most {MAX_CONTENT} characters"
        )
        problems.check(len(request.model) <= MAX_ID, f"{prefix}model", f"must be at most {MAX_ID} characters")
        problems.check(
            request.multitask_strategy in turns_pb2.MultitaskStrategy.values(),
            f"{prefix}multitask_strategy",
            f"unknown value {request.multitask_strategy}",
        )
        # The turn's options: the runtime's own rules (limits, budget, output schema, client tools).
        turn_options.check(request, problems, prefix)

    async def _check_names(self, tenant: str, request: gateway_pb2.SendMessageRequest, prefix: str = "") -> None:
        """Names that only another service knows, checked before the turn takes the lease.

        A runtime engine the runtime does not have is INVALID_ARGUMENT naming `runtime`. A named
        model is resolved strictly, as the runtime resolves it (a turn's model is never replaced
        by the default), so one the catalogue lacks is NOT_FOUND (MODEL_NOT_FOUND) naming the
        field. A client tool named like one of the session's agent's tools is INVALID_ARGUMENT
        naming it. A model is checked against the catalogue snapshot the gateway holds (pushed on every
        change), engines by asking the runtime each time.
        """
        checks = []
        if request.runtime:
            checks.append(self._check_runtime(request.runtime, f"{prefix}runtime"))
        if request.model.strip():
            checks.append(self._check_model(request.model, f"{prefix}model"))
        if request.client_tools:
            checks.append(self._check_client_tools(tenant, request, prefix))
        failures = [r for r in await asyncio.gather(*checks, return_exceptions=True) if isinstance(r, BaseException)]
        failures.sort(key=lambda exc: not isinstance(exc, InvalidArgument))  # bad input first, then not found
        if failures:
            raise failures[0]

    async def _check_runtime(self, name: str, field: str) -> None:
        reply = await call("runtime", self.clients.runtime.ListRuntimes, runtime_pb2.ListRuntimesRequest())
        known = [engine.name for engine in reply.runtimes]
        if name not in known:
            raise InvalidArgument([(field, f"unknown runtime {name!r}; known runtimes: {', '.join(known)}")])

    async def _check_client_tools(self, tenant: str, request: gateway_pb2.SendMessageRequest, prefix: str) -> None:
        session = await self._session(tenant, request.session_id)
        try:
            agent = self.agents.get(session.active_agent or session.agent)  # a handoff's agent answers
        except UnknownAgentError:
            return  # the runtime refuses the turn of an agent gone from the registry, naming it
        problems = Violations()
        turn_options.client_tool_clashes(request.client_tools, agent.tools, problems, prefix)
        problems.raise_if_any()

    async def _check_model(self, name: str, field: str) -> None:
        request = models_pb2.ResolveModelRequest(name=name, strict=True)
        try:
            # The snapshot held answers as ResolveModel would (services/lib/models); the service until one is held.
            if self.catalog is None or resolve_held(self.catalog, request) is None:
                await self.clients.models.ResolveModel(request)
        except (NotFound, grpc.aio.AioRpcError) as exc:
            if isinstance(exc, grpc.aio.AioRpcError) and exc.code() != grpc.StatusCode.NOT_FOUND:
                raise from_dependency(exc, "models") from exc
            raise NotFound(
                f"{field}: model {name!r} is not in the catalogue (no alias, model id or id prefix matches)",
                reason=errors_pb2.ERROR_REASON_MODEL_NOT_FOUND,
                metadata={"field": field, "model": name},
            ) from exc

    @staticmethod
    def _options(request: gateway_pb2.SendMessageRequest) -> TurnOptions:
        return TurnOptions(
            runtime=request.runtime,
            output_schema=request.output_schema if request.HasField("output_schema") else None,
            limits=request.limits if request.HasField("limits") else None,
            cost_budget=request.cost_budget if request.HasField("cost_budget") else None,
            client_tools=list(request.client_tools),
        )

    async def _start_turn(
        self, tenant: str, request: gateway_pb2.SendMessageRequest, deadline_s: float | None
    ) -> tuple[str, int]:
        # One hop to sessions: the lease answers NOT_FOUND for an unknown session and
        # carries the pending interrupts that make a paused session refuse a new turn.
        return await self.turns.start(
            tenant,
            request.session_id,
            request.content,
            request.model,
            deadline_s,
            strategy=contract.strategy(request.multitask_strategy),
            options=self._options(request),
        )

    async def _follow(
        self, session_id: str, turn_id: str, start_seq: int
    ) -> AsyncIterator[list[events_pb2.RuntimeEvent]]:
        """The turn's events from the log until it ends or pauses."""
        # The lease grant told where the log ends: the turn's events come after it, nothing to ask.
        async for batch in self.events.read(session_id, start_seq, self.settings.heartbeat_s, log_end=start_seq):
            if batch is None:
                continue  # HTTP/2 keepalive covers idle streams
            mine = batch if all(e.turn_id == turn_id for e in batch) else [e for e in batch if e.turn_id == turn_id]
            if mine:
                yield mine
            if any(ends_stream(e) for e in mine):
                return

    async def SendMessage(
        self, request: gateway_pb2.SendMessageRequest, context: Any
    ) -> AsyncIterator[gateway_pb2.SendMessageResponse]:
        problems = Violations()
        self._check_session_id(request.session_id, problems)
        self._check_message(request, problems)
        problems.raise_if_any()
        await self._check_names(self._tenant(context), request)
        tenant = await self._tenant_of(context, request.session_id)
        turn_id, start_seq = await self._start_turn(tenant, request, context.time_remaining())
        bind_request(session_id=request.session_id, turn_id=turn_id)
        out = self._outlet(context, request.session_id, start_seq)
        ended = False
        try:
            # The turn runs on its own; this stream only reads its events from the log.
            async for mine in self._follow(request.session_id, turn_id, start_seq):
                ended = any(ends_stream(e) for e in mine)
                await out.send(encoded(mine) or gateway_pb2.SendMessageResponse(events=mine), mine)
        finally:
            if request.cancel_on_disconnect and not ended:
                await asyncio.shield(self.turns.cancel(request.session_id, turn_id))
        return
        yield  # a streaming handler: Outlet writes the messages

    # ------------------------------------------------------------------ answering a paused turn

    async def _answer(
        self,
        tenant: str,
        session_id: str,
        interrupt_id: str,
        given: str,
        decision: sessions_pb2.CheckpointDecision,
        deadline_s: float | None,
    ) -> tuple[str, int]:
        """Record the answer and resume the paused turn (gateway/answers.py says what fits, sessions
        judges it against the pause); returns (turn_id, seq before its next event)."""
        principal = auth.current.get(None)
        decision.decided_by = principal.name if principal is not None else ""
        # A caller that hangs up once its answer is on its way must not leave the turn decided but paused.
        answering = asyncio.ensure_future(
            self.turns.resume(tenant, session_id, interrupt_id, decision, deadline_s, given=given)
        )
        answering.add_done_callback(lambda done: done.cancelled() or done.exception())  # retrieved, if we left
        return await asyncio.shield(answering)

    async def ResolveApproval(
        self, request: gateway_pb2.ResolveApprovalRequest, context: Any
    ) -> AsyncIterator[gateway_pb2.ResolveApprovalResponse]:
        problems = Violations()
        self._check_session_id(request.session_id, problems)
        decision = answers.resolve_approval(request, problems)
        problems.raise_if_any()
        tenant = await self._tenant_of(context, request.session_id)
        turn_id, start_seq = await self._answer(
            tenant, request.session_id, request.interrupt_id, "approval", decision, context.time_remaining()
        )
        bind_request(session_id=request.session_id, turn_id=turn_id)
        out = self._outlet(context, request.session_id, start_seq)
        async for mine in self._follow(request.session_id, turn_id, start_seq):
            await out.send(encoded(mine) or gateway_pb2.ResolveApprovalResponse(events=mine), mine)
        return
        yield  # a streaming handler: Outlet writes the messages

    async def AnswerInterrupt(
        self, request: gateway_pb2.AnswerInterruptRequest, context: Any
    ) -> AsyncIterator[gateway_pb2.AnswerInterruptResponse]:
        problems = Violations()
        self._check_session_id(request.session_id, problems)
        given, decision = answers.answer_interrupt(request, problems)
        problems.raise_if_any()
        tenant = await self._tenant_of(context, request.session_id)
        turn_id, start_seq = await self._answer(
            tenant, request.session_id, request.interrupt_id, given, decision, context.time_remaining()
        )
        bind_request(session_id=request.session_id, turn_id=turn_id)
        out = self._outlet(context, request.session_id, start_seq)
        async for mine in self._follow(request.session_id, turn_id, start_seq):
            await out.send(encoded(mine) or gateway_pb2.AnswerInterruptResponse(events=mine), mine)
        return
        yield  # a streaming handler: Outlet writes the messages

    async def Subscribe(
        self, request: gateway_pb2.SubscribeRequest, context: Any
    ) -> AsyncIterator[gateway_pb2.SubscribeResponse]:
        problems = Violations()
        self._check_session_id(request.session_id, problems)
        problems.raise_if_any()
        tenant = self._tenant(context)
        await self._session(tenant, request.session_id)
        bind_request(session_id=request.session_id)
        last = await self.events.last_seq(request.session_id)
        if request.after_seq > last:  # before stop_when_idle may end the stream: a bad cursor is an error
            raise InvalidArgument([("after_seq", f"is ahead of the session's last event (seq {last})")])
        out = self._outlet(context, request.session_id, request.after_seq)
        if request.stop_when_idle and await self._idle(tenant, request.session_id, out.delivered):
            return
        if self._handing_off:  # arrived between the end of the drain and the stop
            raise _shutting_down(out)
        task = asyncio.current_task()
        assert task is not None
        self._subscribers.add(task)
        try:
            async for batch in self.events.read(request.session_id, request.after_seq, self.settings.heartbeat_s):
                if batch is None:
                    await out.send(_HEARTBEAT)
                else:
                    await out.send(encoded(batch) or gateway_pb2.SubscribeResponse(events=batch), batch)
                if request.stop_when_idle and await self._idle(tenant, request.session_id, out.delivered):
                    return
        except asyncio.CancelledError:
            if not self._handing_off:
                raise
            task.uncancel()
            raise _shutting_down(out) from None
        finally:
            self._subscribers.discard(task)
        return
        yield  # a streaming handler: Outlet writes the messages

    async def hand_off_subscribers(self) -> None:
        """At the end of a drain: end every Subscribe stream with UNAVAILABLE (reason SHUTTING_DOWN).

        Their clients resume by seq on another replica at once, and the stop does not wait
        the whole grace period for streams that would never end by themselves. Turns and
        their SendMessage streams are left their grace period to finish.
        """
        self._handing_off = True
        for task in list(self._subscribers):
            task.cancel()

    async def _idle(self, tenant: str, session_id: str, cursor: int) -> bool:
        if cursor < await self.events.last_seq(session_id):
            return False
        reply = await call(
            "sessions",
            self.clients.sessions.GetSession,
            sessions_pb2.GetSessionRequest(tenant_id=tenant, session_id=session_id),
        )
        if reply.session.active_turn_id:
            return False  # a turn holds the lease: more is coming
        if cursor < await self.events.last_seq(session_id):
            return False  # a turn ended since the first look: its end and the lease's release are one write
        # Nothing runs: the log ends with a turn's end, or with a pause that waits for an answer.
        return await self.events.ends_with_turn_end(session_id) or bool(reply.state.pending_interrupt_ids)

    async def CancelTurn(self, request: gateway_pb2.CancelTurnRequest, context: Any) -> gateway_pb2.CancelTurnResponse:
        problems = Violations()
        self._check_session_id(request.session_id, problems)
        problems.check(len(request.turn_id) <= MAX_ID, "turn_id", f"must be at most {MAX_ID} characters")
        problems.raise_if_any()
        tenant = self._tenant(context)
        await self._session(tenant, request.session_id)
        turn_id = await self.turns.cancel(request.session_id, request.turn_id, tenant)
        return gateway_pb2.CancelTurnResponse(cancelled=bool(turn_id), turn_id=turn_id)

    # ------------------------------------------------------------------ Converse

    async def Converse(
        self, request_iterator: AsyncIterator[gateway_pb2.ConverseRequest], context: Any
    ) -> AsyncIterator[gateway_pb2.ConverseResponse]:
        """One stream for a whole conversation: frames in, the session's events (and acks) out.

        The stream ends when the client cancels it, or once the client has half-closed and
        every turn it started or resumed here has ended or paused.
        """
        tenant = self._tenant(context)
        frames = aiter(request_iterator)
        try:
            first = await anext(frames)
        except StopAsyncIteration:
            return
        if first.WhichOneof("frame") != "open":
            raise InvalidArgument([("open", "the first frame must open a session (ConverseOpen)")])
        session_id = first.open.session_id
        problems = Violations()
        problems.require(session_id, "open.session_id")
        problems.check(len(session_id) <= MAX_ID, "open.session_id", f"must be at most {MAX_ID} characters")
        problems.raise_if_any()
        await self._session(tenant, session_id)
        bind_request(session_id=session_id)
        opened = first.open
        after = opened.after_seq if opened.HasField("after_seq") else await self.events.last_seq(session_id)
        conversation = _Conversation()
        outbox = conversation.outbox

        async def read_frames() -> None:
            try:
                async for frame in frames:
                    await outbox.put(await self._frame(tenant, session_id, frame, conversation, context))
            finally:
                conversation.client_done = True
                await outbox.put(None)  # wake the writer: it may be time to end

        async def tail() -> None:
            try:
                async for batch in self.events.read(session_id, after, self.settings.heartbeat_s):
                    if batch is None:
                        await outbox.put(gateway_pb2.ConverseResponse(heartbeat=True))
                        continue
                    # A full outbox holds the tail back, so a slow reader meets the log's lag cut-off
                    # instead of growing this queue without bound.
                    await outbox.put(gateway_pb2.ConverseResponse(events=gateway_pb2.EventBatch(events=batch)))
                    for event in batch:
                        if ends_stream(event):
                            conversation.in_flight.discard(event.turn_id)
                    await outbox.put(None)
            except BaseException as exc:  # noqa: BLE001 - the writer re-raises it (e.g. a cursor too old)
                conversation.failure = exc
                if not isinstance(exc, asyncio.CancelledError):
                    await outbox.put(None)

        tasks = [asyncio.create_task(read_frames()), asyncio.create_task(tail())]
        out = self._outlet(context, session_id, after)
        try:
            await out.send(
                gateway_pb2.ConverseResponse(ack=gateway_pb2.ConverseAck(frame_id=first.frame_id, after_seq=after))
            )
            while True:
                item = await outbox.get()
                if item is not None:
                    await out.send(item, item.events.events)
                    continue
                if conversation.failure is not None and not isinstance(conversation.failure, asyncio.CancelledError):
                    raise conversation.failure
                if conversation.client_done and not conversation.in_flight and outbox.empty():
                    return
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return
        yield  # a streaming handler: Outlet writes the messages

    async def _frame(
        self,
        tenant: str,
        session_id: str,
        frame: gateway_pb2.ConverseRequest,
        conversation: _Conversation,
        context: Any,
    ) -> gateway_pb2.ConverseResponse:
        """Act on one frame; its ack, or its rejection (a refused frame does not end the stream)."""
        kind = frame.WhichOneof("frame") or ""
        try:
            turn_id = await self._act(tenant, session_id, kind, frame, context)
        except CogmeshError as exc:
            return gateway_pb2.ConverseResponse(rejected=rejection(frame.frame_id, exc))
        except grpc.aio.AioRpcError as exc:
            return gateway_pb2.ConverseResponse(rejected=rejection(frame.frame_id, from_rpc(exc)))
        except Exception as exc:  # noqa: BLE001 - one bad frame must not end the conversation
            log.error("converse frame failed", frame=kind, exc_info=exc)
            failure = CogmeshError(f"internal error handling a {kind} frame; see server logs")
            return gateway_pb2.ConverseResponse(rejected=rejection(frame.frame_id, failure))
        if turn_id and kind != "cancel":
            conversation.in_flight.add(turn_id)
        return gateway_pb2.ConverseResponse(ack=gateway_pb2.ConverseAck(frame_id=frame.frame_id, turn_id=turn_id))

    async def _act(
        self, tenant: str, session_id: str, kind: str, frame: gateway_pb2.ConverseRequest, context: Any
    ) -> str:
        problems = Violations()
        if kind in ("message", "approval", "answer", "cancel"):
            given = getattr(frame, kind).session_id
            problems.check(
                given in ("", session_id), f"{kind}.session_id", "must be empty or the session this stream opened"
            )
        deadline = context.time_remaining()
        if kind == "message":
            message = gateway_pb2.SendMessageRequest()
            message.CopyFrom(frame.message)
            message.session_id = session_id
            self._check_message(message, problems, "message.")
            problems.raise_if_any()
            await self._check_names(tenant, message, "message.")
            turn_id, _ = await self._start_turn(tenant, message, deadline)
            return turn_id
        if kind == "approval":
            decision = answers.resolve_approval(frame.approval, problems, "approval.")
            problems.raise_if_any()
            turn_id, _ = await self._answer(
                tenant, session_id, frame.approval.interrupt_id, "approval", decision, deadline
            )
            return turn_id
        if kind == "answer":
            given, decision = answers.answer_interrupt(frame.answer, problems, "answer.")
            problems.raise_if_any()
            turn_id, _ = await self._answer(tenant, session_id, frame.answer.interrupt_id, given, decision, deadline)
            return turn_id
        if kind == "cancel":
            turn_id = frame.cancel.turn_id
            problems.check(len(turn_id) <= MAX_ID, "cancel.turn_id", f"must be at most {MAX_ID} characters")
            problems.raise_if_any()
            return await self.turns.cancel(session_id, frame.cancel.turn_id, tenant)
        problems.check(False, kind or "frame", "the stream is already open" if kind == "open" else "is required")
        problems.raise_if_any()
        return ""  # pragma: no cover - raise_if_any raised

    async def ListAgents(self, request: gateway_pb2.ListAgentsRequest, context: Any) -> gateway_pb2.ListAgentsResponse:
        return gateway_pb2.ListAgentsResponse(agents=[agent_to_proto(a) for a in self.agents.list()])

    async def ListModels(self, request: gateway_pb2.ListModelsRequest, context: Any) -> gateway_pb2.ListModelsResponse:
        reply = await call(
            "models", self.clients.models.ListModels, models_pb2.ListModelsRequest(provider=request.provider)
        )
        return gateway_pb2.ListModelsResponse(models=reply.models, default_model=reply.default_model)

    # The services this gateway serves (gateway/main.py sets them): GetCapabilities turns on their features.
    services: tuple[str, ...] = (gateway_pb2.DESCRIPTOR.services_by_name["GatewayService"].full_name,)

    async def GetCapabilities(
        self, request: gateway_pb2.GetCapabilitiesRequest, context: Any
    ) -> gateway_pb2.GetCapabilitiesResponse:
        return await capabilities.describe(self.settings, self.clients, self.services)


_HEARTBEAT = gateway_pb2.SubscribeResponse(heartbeat=True)


def _shutting_down(out: Outlet) -> Unavailable:
    return Unavailable(
        f"this gateway is shutting down: resume after seq {out.delivered} on another replica",
        reason=errors_pb2.ERROR_REASON_SHUTTING_DOWN,
        metadata={"resume_after_seq": str(out.delivered), "session_id": out.session_id},
    )


async def aclose(iterator: AsyncIterator[Any]) -> None:
    """Close an async generator left before its end (a log reader holds a reader slot)."""
    close = getattr(iterator, "aclose", None)
    if close is not None:
        await close()


def encoded(events: list[events_pb2.RuntimeEvent]) -> bytes:
    """The events' response as encoded once by the log (events are field 1 of every event
    response), or b"" when this list has no such encoding (a filtered or replayed batch)."""
    return events.wire if isinstance(events, Batch) else b""


OUTBOX_SIZE = 64  # responses (and wake-ups) a Converse stream holds for its writer


class _Conversation:
    """What one Converse stream tracks: its outbox, the turns it waits for, whether the client is done."""

    def __init__(self) -> None:
        self.outbox: asyncio.Queue[gateway_pb2.ConverseResponse | None] = asyncio.Queue(OUTBOX_SIZE)
        self.in_flight: set[str] = set()
        self.client_done = False
        self.failure: BaseException | None = None


_CODE_NAMES = {code.value[0]: code.name for code in grpc.StatusCode}


def from_rpc(exc: grpc.aio.AioRpcError) -> CogmeshError:
    return from_dependency(exc, "upstream")


def rejection(frame_id: str, error: CogmeshError) -> gateway_pb2.ConverseRejection:
    """The status a frame would have got as its own RPC, as a message on the stream."""
    status = error.to_status()
    rejected = gateway_pb2.ConverseRejection(
        frame_id=frame_id, code=_CODE_NAMES.get(status.code, "UNKNOWN"), message=status.message
    )
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            name = f"ERROR_REASON_{info.reason}"
            if name in errors_pb2.ErrorReason.keys():  # noqa: SIM118 - an enum wrapper, not a dict
                rejected.reason = errors_pb2.ErrorReason.Value(name)  # type: ignore[assignment]
            rejected.metadata.update(info.metadata)
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            rejected.violations.extend(
                gateway_pb2.FieldViolation(field=v.field, description=v.description) for v in bad.field_violations
            )
    return rejected
