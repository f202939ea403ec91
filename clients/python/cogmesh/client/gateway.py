"""GatewayClient: sessions, turns and event streams with plain Python calls.

- Auth: `api_key` is sent as `authorization: Bearer <key>`; `root_certificates` turns on TLS.
- Deadlines: every unary call has `timeout_s`; streams take their own.
- Retries: idempotent calls are retried on UNAVAILABLE by gRPC itself (service config).
- Resume: when a stream breaks, the client reconnects (to the next address, if several
  are given) with its last seq and hands each event over exactly once.

Errors surface as GatewayError carrying the gRPC code, the message, the ErrorInfo
reason and any BadRequest field violations, so callers can branch on `err.reason`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from cogmesh.common.v1 import events_pb2, resources_pb2
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc

DEFAULT_ADDRESS = "127.0.0.1:50051"
SERVICE = "cogmesh.gateway.v1.GatewayService"
IDEMPOTENT = ["GetSession", "ListSessions", "DeleteSession", "CancelTurn", "ListAgents", "ListModels"]
SERVICE_CONFIG = json.dumps(
    {
        "methodConfig": [
            {
                "name": [{"service": SERVICE, "method": m} for m in IDEMPOTENT],
                "retryPolicy": {
                    "maxAttempts": 4,
                    "initialBackoff": "0.1s",
                    "maxBackoff": "2s",
                    "backoffMultiplier": 2,
                    "retryableStatusCodes": ["UNAVAILABLE"],
                },
            }
        ]
    }
)
TERMINAL = ("final", "error")


def is_terminal(event: events_pb2.RuntimeEvent) -> bool:
    return event.WhichOneof("payload") in TERMINAL


class GatewayError(Exception):
    def __init__(
        self, code: grpc.StatusCode, message: str, reason: str = "", violations: list[tuple[str, str]] | None = None
    ):
        super().__init__(f"{code.name}: {message}")
        self.code, self.message, self.reason = code, message, reason
        self.violations = violations or []

    @classmethod
    def from_rpc(cls, err: grpc.aio.AioRpcError) -> GatewayError:
        reason, violations = "", []
        status = rpc_status.from_call(err)  # type: ignore[arg-type]
        for detail in status.details if status else []:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                reason = info.reason
            elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                bad = error_details_pb2.BadRequest()
                detail.Unpack(bad)
                violations = [(v.field, v.description) for v in bad.field_violations]
        return cls(err.code(), err.details() or err.code().name, reason, violations)

    @property
    def resumable(self) -> bool:
        """A broken stream worth reconnecting: the server went away or cut off a slow reader."""
        return self.code == grpc.StatusCode.UNAVAILABLE or self.reason == "SUBSCRIBER_TOO_SLOW"


@dataclass
class TurnResult:
    """Everything one turn streamed, and its outcome."""

    events: list[events_pb2.RuntimeEvent] = field(default_factory=list)

    @property
    def last(self) -> events_pb2.RuntimeEvent:
        return self.events[-1]

    @property
    def ok(self) -> bool:
        return bool(self.events) and self.last.HasField("final")

    @property
    def text(self) -> str:
        """The final answer, or what was streamed before an error."""
        if self.ok:
            return self.last.final.text
        return "".join(e.assistant_delta.text for e in self.events if e.HasField("assistant_delta"))

    @property
    def error(self) -> events_pb2.TurnError | None:
        return self.last.error if self.events and self.last.HasField("error") else None


class GatewayClient:
    """Async client; use as `async with GatewayClient(address) as client:`.

    `address` may list several gateways ("host1:50051,host2:50051"): streams that break
    resume on the next one.
    """

    def __init__(
        self,
        address: str | Sequence[str] = DEFAULT_ADDRESS,
        *,
        api_key: str = "",
        root_certificates: bytes | None = None,
        timeout_s: float = 10.0,
        max_resumes: int = 5,
    ):
        addresses = address.split(",") if isinstance(address, str) else list(address)
        self.addresses = [a.strip() for a in addresses if a.strip()]
        if not self.addresses:
            raise ValueError("address: give at least one gateway address")
        self.timeout_s, self.max_resumes = timeout_s, max_resumes
        self._metadata = (("authorization", f"Bearer {api_key}"),) if api_key else ()
        self._credentials = grpc.ssl_channel_credentials(root_certificates) if root_certificates else None
        self._current = 0
        self._channel, self._stub = self._connect(0)

    @property
    def address(self) -> str:
        return self.addresses[self._current]

    def _connect(self, index: int) -> tuple[grpc.aio.Channel, Any]:
        options = [("grpc.service_config", SERVICE_CONFIG), ("grpc.enable_retries", 1)]
        target = self.addresses[index]
        channel = (
            grpc.aio.secure_channel(target, self._credentials, options=options)
            if self._credentials
            else grpc.aio.insecure_channel(target, options=options)
        )
        return channel, gateway_pb2_grpc.GatewayServiceStub(channel)

    async def _failover(self) -> None:
        """Move to the next gateway (the same one when only one is known)."""
        await self._channel.close()
        self._current = (self._current + 1) % len(self.addresses)
        self._channel, self._stub = self._connect(self._current)

    async def __aenter__(self) -> GatewayClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._channel.close()

    async def _unary(self, method: str, request: Any) -> Any:
        try:
            return await getattr(self._stub, method)(request, timeout=self.timeout_s, metadata=self._metadata)
        except grpc.aio.AioRpcError as err:
            raise GatewayError.from_rpc(err) from err

    async def wait_ready(self, timeout_s: float) -> None:
        """Wait until the gateway accepts connections, or raise GatewayError(UNAVAILABLE)."""
        try:
            await asyncio.wait_for(self._channel.channel_ready(), timeout_s)
        except TimeoutError as exc:
            raise GatewayError(grpc.StatusCode.UNAVAILABLE, f"cannot reach the gateway at {self.address}") from exc

    # ------------------------------------------------------------------ sessions and catalogue

    async def create_session(self, agent: str = "", user_id: str = "", topic_id: str = "") -> resources_pb2.Session:
        request = gateway_pb2.CreateSessionRequest(agent=agent, user_id=user_id, topic_id=topic_id)
        return (await self._unary("CreateSession", request)).session  # type: ignore[no-any-return]

    async def get_session(self, session_id: str) -> resources_pb2.Session:
        reply = await self._unary("GetSession", gateway_pb2.GetSessionRequest(session_id=session_id))
        return reply.session  # type: ignore[no-any-return]

    async def list_sessions(self, page_size: int = 50, page_token: str = "") -> gateway_pb2.ListSessionsResponse:
        request = gateway_pb2.ListSessionsRequest(page_size=page_size, page_token=page_token)
        return await self._unary("ListSessions", request)  # type: ignore[no-any-return]

    async def delete_session(self, session_id: str) -> bool:
        reply = await self._unary("DeleteSession", gateway_pb2.DeleteSessionRequest(session_id=session_id))
        return bool(reply.deleted)

    async def cancel_turn(self, session_id: str, turn_id: str = "") -> str:
        """Cancel the running turn; returns the turn signalled, or "" when none was running."""
        reply = await self._unary("CancelTurn", gateway_pb2.CancelTurnRequest(session_id=session_id, turn_id=turn_id))
        return str(reply.turn_id) if reply.cancelled else ""

    async def list_models(self, provider: str = "") -> gateway_pb2.ListModelsResponse:
        return await self._unary("ListModels", gateway_pb2.ListModelsRequest(provider=provider))  # type: ignore[no-any-return]

    async def list_agents(self) -> gateway_pb2.ListAgentsResponse:
        return await self._unary("ListAgents", gateway_pb2.ListAgentsRequest())  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ turns and streams

    async def send_message(
        self, session_id: str, content: str, *, model: str = "", timeout_s: float | None = 300.0
    ) -> AsyncIterator[events_pb2.RuntimeEvent]:
        """Start a turn and yield its events until its final or error event.

        If the stream breaks after the turn started, the client follows the session
        from its last seq until the turn ends; the turn itself keeps running server-side.
        """
        request = gateway_pb2.SendMessageRequest(session_id=session_id, content=content, model=model)
        cursor, turn_id = 0, ""
        try:
            async for response in self._stub.SendMessage(request, timeout=timeout_s, metadata=self._metadata):
                for event in response.events:
                    cursor, turn_id = event.seq, event.turn_id
                    yield event
                    if is_terminal(event):
                        return
        except grpc.aio.AioRpcError as err:
            error = GatewayError.from_rpc(err)
            # Before the first event we cannot know whether the turn started: retrying could run it twice.
            if not turn_id or not error.resumable:
                raise error from err
        async for event in self.subscribe(session_id, cursor):
            if event.turn_id == turn_id:
                yield event
                if is_terminal(event):
                    return

    async def run(self, session_id: str, content: str, *, model: str = "") -> TurnResult:
        """Run one turn to its end and collect it: `(await client.run(sid, "hi")).text`."""
        result = TurnResult()
        async for event in self.send_message(session_id, content, model=model):
            result.events.append(event)
        return result

    async def subscribe(
        self, session_id: str, after_seq: int = 0, *, stop_when_idle: bool = False
    ) -> AsyncIterator[events_pb2.RuntimeEvent]:
        """Replay the session's events after `after_seq`, then follow live ones.

        Heartbeats are absorbed; a broken stream is resumed from the last seq seen, so each
        event is handed over once, in order.
        """
        cursor, resumes = after_seq, 0
        while True:
            request = gateway_pb2.SubscribeRequest(
                session_id=session_id, after_seq=cursor, stop_when_idle=stop_when_idle
            )
            try:
                async for response in self._stub.Subscribe(request, metadata=self._metadata):
                    resumes = 0
                    for event in response.events:
                        if event.seq > cursor:
                            cursor = event.seq
                            yield event
                return
            except grpc.aio.AioRpcError as err:
                error = GatewayError.from_rpc(err)
                if not error.resumable or resumes >= self.max_resumes:
                    raise error from err
                resumes += 1
                await asyncio.sleep(min(0.1 * 2**resumes, 2.0))
                if error.code == grpc.StatusCode.UNAVAILABLE:
                    await self._failover()
