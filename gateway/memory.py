"""The memory API for applications: cogmesh.memory.v1.MemoryService on the gateway's port.

Every call is authenticated and rate-limited by the gateway's guard like GatewayService,
then forwarded to the internal memory service with the caller's tenant (from its API key)
as tenant_id: an application names namespaces inside its tenant and never another's. A
request that names another tenant is NOT_FOUND, exactly like a missing memory, so it tells
nothing about what that tenant holds.

A key that pins scope values (the keys file's `scope.pin`) reaches only the namespaces
that start with its pins as `key=value` labels in key order: pinning `{end_user: u_42}`
gives ["end_user=u_42", ...], the namespace the memory tools derive from the default
template ["{end_user}", "memories"]. A prefix shorter than the pins is narrowed to them;
any other namespace is NOT_FOUND.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from cogmesh.common.v1 import errors_pb2
from cogmesh.memory.v1 import memory_pb2_grpc
from gateway import auth
from services.kit.clients import Clients, call
from services.kit.errors import NotFound
from services.lib import scope as scopes

SERVICE_PREFIX = "/cogmesh.memory.v1.MemoryService/"
# The field naming the namespace (or prefix) of each request.
_NAMESPACE_FIELD = {
    "PutMemory": "namespace",
    "GetMemory": "namespace",
    "DeleteMemory": "namespace",
    "ListMemories": "namespace_prefix",
    "SearchMemories": "namespace_prefix",
    "ListNamespaces": "prefix",
}


def _not_found() -> NotFound:
    return NotFound("no such memory namespace", reason=errors_pb2.ERROR_REASON_MEMORY_NOT_FOUND)


def _within_pins(labels: list[str], pins: list[str], is_prefix: bool) -> list[str]:
    """The labels to use: a namespace must start with the pins; a prefix may stop short of them (it is narrowed)."""
    if labels[: len(pins)] == pins:
        return labels
    if is_prefix and pins[: len(labels)] == labels:
        return pins
    raise _not_found()


def _forward(method: str) -> Callable[[GatewayMemoryServicer, Any, Any], Awaitable[Any]]:
    field = _NAMESPACE_FIELD[method]

    async def forward(self: GatewayMemoryServicer, request: Any, context: Any) -> Any:
        principal = auth.current.get()
        if request.tenant_id and request.tenant_id != principal.tenant_id:
            raise _not_found()
        request.tenant_id = principal.tenant_id
        pins = scopes.labels(principal.pinned_scope)
        if pins:
            labels = _within_pins(list(getattr(request, field)), pins, is_prefix=field != "namespace")
            request.ClearField(field)
            getattr(request, field).extend(labels)
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
