"""The memory API for applications: cogmesh.memory.v1.MemoryService on the gateway's port.

Every call is authenticated and rate-limited by the gateway's guard like GatewayService,
then forwarded to the internal memory service with the caller's tenant (from its API key)
as tenant_id: an application names namespaces inside its tenant and never another's. A
request that names another tenant is NOT_FOUND, exactly like a missing memory, so it tells
nothing about what that tenant holds.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from cogmesh.common.v1 import errors_pb2
from cogmesh.memory.v1 import memory_pb2_grpc
from gateway import auth
from services.kit.clients import Clients, call
from services.kit.errors import NotFound

SERVICE_PREFIX = "/cogmesh.memory.v1.MemoryService/"


def _forward(method: str) -> Callable[[GatewayMemoryServicer, Any, Any], Awaitable[Any]]:
    async def forward(self: GatewayMemoryServicer, request: Any, context: Any) -> Any:
        tenant = auth.current.get().tenant_id
        if request.tenant_id and request.tenant_id != tenant:
            raise NotFound("no such memory namespace", reason=errors_pb2.ERROR_REASON_MEMORY_NOT_FOUND)
        request.tenant_id = tenant
        return await call("memory", getattr(self.clients.memory, method), request)

    forward.__name__ = method
    return forward


class GatewayMemoryServicer(memory_pb2_grpc.MemoryServiceServicer):
    def __init__(self, clients: Clients):
        self.clients = clients

    PutMemory = _forward("PutMemory")
    GetMemory = _forward("GetMemory")
    DeleteMemory = _forward("DeleteMemory")
    ListMemories = _forward("ListMemories")
    SearchMemories = _forward("SearchMemories")
    ListNamespaces = _forward("ListNamespaces")
