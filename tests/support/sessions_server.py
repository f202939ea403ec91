"""A sessions service in the test's process, on a servicer the test holds (to drain it, or share its store)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from cogmesh.sessions.v1 import sessions_pb2 as S
from cogmesh.sessions.v1 import sessions_pb2_grpc
from services.kit.config import Settings
from services.kit.server import App, RunningServer, mount, start
from services.sessions.servicer import SessionsServicer


def build_with(servicer: SessionsServicer) -> Callable[[Settings, Any], Awaitable[App]]:
    async def build(settings: Settings, clients: Any) -> App:
        return App("sessions", [mount(servicer, S, sessions_pb2_grpc, "SessionsService")], on_drained=[servicer.drain])

    return build


async def serve(servicer: SessionsServicer, listen: str = "127.0.0.1:0") -> RunningServer:
    return await start(build_with(servicer), Settings(drain_s=0), listen)


async def leased(stub: sessions_pb2_grpc.SessionsServiceStub, tenant: str) -> tuple[str, int]:
    """A new session and the lease of its turn "t1": (session id, fencing token)."""
    sid = (await stub.CreateSession(S.CreateSessionRequest(tenant_id=tenant, agent="default"))).session.session_id
    lease = await stub.AcquireTurnLease(S.AcquireTurnLeaseRequest(tenant_id=tenant, session_id=sid, turn_id="t1"))
    return sid, lease.lease_token
