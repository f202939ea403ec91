"""GatewayService: the public API, adapted to gRPC. Each RPC's fields have been checked against the
protos' rules before it runs (services/kit/validation.py); it checks the rest (gateway/validation.py),
acts through the module that owns it, and writes its stream through an Outlet (gateway/delivery.py);
a raised CogmeshError becomes the call's status in services/kit/errors.py's ErrorMappingInterceptor.

Sessions: gateway/sessions.py. Turns run on runtime replicas and write the event log
themselves (gateway/turns.py): SendMessage starts one (gateway/messages.py) and streams
its events from the log to its end or pause (gateway/streams.py); ResolveApproval and
AnswerInterrupt answer a pause and stream the rest (gateway/interrupts.py); Subscribe
fans a session's log out to every caller watching it (gateway/subscribe.py); Converse
carries all of it on one stream (gateway/converse.py). A session's turns and conversation,
forks and rewinds: gateway/history.py."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from google.protobuf.message import Message

from cogmesh.common.v1 import resources_pb2
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from cogmesh.models.v1 import models_pb2
from cogmesh.sessions.v1 import sessions_pb2
from gateway import auth, capabilities, interrupts, validation
from gateway.converse import Conversations
from gateway.delivery import Outlet
from gateway.history import History
from gateway.messages import Messages
from gateway.sessions import Sessions
from gateway.settings import GatewaySettings
from gateway.streams import follow, relay
from gateway.subscribe import Subscriptions
from gateway.turns import Turns
from services.kit.clients import Clients, call
from services.kit.errors import Unavailable
from services.kit.logging import bind_request, log
from services.kit.protos import dict_to_struct
from services.lib.agents import AgentDefinition, AgentRegistry
from services.lib.event_log import EventLogReader
from services.lib.models.watch import CatalogWatcher

_MODES = {
    "primary": resources_pb2.AGENT_MODE_PRIMARY,
    "subagent": resources_pb2.AGENT_MODE_SUBAGENT,
    "all": resources_pb2.AGENT_MODE_ALL,
}


def agent_to_proto(agent: AgentDefinition, version: int = 0) -> resources_pb2.Agent:
    return resources_pb2.Agent(
        version=version,
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


def _tenant() -> str:
    # Set by GatewayGuard from the caller's API key (or dev mode) in this RPC's task.
    return auth.current.get().tenant_id


class GatewayServicer(gateway_pb2_grpc.GatewayServiceServicer):
    def __init__(
        self,
        settings: GatewaySettings,
        clients: Clients,
        agents: AgentRegistry,
        events: EventLogReader,
        catalog: CatalogWatcher | None = None,
    ):
        self.catalog = catalog  # the models service's catalogue snapshot: named models are checked against it
        self.settings, self.clients, self.agents, self.events = settings, clients, agents, events
        self.turns = Turns(settings, clients)
        heartbeat_s = settings.heartbeat_s
        self.sessions = Sessions(settings, clients, agents, events, self.turns)
        self.names = validation.Names(clients, agents, self.sessions, catalog)
        self.history = History(clients, self.sessions)
        self.messages = Messages(self.turns, events, heartbeat_s)
        self.subscriptions = Subscriptions(clients, events, heartbeat_s)
        self.conversations = Conversations(events, heartbeat_s, self.turns, self.sessions, self.names, self.messages)

    def _outlet(self, context: Any, session_id: str, cursor: int) -> Outlet:
        return Outlet(context, self.settings.subscriber_stall_s, session_id, cursor)

    # ------------------------------------------------------------------ sessions

    async def CreateSession(
        self, request: gateway_pb2.CreateSessionRequest, context: Any
    ) -> gateway_pb2.CreateSessionResponse:
        return gateway_pb2.CreateSessionResponse(session=await self.sessions.create(_tenant(), request))

    async def GetSession(self, request: gateway_pb2.GetSessionRequest, context: Any) -> gateway_pb2.GetSessionResponse:
        return gateway_pb2.GetSessionResponse(session=await self.sessions.visible(_tenant(), request.session_id))

    async def ListSessions(
        self, request: gateway_pb2.ListSessionsRequest, context: Any
    ) -> gateway_pb2.ListSessionsResponse:
        validation.list_sessions(request)
        return await self.sessions.list_sessions(request)

    async def UpdateSession(
        self, request: gateway_pb2.UpdateSessionRequest, context: Any
    ) -> gateway_pb2.UpdateSessionResponse:
        validation.update_session(request)
        return await self.sessions.update(request)

    async def DeleteSession(
        self, request: gateway_pb2.DeleteSessionRequest, context: Any
    ) -> gateway_pb2.DeleteSessionResponse:
        return gateway_pb2.DeleteSessionResponse(deleted=await self.sessions.delete(_tenant(), request.session_id))

    # ------------------------------------------------------------------ history (gateway/history.py)

    async def ListTurns(self, request: gateway_pb2.ListTurnsRequest, context: Any) -> gateway_pb2.ListTurnsResponse:
        return await self.history.list_turns(request)

    async def ListMessages(
        self, request: gateway_pb2.ListMessagesRequest, context: Any
    ) -> gateway_pb2.ListMessagesResponse:
        return await self.history.list_messages(request)

    async def ForkSession(
        self, request: gateway_pb2.ForkSessionRequest, context: Any
    ) -> gateway_pb2.ForkSessionResponse:
        validation.fork_session(request)
        return await self.history.fork(request)

    async def RewindSession(
        self, request: gateway_pb2.RewindSessionRequest, context: Any
    ) -> gateway_pb2.RewindSessionResponse:
        return await self.history.rewind(request)

    # ------------------------------------------------------------------ turns

    async def SendMessage(
        self, request: gateway_pb2.SendMessageRequest, context: Any
    ) -> AsyncIterator[gateway_pb2.SendMessageResponse]:
        validation.send_message(request)
        await self.names.check(_tenant(), request)
        tenant = await self.sessions.tenant_of(request.session_id)
        turn_id, start_seq = await self.messages.start(tenant, request, context.time_remaining())
        bind_request(session_id=request.session_id, turn_id=turn_id)
        await self.messages.stream(self._outlet(context, request.session_id, start_seq), request, turn_id, start_seq)
        return
        yield  # a streaming handler: Outlet writes the messages

    async def ResolveApproval(
        self, request: gateway_pb2.ResolveApprovalRequest, context: Any
    ) -> AsyncIterator[gateway_pb2.ResolveApprovalResponse]:
        decision = validation.resolve_approval(request)
        await self._answer(request, "approval", decision, context, gateway_pb2.ResolveApprovalResponse)
        return
        yield  # a streaming handler: Outlet writes the messages

    async def AnswerInterrupt(
        self, request: gateway_pb2.AnswerInterruptRequest, context: Any
    ) -> AsyncIterator[gateway_pb2.AnswerInterruptResponse]:
        given, decision = validation.answer_interrupt(request)
        await self._answer(request, given, decision, context, gateway_pb2.AnswerInterruptResponse)
        return
        yield  # a streaming handler: Outlet writes the messages

    async def _answer(
        self,
        request: gateway_pb2.ResolveApprovalRequest | gateway_pb2.AnswerInterruptRequest,
        given: str,
        decision: sessions_pb2.CheckpointDecision,
        context: Any,
        response: Callable[..., Message],
    ) -> None:
        """Answer the pause `request` names and stream the resumed turn's events as `response`s."""
        tenant = await self.sessions.tenant_of(request.session_id)
        turn_id, start_seq = await interrupts.answer(
            self.turns, tenant, request.session_id, request.interrupt_id, given, decision, context.time_remaining()
        )
        bind_request(session_id=request.session_id, turn_id=turn_id)
        out = self._outlet(context, request.session_id, start_seq)
        turn = follow(self.events, self.settings.heartbeat_s, request.session_id, turn_id, start_seq)
        await relay(out, turn, response)

    async def CancelTurn(self, request: gateway_pb2.CancelTurnRequest, context: Any) -> gateway_pb2.CancelTurnResponse:
        tenant = _tenant()
        await self.sessions.visible(tenant, request.session_id)
        turn_id = await self.turns.cancel(request.session_id, request.turn_id, tenant)
        return gateway_pb2.CancelTurnResponse(cancelled=bool(turn_id), turn_id=turn_id)

    # ------------------------------------------------------------------ watching a session

    async def Subscribe(
        self, request: gateway_pb2.SubscribeRequest, context: Any
    ) -> AsyncIterator[gateway_pb2.SubscribeResponse]:
        tenant = _tenant()
        await self.sessions.visible(tenant, request.session_id)
        bind_request(session_id=request.session_id)
        await self.subscriptions.serve(tenant, request, self._outlet(context, request.session_id, request.after_seq))
        return
        yield  # a streaming handler: Outlet writes the messages

    async def hand_off_subscribers(self) -> None:
        """At the end of a drain: end every Subscribe stream with UNAVAILABLE (reason SHUTTING_DOWN).
        Turns and their SendMessage streams are left their grace period to finish."""
        self.subscriptions.hand_off()

    async def Converse(
        self, request_iterator: AsyncIterator[gateway_pb2.ConverseRequest], context: Any
    ) -> AsyncIterator[gateway_pb2.ConverseResponse]:
        def outlet(session_id: str, cursor: int) -> Outlet:
            return self._outlet(context, session_id, cursor)

        await self.conversations.converse(_tenant(), request_iterator, outlet, context.time_remaining)
        return
        yield  # a streaming handler: Outlet writes the messages

    # ------------------------------------------------------------------ the catalogue

    async def ListAgents(self, request: gateway_pb2.ListAgentsRequest, context: Any) -> gateway_pb2.ListAgentsResponse:
        tenant = auth.current.get().tenant_id
        try:
            stored = await self.sessions.stored.latest(tenant)
        except Unavailable as exc:  # the built-ins need no other service: they are still listed
            log.warning("stored agents left out of ListAgents", tenant=tenant, error=exc.message)
            stored = []
        listed = [(a, 0) for a in self.agents.list()] + [(a, v) for a, v in stored if not a.hidden]
        listed.sort(key=lambda pair: pair[0].name)
        return gateway_pb2.ListAgentsResponse(agents=[agent_to_proto(a, version) for a, version in listed])

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
