"""A session's history, and travelling in it: its turns (ListTurns), its conversation whole or as
it was after a turn (ListMessages), a new session from it up to a turn (ForkSession), and dropping
turns from it (RewindSession).

The sessions service keeps the history and does the work; this module checks that the caller sees
the session (tenant and the key's pinned scope: gateway/sessions.py), opens a fork only with an
agent a session may be opened with, names the caller as who asked, and logs an audit line for each
fork and rewind. Every answer is a public type (common/v1), so nothing internal reaches a client.
"""

from __future__ import annotations

from cogmesh.gateway.v1 import gateway_pb2
from cogmesh.sessions.v1 import sessions_pb2
from gateway import auth
from gateway.sessions import Sessions
from services.kit.clients import Clients
from services.kit.dependencies import SessionsClient
from services.kit.logging import log


class History:
    def __init__(self, clients: Clients, sessions: Sessions) -> None:
        self.client, self.sessions = SessionsClient.of(clients), sessions

    async def list_turns(self, request: gateway_pb2.ListTurnsRequest) -> gateway_pb2.ListTurnsResponse:
        tenant = auth.current.get().tenant_id
        await self.sessions.visible(tenant, request.session_id)
        reply = await self.client.ListTurns(
            sessions_pb2.ListTurnsRequest(
                tenant_id=tenant,
                session_id=request.session_id,
                page_size=request.page_size,
                page_token=request.page_token,
                include_steps=request.include_steps,
            )
        )
        return gateway_pb2.ListTurnsResponse(turns=reply.turns, next_page_token=reply.next_page_token)

    async def list_messages(self, request: gateway_pb2.ListMessagesRequest) -> gateway_pb2.ListMessagesResponse:
        tenant = auth.current.get().tenant_id
        await self.sessions.visible(tenant, request.session_id)
        reply = await self.client.ListMessages(
            sessions_pb2.ListMessagesRequest(
                tenant_id=tenant,
                session_id=request.session_id,
                page_size=request.page_size,
                page_token=request.page_token,
                through_turn_id=request.through_turn_id,
            )
        )
        return gateway_pb2.ListMessagesResponse(messages=reply.messages, next_page_token=reply.next_page_token)

    async def fork(self, request: gateway_pb2.ForkSessionRequest) -> gateway_pb2.ForkSessionResponse:
        principal = auth.current.get()
        await self.sessions.visible(principal.tenant_id, request.session_id)
        # Another agent is checked as CreateSession checks one; the original's was, when it was opened.
        agent, version = ("", 0)
        if request.agent:
            chosen, version = await self.sessions.primary_agent(principal.tenant_id, request.agent)
            agent = chosen.name
        reply = await self.client.ForkSession(
            sessions_pb2.ForkSessionRequest(
                tenant_id=principal.tenant_id,
                session_id=request.session_id,
                turn_id=request.turn_id,
                before_turn=request.before_turn,
                agent=agent,
                agent_version=version,
                labels=request.labels,
                requested_by=principal.name,
            )
        )
        log.info(
            "session forked",
            audit=True,
            principal=principal.name,
            session_id=request.session_id,
            fork_id=reply.session.session_id,
            turn_id=request.turn_id,
            before_turn=request.before_turn,
            agent=reply.session.agent,
            message_count=reply.message_count,
        )
        return gateway_pb2.ForkSessionResponse(session=reply.session, message_count=reply.message_count)

    async def rewind(self, request: gateway_pb2.RewindSessionRequest) -> gateway_pb2.RewindSessionResponse:
        principal = auth.current.get()
        await self.sessions.visible(principal.tenant_id, request.session_id)
        reply = await self.client.RewindSession(
            sessions_pb2.RewindSessionRequest(
                tenant_id=principal.tenant_id,
                session_id=request.session_id,
                turn_id=request.turn_id,
                requested_by=principal.name,
            )
        )
        rewound = reply.event.rewound
        log.info(
            "session rewound",
            audit=True,
            principal=principal.name,
            session_id=request.session_id,
            turn_id=request.turn_id,
            dropped_turn_ids=list(rewound.dropped_turn_ids),
            dropped_message_count=rewound.dropped_message_count,
            void_after_seq=rewound.void_after_seq,
            void_through_seq=rewound.void_through_seq,
            seq=reply.event.seq,
        )
        return gateway_pb2.RewindSessionResponse(session=reply.session, event=reply.event)
