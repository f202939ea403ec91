"""What the context service reads from and writes to the sessions service.

Rehydration reads the session's rehydration payload; compaction stores the
rolling summary. A sessions service that predates those RPCs answers
UNIMPLEMENTED: rehydration then falls back to the session and its last
messages (and says which parts were unavailable), and the summary is reported
as not stored, so neither stalls a turn.
"""

from __future__ import annotations

import grpc

from cogmesh.sessions.v1 import sessions_pb2
from services.kit.clients import Clients
from services.kit.dependencies import SessionsClient
from services.kit.errors import DependencyError
from services.kit.protos import struct_to_dict
from services.lib.context.api import recalled_text
from services.lib.context.rehydration import RehydrationPayload


def _labelled(text: str, data: dict[str, object]) -> str:
    lines = [text.strip()] if text.strip() else []
    lines += [f"{key}: {data[key]}" for key in sorted(data)]
    return "\n".join(lines)


def payload_from_proto(reply: sessions_pb2.GetRehydrationPayloadResponse) -> RehydrationPayload:
    session = reply.session
    return RehydrationPayload(
        role_id=session.role_id,
        active_skill_ids=tuple(session.active_skill_ids),
        prompt_hash=session.prompt_hash,
        summary=reply.summary.text,
        last_messages=tuple(recalled_text(m) for m in reply.last_messages),
        goal=_labelled(reply.goal.text, struct_to_dict(reply.goal.data)) if reply.HasField("goal") else "",
        phase=_labelled(reply.phase.phase, struct_to_dict(reply.phase.data)) if reply.HasField("phase") else "",
    )


async def load_payload(clients: Clients, tenant: str, session_id: str, last_n: int) -> RehydrationPayload:
    sessions = SessionsClient.of(clients)
    try:
        reply = await sessions.GetRehydrationPayload(
            sessions_pb2.GetRehydrationPayloadRequest(tenant_id=tenant, session_id=session_id, last_n=last_n)
        )
        return payload_from_proto(reply)
    except DependencyError as exc:
        if exc.status_code != grpc.StatusCode.UNIMPLEMENTED:
            raise
    # An older sessions service: session state and messages only.
    got = await sessions.GetSession(sessions_pb2.GetSessionRequest(tenant_id=tenant, session_id=session_id))
    listed = await sessions.ListMessages(
        sessions_pb2.ListMessagesRequest(tenant_id=tenant, session_id=session_id, last_n=last_n)
    )
    return RehydrationPayload(
        role_id=got.session.role_id,
        active_skill_ids=tuple(got.session.active_skill_ids),
        prompt_hash=got.session.prompt_hash,
        last_messages=tuple(recalled_text(m) for m in listed.messages),
        unavailable=("summary", "goal", "phase"),
    )


async def store_summary(
    clients: Clients, tenant: str, session_id: str, text: str, covered_message_count: int, lease_token: int
) -> bool:
    """Write the rolling summary; False when the sessions service has no UpdateSummary."""
    try:
        await SessionsClient.of(clients).UpdateSummary(
            sessions_pb2.UpdateSummaryRequest(
                tenant_id=tenant,
                session_id=session_id,
                text=text,
                covered_message_count=covered_message_count,
                lease_token=lease_token,
            )
        )
    except DependencyError as exc:
        if exc.status_code == grpc.StatusCode.UNIMPLEMENTED:
            return False
        raise
    return True
