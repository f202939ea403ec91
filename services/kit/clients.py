"""Channels to the other services: deadlines on every call, tracing, keepalive, retries."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from opentelemetry.instrumentation.grpc import aio_client_interceptors

from cogmesh.context.v1 import context_pb2_grpc
from cogmesh.models.v1 import models_pb2_grpc
from cogmesh.policy.v1 import policy_pb2_grpc
from cogmesh.runtime.v1 import runtime_pb2_grpc
from cogmesh.sessions.v1 import sessions_pb2_grpc
from services.kit.config import Settings
from services.kit.errors import from_dependency

CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    # Internal peers come back within seconds of a restart: retry the connection quickly.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]

# Reads are idempotent, so gRPC may retry them on UNAVAILABLE; writes are not retried here.
_RETRYABLE_READS = [
    {"service": "cogmesh.models.v1.ModelsService", "method": "ResolveModel"},
    {"service": "cogmesh.models.v1.ModelsService", "method": "ListModels"},
    {"service": "cogmesh.models.v1.ModelsService", "method": "ListProviders"},
    {"service": "cogmesh.models.v1.ModelsService", "method": "ListAliases"},
    {"service": "cogmesh.context.v1.ContextService"},
    {"service": "cogmesh.policy.v1.PolicyService"},
    {"service": "cogmesh.sessions.v1.SessionsService", "method": "GetSession"},
    {"service": "cogmesh.sessions.v1.SessionsService", "method": "ListSessions"},
    {"service": "cogmesh.sessions.v1.SessionsService", "method": "ListMessages"},
    {"service": "cogmesh.sessions.v1.SessionsService", "method": "LookupSession"},
    {"service": "cogmesh.sessions.v1.SessionsService", "method": "GetTurnLease"},
    {"service": "cogmesh.sessions.v1.SessionsService", "method": "ListGoals"},
    {"service": "cogmesh.sessions.v1.SessionsService", "method": "GetCheckpoint"},
    {"service": "cogmesh.sessions.v1.SessionsService", "method": "ListCheckpoints"},
    {"service": "cogmesh.sessions.v1.SessionsService", "method": "GetRehydrationPayload"},
]
SERVICE_CONFIG = json.dumps(
    {
        # Spread calls over every address a name resolves to (dns:/// in compose or without a mesh).
        "loadBalancingConfig": [{"round_robin": {}}],
        "methodConfig": [
            {
                "name": _RETRYABLE_READS,
                "retryPolicy": {
                    "maxAttempts": 3,
                    "initialBackoff": "0.05s",
                    "maxBackoff": "0.5s",
                    "backoffMultiplier": 2,
                    "retryableStatusCodes": ["UNAVAILABLE"],
                },
            }
        ],
    }
)


class _DefaultDeadline(grpc.aio.UnaryUnaryClientInterceptor, grpc.aio.UnaryStreamClientInterceptor):
    """Gives every call without an explicit timeout the configured deadline."""

    def __init__(self, unary_s: float, stream_s: float):
        self._unary_s = unary_s
        self._stream_s = stream_s

    async def intercept_unary_unary(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        if details.timeout is None:
            details = details._replace(timeout=self._unary_s)
        return await continuation(details, request)

    async def intercept_unary_stream(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        if details.timeout is None:
            details = details._replace(timeout=self._stream_s)
        return await continuation(details, request)


def open_channel(address: str, settings: Settings) -> grpc.aio.Channel:
    interceptors = [_DefaultDeadline(settings.call_timeout_s, settings.turn_timeout_s), *aio_client_interceptors()]
    options = [*CHANNEL_OPTIONS, ("grpc.service_config", SERVICE_CONFIG), ("grpc.enable_retries", 1)]
    return grpc.aio.insecure_channel(address, options=options, interceptors=interceptors)


class Clients:
    """Stubs to the other services of the suite, each channel opened on first use."""

    def __init__(self, settings: Settings):
        self._settings = settings
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs: dict[str, Any] = {}

    @property
    def call_timeout_s(self) -> float:
        """The deadline of an internal unary call (COGMESH_CALL_TIMEOUT_S)."""
        return self._settings.call_timeout_s

    def _stub(self, address: str, stub_class: Callable[[grpc.aio.Channel], Any]) -> Any:
        key = f"{stub_class.__name__}@{address}"
        if key not in self._stubs:
            if address not in self._channels:
                self._channels[address] = open_channel(address, self._settings)
            self._stubs[key] = stub_class(self._channels[address])
        return self._stubs[key]

    @property
    def models(self) -> models_pb2_grpc.ModelsServiceStub:
        return self._stub(self._settings.models_addr, models_pb2_grpc.ModelsServiceStub)  # type: ignore[no-any-return]

    @property
    def context(self) -> context_pb2_grpc.ContextServiceStub:
        return self._stub(self._settings.context_addr, context_pb2_grpc.ContextServiceStub)  # type: ignore[no-any-return]

    @property
    def policy(self) -> policy_pb2_grpc.PolicyServiceStub:
        return self._stub(self._settings.policy_addr, policy_pb2_grpc.PolicyServiceStub)  # type: ignore[no-any-return]

    @property
    def sessions(self) -> sessions_pb2_grpc.SessionsServiceStub:
        return self._stub(self._settings.sessions_addr, sessions_pb2_grpc.SessionsServiceStub)  # type: ignore[no-any-return]

    @property
    def runtime(self) -> runtime_pb2_grpc.RuntimeServiceStub:
        return self._stub(self._settings.runtime_addr, runtime_pb2_grpc.RuntimeServiceStub)  # type: ignore[no-any-return]

    async def ready(self, service: str, timeout_s: float) -> bool:
        """Wait (bounded) until the channel to `service` is connected, e.g. after that service restarted.

        Streams that must not be retried blindly call this first instead of failing fast on a
        channel still backing off from the restart.
        """
        address = getattr(self._settings, f"{service}_addr")
        if address not in self._channels:
            self._channels[address] = open_channel(address, self._settings)
        channel = self._channels[address]
        if channel.get_state(try_to_connect=True) == grpc.ChannelConnectivity.READY:
            return True
        try:
            await asyncio.wait_for(channel.channel_ready(), timeout_s)
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
        self._stubs.clear()


async def call(dependency: str, rpc: Callable[[Any], Awaitable[Any]], request: Any) -> Any:
    """Call another service; its failure becomes this service's answer (see errors.from_dependency)."""
    try:
        return await rpc(request)
    except grpc.aio.AioRpcError as exc:
        raise from_dependency(exc, dependency) from exc
