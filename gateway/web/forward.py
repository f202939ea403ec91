"""GatewayService over Connect and gRPC-Web, by forwarding each call to the gateway's gRPC port.

The edge decides nothing itself: the caller's bearer key, its deadline and its
cancellation travel with the call, so auth, tenancy, rate and stream limits, errors
and deadlines are the gateway's own. A gRPC status comes back as the Connect error of
the same code, message and google.rpc details (ErrorInfo, BadRequest, RetryInfo...),
passed through byte for byte.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, TypeVar

import grpc
from connectrpc.code import Code
from connectrpc.errors import ConnectError, ErrorDetail
from connectrpc.request import RequestContext
from grpc_status import rpc_status
from protobuf.wkt import Any as AnyDetail

from cogmesh.gateway.v1 import gateway_pb2 as pb
from cogmesh.gateway.v1 import gateway_pb2_grpc

# Request headers that mean something to the gateway: the key, and the trace the call belongs to.
FORWARDED_HEADERS = ("authorization", "traceparent", "tracestate")

CONVERSE_UNSUPPORTED = (
    "Converse is a bidirectional stream, which browsers cannot open (Connect and gRPC-Web over fetch carry "
    "unary calls and server streams only): use SendMessage, Subscribe, ResolveApproval, AnswerInterrupt "
    "and CancelTurn here, or Converse on the gateway's gRPC port"
)

Req = TypeVar("Req")
Res = TypeVar("Res")


def connect_code(code: grpc.StatusCode) -> Code:
    if code == grpc.StatusCode.CANCELLED:
        return Code.CANCELED  # the one name the two spell differently
    try:
        return Code[code.name]
    except KeyError:
        return Code.UNKNOWN


def connect_error(error: grpc.aio.AioRpcError) -> ConnectError:
    """The gateway's status as a Connect error with the same code, message and details."""
    details: list[ErrorDetail] = []
    try:
        status = rpc_status.from_call(error)  # type: ignore[arg-type]
    except ValueError:  # grpc-status-details-bin disagrees with the status: keep code and message
        status = None
    if status is not None:
        details = [ErrorDetail(AnyDetail(type_url=d.type_url, value=d.value)) for d in status.details]
    return ConnectError(connect_code(error.code()), error.details() or "", details)


def call_options(ctx: RequestContext[Any, Any]) -> dict[str, Any]:
    """The caller's headers worth forwarding and what is left of its deadline (Connect-Timeout-Ms, grpc-timeout)."""
    headers = ctx.request_headers
    metadata = tuple((name, headers[name]) for name in FORWARDED_HEADERS if name in headers)
    remaining_ms = ctx.timeout_ms
    timeout = None if remaining_ms is None else max(remaining_ms, 1.0) / 1000
    return {"metadata": metadata, "timeout": timeout}


class GatewayForwarder:
    """cogmesh.gateway.v1.GatewayService (gateway_connect's protocol) served by the gateway itself."""

    def __init__(self) -> None:
        self._gateway: Any = None

    def attach(self, channel: grpc.aio.Channel | None) -> None:
        """Forward to this channel (opened by the app's lifespan, in the server's event loop); None: stop."""
        self._gateway = None if channel is None else gateway_pb2_grpc.GatewayServiceStub(channel)  # type: ignore[no-untyped-call]

    @property
    def _stub(self) -> Any:
        if self._gateway is None:
            raise ConnectError(Code.UNAVAILABLE, "the edge is not connected to the gateway (starting or stopping)")
        return self._gateway

    async def _unary(self, method: str, request: Req, ctx: RequestContext[Req, Res]) -> Res:
        try:
            reply: Res = await getattr(self._stub, method)(request, **call_options(ctx))
        except grpc.aio.AioRpcError as exc:
            raise connect_error(exc) from None
        return reply

    async def _stream(self, method: str, request: Req, ctx: RequestContext[Req, Res]) -> AsyncIterator[Res]:
        call = getattr(self._stub, method)(request, **call_options(ctx))
        try:
            async for reply in call:
                yield reply
        except grpc.aio.AioRpcError as exc:
            raise connect_error(exc) from None
        finally:
            # The browser went away or its deadline passed (connectrpc cancels this generator): stop the
            # gateway's stream too, so it frees the tenant's stream slot. A no-op once the call ended.
            call.cancel()

    async def create_session(self, request: pb.CreateSessionRequest, ctx: Any) -> pb.CreateSessionResponse:
        return await self._unary("CreateSession", request, ctx)

    async def get_session(self, request: pb.GetSessionRequest, ctx: Any) -> pb.GetSessionResponse:
        return await self._unary("GetSession", request, ctx)

    async def list_sessions(self, request: pb.ListSessionsRequest, ctx: Any) -> pb.ListSessionsResponse:
        return await self._unary("ListSessions", request, ctx)

    async def update_session(self, request: pb.UpdateSessionRequest, ctx: Any) -> pb.UpdateSessionResponse:
        return await self._unary("UpdateSession", request, ctx)

    async def delete_session(self, request: pb.DeleteSessionRequest, ctx: Any) -> pb.DeleteSessionResponse:
        return await self._unary("DeleteSession", request, ctx)

    async def cancel_turn(self, request: pb.CancelTurnRequest, ctx: Any) -> pb.CancelTurnResponse:
        return await self._unary("CancelTurn", request, ctx)

    async def list_agents(self, request: pb.ListAgentsRequest, ctx: Any) -> pb.ListAgentsResponse:
        return await self._unary("ListAgents", request, ctx)

    async def list_models(self, request: pb.ListModelsRequest, ctx: Any) -> pb.ListModelsResponse:
        return await self._unary("ListModels", request, ctx)

    async def get_capabilities(self, request: pb.GetCapabilitiesRequest, ctx: Any) -> pb.GetCapabilitiesResponse:
        return await self._unary("GetCapabilities", request, ctx)

    async def list_turns(self, request: pb.ListTurnsRequest, ctx: Any) -> pb.ListTurnsResponse:
        return await self._unary("ListTurns", request, ctx)

    async def list_messages(self, request: pb.ListMessagesRequest, ctx: Any) -> pb.ListMessagesResponse:
        return await self._unary("ListMessages", request, ctx)

    async def fork_session(self, request: pb.ForkSessionRequest, ctx: Any) -> pb.ForkSessionResponse:
        return await self._unary("ForkSession", request, ctx)

    async def rewind_session(self, request: pb.RewindSessionRequest, ctx: Any) -> pb.RewindSessionResponse:
        return await self._unary("RewindSession", request, ctx)

    def send_message(self, request: pb.SendMessageRequest, ctx: Any) -> AsyncIterator[pb.SendMessageResponse]:
        return self._stream("SendMessage", request, ctx)

    def subscribe(self, request: pb.SubscribeRequest, ctx: Any) -> AsyncIterator[pb.SubscribeResponse]:
        return self._stream("Subscribe", request, ctx)

    def resolve_approval(
        self, request: pb.ResolveApprovalRequest, ctx: Any
    ) -> AsyncIterator[pb.ResolveApprovalResponse]:
        return self._stream("ResolveApproval", request, ctx)

    def answer_interrupt(
        self, request: pb.AnswerInterruptRequest, ctx: Any
    ) -> AsyncIterator[pb.AnswerInterruptResponse]:
        return self._stream("AnswerInterrupt", request, ctx)

    def converse(self, request: AsyncIterator[pb.ConverseRequest], ctx: Any) -> AsyncIterator[pb.ConverseResponse]:
        raise ConnectError(Code.UNIMPLEMENTED, CONVERSE_UNSUPPORTED)
