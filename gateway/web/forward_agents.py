"""AgentService over Connect and gRPC-Web, by forwarding each call to the gateway's gRPC port.

As forward.py does for GatewayService: the caller's bearer key, deadline and trace travel with
the call, so the `agents:write` permission, tenancy and errors are the gateway's own, and a
gRPC status comes back as the Connect error of the same code, message and details.

The Connect and gRPC-Web app is the generated one (agents_connect.py).
"""

from __future__ import annotations

from typing import Any

import grpc
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from connectrpc.request import RequestContext

from cogmesh.gateway.v1 import agents_pb2 as pb
from cogmesh.gateway.v1 import agents_pb2_grpc
from cogmesh.gateway.v1.agents_connect import AgentServiceASGIApplication
from gateway.web.forward import call_options, connect_error

AGENT_SERVICE_PATH = f"/{pb.DESCRIPTOR.services_by_name['AgentService'].full_name}/"
__all__ = ["AGENT_SERVICE_PATH", "AgentForwarder", "AgentServiceASGIApplication"]


class AgentForwarder:
    """cogmesh.gateway.v1.AgentService served by the gateway itself; one coroutine per method, snake_case."""

    def __init__(self) -> None:
        self._agents: Any = None

    def attach(self, channel: grpc.aio.Channel | None) -> None:
        """Forward to this channel (opened by the app's lifespan, in the server's event loop); None: stop."""
        self._agents = None if channel is None else agents_pb2_grpc.AgentServiceStub(channel)  # type: ignore[no-untyped-call]

    async def _unary(self, method: str, request: Any, ctx: RequestContext[Any, Any]) -> Any:
        if self._agents is None:
            raise ConnectError(Code.UNAVAILABLE, "the edge is not connected to the gateway (starting or stopping)")
        try:
            return await getattr(self._agents, method)(request, **call_options(ctx))
        except grpc.aio.AioRpcError as exc:
            raise connect_error(exc) from None

    async def create_agent(self, request: pb.CreateAgentRequest, ctx: Any) -> pb.CreateAgentResponse:
        reply: pb.CreateAgentResponse = await self._unary("CreateAgent", request, ctx)
        return reply

    async def update_agent(self, request: pb.UpdateAgentRequest, ctx: Any) -> pb.UpdateAgentResponse:
        reply: pb.UpdateAgentResponse = await self._unary("UpdateAgent", request, ctx)
        return reply

    async def get_agent(self, request: pb.GetAgentRequest, ctx: Any) -> pb.GetAgentResponse:
        reply: pb.GetAgentResponse = await self._unary("GetAgent", request, ctx)
        return reply

    async def list_agent_versions(self, request: pb.ListAgentVersionsRequest, ctx: Any) -> pb.ListAgentVersionsResponse:
        reply: pb.ListAgentVersionsResponse = await self._unary("ListAgentVersions", request, ctx)
        return reply

    async def delete_agent(self, request: pb.DeleteAgentRequest, ctx: Any) -> pb.DeleteAgentResponse:
        reply: pb.DeleteAgentResponse = await self._unary("DeleteAgent", request, ctx)
        return reply

    async def set_agent_alias(self, request: pb.SetAgentAliasRequest, ctx: Any) -> pb.SetAgentAliasResponse:
        reply: pb.SetAgentAliasResponse = await self._unary("SetAgentAlias", request, ctx)
        return reply

    async def delete_agent_alias(self, request: pb.DeleteAgentAliasRequest, ctx: Any) -> pb.DeleteAgentAliasResponse:
        reply: pb.DeleteAgentAliasResponse = await self._unary("DeleteAgentAlias", request, ctx)
        return reply
