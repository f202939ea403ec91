"""Channels to the other services: deadlines on every call, tracing, keepalive, retries,
and a bounded wait for a peer that is reconnecting.

An address may name several replicas (addresses.py: a list, or a dns: name): calls are then
spread over them with gRPC's round_robin, skipping a replica whose grpc.health.v1 status is
not SERVING, and RuntimeService.CancelTurn goes to all of them.

A peer that restarts is SERVING again before its callers' channels notice: they are
still backing off from the failed reconnects (up to 1 s here). A call made then would
fail at once with UNAVAILABLE ("connections to all backends failing"). So a call whose
caller did not set `wait_for_ready` first waits for its channel to be READY, for at most
half its deadline and half the internal call deadline (`ready_budget_s`: 2.5 s with the
default COGMESH_CALL_TIMEOUT_S of 5 s), then goes out. A peer that is still not there
fails the call fast with the channel's own UNAVAILABLE (e.g. "Connection refused"),
which `call` reports as that dependency being unavailable. A call right behind a
`Clients.ready` that gave up (within `READY_HOLDOFF_S`) does not wait again: a caller's
explicit ready-wait is not followed by a second one. Calls that give up leave no such
mark: a peer can be back (a light service restarts in 0.3 s) before the next call.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
from opentelemetry.instrumentation.grpc import aio_client_interceptors

from cogmesh.context.v1 import context_pb2_grpc
from cogmesh.memory.v1 import memory_pb2_grpc
from cogmesh.models.v1 import models_pb2_grpc
from cogmesh.policy.v1 import policy_pb2_grpc
from cogmesh.runtime.v1 import runtime_pb2, runtime_pb2_grpc
from cogmesh.sessions.v1 import sessions_pb2_grpc
from services.kit import addresses
from services.kit.config import Settings
from services.kit.errors import from_dependency

# Channels to servers outside the suite (ToolService, HookService, in any language): keepalive as
# a gRPC server with default settings accepts it (pings at most every 5 minutes, only with calls in
# flight), or it would answer too_many_pings and drop the connection.
PEER_CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.keepalive_time_ms", 300_000),
    ("grpc.keepalive_timeout_ms", 20_000),
    ("grpc.keepalive_permit_without_calls", 0),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    # A tool server's result may be megabytes: the loop archives what is over the agent's limit.
    ("grpc.max_receive_message_length", 64 << 20),
]


def channel_options(settings: Settings) -> list[tuple[str, Any]]:
    """Keepalive as the servers expect it (server.server_options accepts these pings), fast reconnects."""
    return [
        ("grpc.keepalive_time_ms", int(settings.keepalive_time_s * 1000)),
        ("grpc.keepalive_timeout_ms", int(settings.keepalive_timeout_s * 1000)),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        # Internal peers come back within seconds of a restart: retry the connection quickly.
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.min_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 1000),
        ("grpc.max_receive_message_length", settings.max_message_bytes),
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
    {"service": "cogmesh.sessions.v1.SessionsService", "method": "ListTurns"},
    {"service": "cogmesh.sessions.v1.SessionsService", "method": "LookupSession"},
    {"service": "cogmesh.sessions.v1.SessionsService", "method": "GetTurnLease"},
    {"service": "cogmesh.sessions.v1.SessionsService", "method": "ListGoals"},
    {"service": "cogmesh.sessions.v1.SessionsService", "method": "GetCheckpoint"},
    {"service": "cogmesh.sessions.v1.SessionsService", "method": "ListCheckpoints"},
    {"service": "cogmesh.sessions.v1.SessionsService", "method": "GetRehydrationPayload"},
    {"service": "cogmesh.memory.v1.MemoryService", "method": "GetMemory"},
    {"service": "cogmesh.memory.v1.MemoryService", "method": "ListMemories"},
    {"service": "cogmesh.memory.v1.MemoryService", "method": "SearchMemories"},
    {"service": "cogmesh.memory.v1.MemoryService", "method": "ListNamespaces"},
]
_SERVICE_CONFIG: dict[str, Any] = {
    # Spread calls over every replica the address names (a list, or dns:/// in compose or without a mesh).
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
SERVICE_CONFIG = json.dumps(_SERVICE_CONFIG)
# Over several replicas, each connection also watches its server's grpc.health.v1 status: a replica
# that drains (NOT_SERVING) gets no new calls at once, while its calls in flight finish. Not for one
# address: behind a mesh's virtual address one pod's drain would stop calls to all of them.
REPLICAS_SERVICE_CONFIG = json.dumps(_SERVICE_CONFIG | {"healthCheckConfig": {"serviceName": ""}})


# A call waits for a reconnecting peer for at most this share of its deadline (and of the
# internal call deadline), so a peer that stays down is reported with time to spare.
READY_SHARE = 0.5
# After Clients.ready gave up, calls on the channel within this many seconds fail fast.
READY_HOLDOFF_S = 0.5


def ready_budget_s(timeout_s: float, call_timeout_s: float) -> float:
    """How long a call with deadline `timeout_s` waits for its channel to be READY."""
    return min(timeout_s, call_timeout_s) * READY_SHARE


class _Readiness:
    """Waits, bounded, for one channel to be READY; remembers when `Clients.ready` last gave up."""

    def __init__(self) -> None:
        self.channel: grpc.aio.Channel | None = None  # set once the channel exists
        self._gave_up_at = -math.inf

    async def wait(self, budget_s: float, mark: bool = False) -> bool:
        """True when the channel is READY now or becomes READY within `budget_s`.

        With `mark`, a wait that gives up makes the calls of the next READY_HOLDOFF_S fail fast.
        """
        channel = self.channel
        if channel is None:
            return False
        if channel.get_state(try_to_connect=True) == grpc.ChannelConnectivity.READY:
            return True
        loop = asyncio.get_running_loop()
        if budget_s <= 0 or loop.time() - self._gave_up_at < READY_HOLDOFF_S:
            return False  # just found down: fail fast with the channel's own reason
        try:
            async with asyncio.timeout(budget_s):
                await channel.channel_ready()
        except TimeoutError:
            if mark:
                self._gave_up_at = loop.time()
            return False
        return True


class _CallDefaults:
    """Gives a call without an explicit timeout the configured deadline and, unless the caller
    set wait_for_ready, waits (bounded, within that deadline) for the channel to be READY."""

    def __init__(self, default_s: float, call_timeout_s: float, readiness: _Readiness):
        self._default_s = default_s
        self._call_timeout_s = call_timeout_s
        self._readiness = readiness

    async def _prepared(self, details: Any) -> Any:
        timeout = self._default_s if details.timeout is None else details.timeout
        if details.wait_for_ready is None:  # an explicit choice either way is the caller's
            loop = asyncio.get_running_loop()
            started = loop.time()
            if not await self._readiness.wait(ready_budget_s(timeout, self._call_timeout_s)):
                details = details._replace(wait_for_ready=False)
            timeout = max(timeout - (loop.time() - started), 0.0)
        return details._replace(timeout=timeout)


# Two objects, not one class with both methods: grpc.aio files an interceptor under the first
# of its kinds it matches, so one object would never see server-streaming calls.
class _UnaryDefaults(_CallDefaults, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        return await continuation(await self._prepared(details), request)


class _StreamDefaults(_CallDefaults, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        return await continuation(await self._prepared(details), request)


def _open(address: str, settings: Settings) -> tuple[grpc.aio.Channel, _Readiness]:
    # No interceptor on bidirectional streams. The suite's are long-lived and multiplex many sessions
    # (AppendEventsStream, WatchEvents; their callers trace each call on them): a span of the whole stream
    # says nothing, and an intercepted stream hands each write to a queue that a task of grpc's empties,
    # so it waits for the event loop to turn: a runtime busy with a model's stream held its appends 2.6-4 ms.
    readiness = _Readiness()
    interceptors = [
        _UnaryDefaults(settings.call_timeout_s, settings.call_timeout_s, readiness),
        _StreamDefaults(settings.turn_timeout_s, settings.call_timeout_s, readiness),
        *[i for i in aio_client_interceptors() if not isinstance(i, grpc.aio.StreamStreamClientInterceptor)],
    ]
    service_config = REPLICAS_SERVICE_CONFIG if addresses.names_replicas(address) else SERVICE_CONFIG
    options = [*channel_options(settings), ("grpc.service_config", service_config), ("grpc.enable_retries", 1)]
    target = addresses.channel_target(address)
    readiness.channel = grpc.aio.insecure_channel(target, options=options, interceptors=interceptors)
    return readiness.channel, readiness


def open_channel(address: str, settings: Settings) -> grpc.aio.Channel:
    return _open(address, settings)[0]


T = TypeVar("T")


class Clients:
    """Stubs to the other services of the suite, each channel opened on first use."""

    def __init__(self, settings: Settings):
        self._settings = settings
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._readiness: dict[str, _Readiness] = {}
        self._stubs: dict[str, Any] = {}
        self._policy_api: Any = None

    @property
    def policy_api(self) -> Any:
        """What answers the policy's decision RPCs (BeginTurn, RunInterceptors, CheckToolCall(s),
        CheckToolResult): the PolicyService stub, unless the runtime set its local engine here."""
        return self._policy_api if self._policy_api is not None else self.policy

    @policy_api.setter
    def policy_api(self, api: Any) -> None:
        self._policy_api = api

    @property
    def settings(self) -> Settings:
        return self._settings

    @property
    def call_timeout_s(self) -> float:
        """The deadline of an internal unary call (COGMESH_CALL_TIMEOUT_S)."""
        return self._settings.call_timeout_s

    def _channel(self, address: str) -> grpc.aio.Channel:
        if address not in self._channels:
            self._channels[address], self._readiness[address] = _open(address, self._settings)
        return self._channels[address]

    def _stub(self, address: str, stub_class: Callable[[grpc.aio.Channel], Any]) -> Any:
        key = f"{stub_class.__name__}@{address}"
        if key not in self._stubs:
            self._stubs[key] = stub_class(self._channel(address))
        return self._stubs[key]

    def stub_at(self, address: str, stub_class: Callable[[grpc.aio.Channel], T]) -> T:
        """A stub to one particular replica (host:port), e.g. the runtime running a given turn."""
        return self._stub(address, stub_class)  # type: ignore[no-any-return]

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
        address = self._settings.runtime_addr
        key = f"runtime@{address}"
        if key not in self._stubs:
            stub = runtime_pb2_grpc.RuntimeServiceStub(self._channel(address))
            if addresses.names_replicas(address):
                stub.CancelTurn = _CancelOnEveryReplica(self, address)
            self._stubs[key] = stub
        return self._stubs[key]  # type: ignore[no-any-return]

    @property
    def memory(self) -> memory_pb2_grpc.MemoryServiceStub:
        return self._stub(self._settings.memory_addr, memory_pb2_grpc.MemoryServiceStub)  # type: ignore[no-any-return]

    async def ready(self, service: str, timeout_s: float) -> bool:
        """Wait (bounded) until the channel to `service` is connected, e.g. after that service restarted.

        Every call without wait_for_ready now waits like this by itself (for part of its
        deadline); this is the same wait, with the caller's bound. A wait that gives up here
        spares the call that follows it a second one (READY_HOLDOFF_S).
        """
        address = getattr(self._settings, f"{service}_addr")
        self._channel(address)
        return await self._readiness[address].wait(timeout_s, mark=True)

    async def forget(self, address: str) -> None:
        """Close the channel to `address` (a replica that went away)."""
        self._stubs = {key: stub for key, stub in self._stubs.items() if not key.endswith(f"@{address}")}
        self._readiness.pop(address, None)
        channel = self._channels.pop(address, None)
        if channel is not None:
            await channel.close()

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
        self._readiness.clear()
        self._stubs.clear()


class _CancelOnEveryReplica:
    """RuntimeService.CancelTurn when the runtime address names several replicas.

    Only the replica running the turn can stop it, and round_robin would give the call to any
    one of them; so it goes to each replica the address names now (a dns: name is resolved),
    and the turn counts as cancelled when one of them had it. It fails only when no replica
    answered. (Behind a mesh's one virtual address the mesh picks a pod: list the replicas or
    use a headless Service's dns:/// name.)
    """

    def __init__(self, clients: Clients, address: str) -> None:
        self._clients, self._address = clients, address
        self._replicas: set[str] = set()

    async def __call__(self, request: runtime_pb2.CancelTurnRequest, **options: Any) -> runtime_pb2.CancelTurnResponse:
        replicas = await addresses.resolve(self._address)
        for gone in self._replicas - set(replicas):
            await self._clients.forget(gone)
        self._replicas = set(replicas)
        options.setdefault("wait_for_ready", False)  # a replica that is down runs no turn
        stubs = [self._clients._stub(replica, runtime_pb2_grpc.RuntimeServiceStub) for replica in replicas]
        answers = await asyncio.gather(*(stub.CancelTurn(request, **options) for stub in stubs), return_exceptions=True)
        failures = [answer for answer in answers if isinstance(answer, BaseException)]
        if any(not isinstance(answer, BaseException) and answer.cancelled for answer in answers):
            return runtime_pb2.CancelTurnResponse(cancelled=True)
        if failures and len(failures) == len(answers):
            raise failures[0]
        return runtime_pb2.CancelTurnResponse(cancelled=False)


async def call(dependency: str, rpc: Callable[[Any], Awaitable[Any]], request: Any) -> Any:
    """Call another service; its failure becomes this service's answer (see errors.from_dependency)."""
    try:
        return await rpc(request)
    except grpc.aio.AioRpcError as exc:
        raise from_dependency(exc, dependency) from exc
