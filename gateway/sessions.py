"""The caller's sessions: each one seen only by its tenant's keys, and by a key that pins scope
values only when the session holds them (gateway/auth.py). Creating one picks its agent;
deleting one first stops its running turn; listing them filters by scope, labels, status,
agent and time (services/lib/session_search.py), updating one changes its labels."""

from __future__ import annotations

import asyncio

import grpc

from cogmesh.common.v1 import errors_pb2, resources_pb2
from cogmesh.gateway.v1 import gateway_pb2
from cogmesh.sessions.v1 import sessions_pb2
from gateway import auth
from gateway.settings import GatewaySettings
from gateway.streams import aclose
from gateway.turns import Turns
from services.kit.clients import Clients, call
from services.kit.dependencies import SessionsClient
from services.kit.errors import CogmeshError, DependencyError, InvalidArgument, NotFound
from services.kit.logging import log
from services.lib.agents import AgentDefinition, AgentRegistry, UnknownAgentError
from services.lib.event_log import EventLogReader, ends_stream
from services.lib.stored_agents import StoredAgents


class Sessions:
    def __init__(
        self, settings: GatewaySettings, clients: Clients, agents: AgentRegistry, events: EventLogReader, turns: Turns
    ) -> None:
        self.settings, self.clients, self.agents, self.events, self.turns = settings, clients, agents, events, turns
        self.stored = StoredAgents(clients, agents)  # the tenant's versioned agents (AgentService)

    async def visible(self, tenant: str, session_id: str) -> resources_pb2.Session:
        """The session, if the caller may see it: its tenant's, holding the scope values its key pins."""
        reply = await call(
            "sessions",
            self.clients.sessions.GetSession,
            sessions_pb2.GetSessionRequest(tenant_id=tenant, session_id=session_id),
        )
        return auth.current.get().check_sees(reply.session)

    async def tenant_of(self, session_id: str) -> str:
        """The caller's tenant, once the session is known to be the caller's.

        The sessions service checks the tenant on every call; a key that pins scope values
        costs one GetSession more, to check those too.
        """
        principal = auth.current.get()
        if principal.pinned_scope:
            await self.visible(principal.tenant_id, session_id)
        return principal.tenant_id

    async def primary_agent(self, tenant: str, ref: str) -> tuple[AgentDefinition, int]:
        """The agent a session may be opened with (CreateSession, ForkSession, a move) and its version: a built-in
        (version 0) or one of the tenant's stored agents ("name", "name@7", "name@prod"), and not a subagent."""
        try:
            agent, version = await self.stored.resolve(tenant, ref)
        except NotFound as exc:  # the store's answer names the version or alias; unknown names get the list
            name = ref.partition("@")[0]
            why = exc.message if "@" in ref else str(UnknownAgentError(name, self.agents.names()))
            raise NotFound(why, reason=errors_pb2.ERROR_REASON_AGENT_NOT_FOUND, metadata={"agent": ref}) from exc
        if not agent.is_primary:
            raise InvalidArgument(
                [("agent", f"{agent.name!r} is a subagent (mode {agent.mode!r}): only other agents delegate to it")]
            )
        return agent, version

    async def create(self, tenant: str, request: gateway_pb2.CreateSessionRequest) -> resources_pb2.Session:
        agent, version = await self.primary_agent(tenant, request.agent or "default")
        scope = auth.current.get().session_scope(request.scope)
        reply: sessions_pb2.CreateSessionResponse = await call(
            "sessions",
            self.clients.sessions.CreateSession,
            sessions_pb2.CreateSessionRequest(
                tenant_id=tenant,
                user_id=request.user_id,
                topic_id=request.topic_id,
                agent=agent.name,
                role_id=agent.default_role,
                scope=scope,
                labels=request.labels,
                agent_version=version,
            ),
        )
        return reply.session

    async def list_sessions(self, request: gateway_pb2.ListSessionsRequest) -> gateway_pb2.ListSessionsResponse:
        principal = auth.current.get()
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
                label_filter=request.label_filter,
                statuses=request.statuses,
                agent=request.agent,
                created_after=request.created_after if request.HasField("created_after") else None,
                created_before=request.created_before if request.HasField("created_before") else None,
                active_after=request.active_after if request.HasField("active_after") else None,
                active_before=request.active_before if request.HasField("active_before") else None,
                forked_from=request.forked_from,
                agent_version=request.agent_version,
            ),
        )
        return gateway_pb2.ListSessionsResponse(sessions=reply.sessions, next_page_token=reply.next_page_token)

    async def update(self, request: gateway_pb2.UpdateSessionRequest) -> gateway_pb2.UpdateSessionResponse:
        """Change the labels or the agent the mask names (gateway/validation.py checked them), on a session the
        caller sees. A move to another agent also starts it in that agent's default role."""
        tenant = await self.tenant_of(request.session_id)
        paths = list(request.update_mask.paths)
        update = sessions_pb2.UpdateSessionRequest(
            tenant_id=tenant, session_id=request.session_id, labels=request.labels
        )
        if "agent" in paths:
            agent, version = await self.primary_agent(tenant, request.agent)
            update.agent, update.agent_version, update.role_id = agent.name, version, agent.default_role
            session = await self.visible(tenant, request.session_id)
            if session.agent != agent.name:
                paths.append("role_id")
            log.info(
                "audit",
                action="session.agent",
                tenant=tenant,
                principal=auth.current.get().name,
                session_id=request.session_id,
                agent=agent.name,
                agent_version=version,
            )
        update.update_mask.paths.extend(paths)
        reply = await call("sessions", self.clients.sessions.UpdateSession, update)
        return gateway_pb2.UpdateSessionResponse(session=reply.session)

    async def delete(self, tenant: str, session_id: str) -> bool:
        """Stop the session's running turn, then delete the session and its event log.

        The turn is cancelled first (on the runtime replica running it) and its end waited
        for, briefly, so it does not keep working for a session that is gone; an event it
        still tries to log after the delete is refused, which stops it. Only a session of
        the caller's tenant is touched: an unknown or foreign one is not deleted (False).
        """
        try:
            found = await SessionsClient.of(self.clients).GetSession(
                sessions_pb2.GetSessionRequest(tenant_id=tenant, session_id=session_id)
            )
        except DependencyError as exc:
            if exc.status_code != grpc.StatusCode.NOT_FOUND:
                raise
            return False
        if not auth.current.get().sees(found.session):
            return False
        if found.session.active_turn_id:
            await self._stop_turn(session_id, tenant)
        reply = await call(
            "sessions",
            self.clients.sessions.DeleteSession,
            sessions_pb2.DeleteSessionRequest(tenant_id=tenant, session_id=session_id),
        )
        if reply.deleted:
            await self.events.drop(session_id)
        return bool(reply.deleted)

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
