"""The gateway's front door: authenticate, then admit (rate and stream limits), per call.

Health and reflection stay open so probes and grpcurl `list` work without a key.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from gateway import auth
from gateway.limits import TenantLimits
from services.kit.logging import bind_request

# The public services: the gateway's own API, its A2A binding and the memory API.
PROTECTED_PREFIXES = (
    "/cogmesh.gateway.v1.GatewayService/",
    "/lf.a2a.v1.A2AService/",
    "/cogmesh.memory.v1.MemoryService/",
    "/cogmesh.gateway.v1.ScheduleService/",
    "/cogmesh.gateway.v1.WebhookService/",
    "/cogmesh.gateway.v1.AgentService/",
)


class GatewayGuard(grpc.aio.ServerInterceptor):
    def __init__(self, authenticator: auth.Authenticator, limits: TenantLimits):
        self.authenticator, self.limits = authenticator, limits

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
        details: grpc.HandlerCallDetails,
    ) -> Any:
        handler: Any = await continuation(details)
        if handler is None or not details.method.startswith(PROTECTED_PREFIXES):
            return handler
        metadata = tuple(details.invocation_metadata or ())
        guard = self

        def enter() -> auth.Principal:
            # Runs inside the RPC's own task, so the principal is visible to the servicer only.
            principal = guard.authenticator.authenticate(metadata)
            guard.limits.admit(principal.tenant_id)
            auth.current.set(principal)
            bind_request(tenant=principal.tenant_id)
            return principal

        if handler.unary_unary:
            inner_u = handler.unary_unary

            async def unary(request: Any, context: Any) -> Any:
                enter()
                return await inner_u(request, context)

            return grpc.unary_unary_rpc_method_handler(unary, handler.request_deserializer, handler.response_serializer)

        inner_s = handler.unary_stream or handler.stream_stream

        async def streaming(request: Any, context: Any) -> AsyncIterator[Any]:
            principal = enter()
            with guard.limits.stream(principal.tenant_id):
                async for item in inner_s(request, context):
                    yield item

        factory = (
            grpc.unary_stream_rpc_method_handler if handler.unary_stream else grpc.stream_stream_rpc_method_handler
        )
        return factory(streaming, handler.request_deserializer, handler.response_serializer)
