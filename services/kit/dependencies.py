"""Typed clients of the suite's own services: one per service, the only way to call one.

A method takes and returns that RPC's protobuf messages and goes out on the kit's channel
(services/kit/clients.py: its deadline, wait for a reconnecting peer, retries of reads,
tracing). Whatever the dependency answers when it fails, the caller gets one error type:
`DependencyError` (services/kit/errors.py), whose `code` and `to_status()` are this
service's answer (`from_dependency`) and which keeps what the dependency said: its status
code, message, ErrorInfo reason and every detail (BadRequest, RetryInfo...). A streaming
RPC fails the same way at any point of the stream.

`SessionsClient.of(clients)` calls through `clients.sessions` (looked up at each call, so
channels open on first use); `RuntimeClient.at(clients, address)` reaches one replica.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Generic, Self, TypedDict, TypeVar

import grpc
from google.protobuf.message import Message
from typing_extensions import Unpack

from cogmesh.context.v1 import context_pb2
from cogmesh.memory.v1 import memory_pb2
from cogmesh.models.v1 import models_pb2
from cogmesh.policy.v1 import policy_pb2
from cogmesh.runtime.v1 import runtime_pb2, runtime_pb2_grpc
from cogmesh.sessions.v1 import (
    agents_pb2,
    agents_pb2_grpc,
    schedules_pb2,
    schedules_pb2_grpc,
    sessions_pb2,
    webhooks_pb2,
    webhooks_pb2_grpc,
)
from services.kit.clients import Clients
from services.kit.errors import DependencyError, from_dependency

Req = TypeVar("Req", bound=Message)
Resp = TypeVar("Resp", bound=Message)


class CallOptions(TypedDict, total=False):
    """What a call may set besides its request; unset, the channel's defaults apply (services/kit/clients.py)."""

    timeout: float | None
    metadata: grpc.aio.Metadata | Sequence[tuple[str, str | bytes]] | None
    wait_for_ready: bool | None


class Dependency:
    """A typed client of one service; `name` is the dependency its errors name."""

    name: ClassVar[str]

    def __init__(self, stub: Callable[[], Any]) -> None:
        self._stub = stub  # returns the grpc stub (or a test's stand-in) at each call

    @classmethod
    def of(cls, clients: Clients) -> Self:
        """The client over `clients`' stub of this service."""
        return cls(lambda: getattr(clients, cls.name))

    def rpc(self, method: str) -> Any:
        return getattr(self._stub(), method)

    def failed(self, error: grpc.aio.AioRpcError) -> DependencyError:
        return from_dependency(error, self.name)


class _Method(Generic[Req, Resp]):
    name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name


class Unary(_Method[Req, Resp]):
    """A unary RPC of a typed client."""

    def __get__(self, client: Dependency, owner: type | None = None) -> UnaryCall[Req, Resp]:
        return UnaryCall(client, self.name)


class ServerStream(_Method[Req, Resp]):
    """A server-streaming RPC of a typed client."""

    def __get__(self, client: Dependency, owner: type | None = None) -> ServerStreamCall[Req, Resp]:
        return ServerStreamCall(client, self.name)


class Bidi(_Method[Req, Resp]):
    """A bidirectional-streaming RPC of a typed client."""

    def __get__(self, client: Dependency, owner: type | None = None) -> BidiCall[Req, Resp]:
        return BidiCall(client, self.name)


class UnaryCall(Generic[Req, Resp]):
    def __init__(self, client: Dependency, method: str) -> None:
        self._client, self._method = client, method

    async def __call__(self, request: Req, **options: Unpack[CallOptions]) -> Resp:
        rpc = self._client.rpc(self._method)
        try:
            reply: Resp = await rpc(request, **options)
        except grpc.aio.AioRpcError as exc:
            raise self._client.failed(exc) from exc
        return reply


class ServerStreamCall(Generic[Req, Resp]):
    def __init__(self, client: Dependency, method: str) -> None:
        self._client, self._method = client, method

    def __call__(self, request: Req, **options: Unpack[CallOptions]) -> Responses[Resp]:
        return Responses(self._client, self._client.rpc(self._method)(request, **options))


class BidiCall(Generic[Req, Resp]):
    def __init__(self, client: Dependency, method: str) -> None:
        self._client, self._method = client, method

    def __call__(self, **options: Unpack[CallOptions]) -> Exchange[Req, Resp]:
        return Exchange(self._client, self._client.rpc(self._method)(**options))


class Responses(Generic[Resp]):
    """A server stream's responses (`async for`, or `read()` up to None); a failure at any
    point raises DependencyError. `cancel()` ends the call."""

    def __init__(self, client: Dependency, call: Any) -> None:
        self._client, self._call = client, call
        self._responses: Any = None

    def __aiter__(self) -> Responses[Resp]:
        return self

    async def __anext__(self) -> Resp:
        if self._responses is None:
            self._responses = self._call.__aiter__()
        try:
            response: Resp = await self._responses.__anext__()
        except grpc.aio.AioRpcError as exc:
            raise self._client.failed(exc) from exc
        return response

    async def read(self) -> Resp | None:
        """The next response; None at the end of the stream."""
        try:
            response = await self._call.read()
        except grpc.aio.AioRpcError as exc:
            raise self._client.failed(exc) from exc
        return None if response is grpc.aio.EOF else response

    def cancel(self) -> bool:
        return bool(self._call.cancel())


class Exchange(Responses[Resp], Generic[Req, Resp]):
    """A bidirectional stream: `write` requests, `done_writing`, read the responses as a server stream's.
    A write to a stream that ended raises what grpc raises (InvalidStateError, UsageError) or DependencyError."""

    async def write(self, request: Req) -> None:
        try:
            await self._call.write(request)
        except grpc.aio.AioRpcError as exc:
            raise self._client.failed(exc) from exc

    async def done_writing(self) -> None:
        try:
            await self._call.done_writing()
        except grpc.aio.AioRpcError as exc:
            raise self._client.failed(exc) from exc


class SessionsClient(Dependency):
    """SessionsService."""

    name = "sessions"

    CreateSession = Unary[sessions_pb2.CreateSessionRequest, sessions_pb2.CreateSessionResponse]()
    GetSession = Unary[sessions_pb2.GetSessionRequest, sessions_pb2.GetSessionResponse]()
    ListSessions = Unary[sessions_pb2.ListSessionsRequest, sessions_pb2.ListSessionsResponse]()
    DeleteSession = Unary[sessions_pb2.DeleteSessionRequest, sessions_pb2.DeleteSessionResponse]()
    AppendMessages = Unary[sessions_pb2.AppendMessagesRequest, sessions_pb2.AppendMessagesResponse]()
    ListMessages = Unary[sessions_pb2.ListMessagesRequest, sessions_pb2.ListMessagesResponse]()
    AcquireTurnLease = Unary[sessions_pb2.AcquireTurnLeaseRequest, sessions_pb2.AcquireTurnLeaseResponse]()
    ReleaseTurnLease = Unary[sessions_pb2.ReleaseTurnLeaseRequest, sessions_pb2.ReleaseTurnLeaseResponse]()
    LookupSession = Unary[sessions_pb2.LookupSessionRequest, sessions_pb2.LookupSessionResponse]()
    UpdateSession = Unary[sessions_pb2.UpdateSessionRequest, sessions_pb2.UpdateSessionResponse]()
    CloseAllSessions = Unary[sessions_pb2.CloseAllSessionsRequest, sessions_pb2.CloseAllSessionsResponse]()
    RenewTurnLease = Unary[sessions_pb2.RenewTurnLeaseRequest, sessions_pb2.RenewTurnLeaseResponse]()
    GetTurnLease = Unary[sessions_pb2.GetTurnLeaseRequest, sessions_pb2.GetTurnLeaseResponse]()
    UpdateSummary = Unary[sessions_pb2.UpdateSummaryRequest, sessions_pb2.UpdateSummaryResponse]()
    SaveGoal = Unary[sessions_pb2.SaveGoalRequest, sessions_pb2.SaveGoalResponse]()
    ListGoals = Unary[sessions_pb2.ListGoalsRequest, sessions_pb2.ListGoalsResponse]()
    SetPhase = Unary[sessions_pb2.SetPhaseRequest, sessions_pb2.SetPhaseResponse]()
    WriteCheckpoint = Unary[sessions_pb2.WriteCheckpointRequest, sessions_pb2.WriteCheckpointResponse]()
    GetCheckpoint = Unary[sessions_pb2.GetCheckpointRequest, sessions_pb2.GetCheckpointResponse]()
    ListCheckpoints = Unary[sessions_pb2.ListCheckpointsRequest, sessions_pb2.ListCheckpointsResponse]()
    DecideCheckpoint = Unary[sessions_pb2.DecideCheckpointRequest, sessions_pb2.DecideCheckpointResponse]()
    ConsumeCheckpoint = Unary[sessions_pb2.ConsumeCheckpointRequest, sessions_pb2.ConsumeCheckpointResponse]()
    GetRehydrationPayload = Unary[
        sessions_pb2.GetRehydrationPayloadRequest, sessions_pb2.GetRehydrationPayloadResponse
    ]()
    AppendEvents = Unary[sessions_pb2.AppendEventsRequest, sessions_pb2.AppendEventsResponse]()
    ReadEvents = ServerStream[sessions_pb2.ReadEventsRequest, sessions_pb2.ReadEventsResponse]()
    GetEventLogState = Unary[sessions_pb2.GetEventLogStateRequest, sessions_pb2.GetEventLogStateResponse]()
    GetJournal = Unary[sessions_pb2.GetJournalRequest, sessions_pb2.GetJournalResponse]()
    RenewTurnLeases = Unary[sessions_pb2.RenewTurnLeasesRequest, sessions_pb2.RenewTurnLeasesResponse]()
    ClaimOrphanedTurns = Unary[sessions_pb2.ClaimOrphanedTurnsRequest, sessions_pb2.ClaimOrphanedTurnsResponse]()
    InterruptTurn = Unary[sessions_pb2.InterruptTurnRequest, sessions_pb2.InterruptTurnResponse]()
    AppendEventsStream = Bidi[sessions_pb2.AppendEventsStreamRequest, sessions_pb2.AppendEventsStreamResponse]()
    WatchEvents = Bidi[sessions_pb2.WatchEventsRequest, sessions_pb2.WatchEventsResponse]()
    AnswerPause = Unary[sessions_pb2.AnswerPauseRequest, sessions_pb2.AnswerPauseResponse]()
    ListTurns = Unary[sessions_pb2.ListTurnsRequest, sessions_pb2.ListTurnsResponse]()
    ForkSession = Unary[sessions_pb2.ForkSessionRequest, sessions_pb2.ForkSessionResponse]()
    RewindSession = Unary[sessions_pb2.RewindSessionRequest, sessions_pb2.RewindSessionResponse]()


class RuntimeClient(Dependency):
    """RuntimeService (CancelTurn goes to every replica the address names: services/kit/clients.py)."""

    name = "runtime"

    @classmethod
    def at(cls, clients: Clients, address: str) -> RuntimeClient:
        """The client of one replica (host:port), e.g. the one running a given turn."""
        return cls(lambda: clients.stub_at(address, runtime_pb2_grpc.RuntimeServiceStub))

    StartTurn = Unary[runtime_pb2.StartTurnRequest, runtime_pb2.StartTurnResponse]()
    ContinueTurn = Unary[runtime_pb2.ContinueTurnRequest, runtime_pb2.ContinueTurnResponse]()
    CancelTurn = Unary[runtime_pb2.CancelTurnRequest, runtime_pb2.CancelTurnResponse]()
    AdoptTurn = Unary[runtime_pb2.AdoptTurnRequest, runtime_pb2.AdoptTurnResponse]()
    ListRuntimes = Unary[runtime_pb2.ListRuntimesRequest, runtime_pb2.ListRuntimesResponse]()
    ListTools = Unary[runtime_pb2.ListToolsRequest, runtime_pb2.ListToolsResponse]()


class PolicyClient(Dependency):
    """PolicyService (the service itself; `Clients.policy_api` may answer decisions locally)."""

    name = "policy"

    CheckToolCall = Unary[policy_pb2.CheckToolCallRequest, policy_pb2.CheckToolCallResponse]()
    CheckToolCalls = Unary[policy_pb2.CheckToolCallsRequest, policy_pb2.CheckToolCallsResponse]()
    CheckToolResult = Unary[policy_pb2.CheckToolResultRequest, policy_pb2.CheckToolResultResponse]()
    BeginTurn = Unary[policy_pb2.BeginTurnRequest, policy_pb2.BeginTurnResponse]()
    RunInterceptors = Unary[policy_pb2.RunInterceptorsRequest, policy_pb2.RunInterceptorsResponse]()
    ResolveRole = Unary[policy_pb2.ResolveRoleRequest, policy_pb2.ResolveRoleResponse]()
    HandleCommand = Unary[policy_pb2.HandleCommandRequest, policy_pb2.HandleCommandResponse]()
    SelectTools = Unary[policy_pb2.SelectToolsRequest, policy_pb2.SelectToolsResponse]()
    GetPolicyStatus = Unary[policy_pb2.GetPolicyStatusRequest, policy_pb2.GetPolicyStatusResponse]()
    WatchPolicy = ServerStream[policy_pb2.WatchPolicyRequest, policy_pb2.WatchPolicyResponse]()


class ContextClient(Dependency):
    """ContextService."""

    name = "context"

    BuildContext = Unary[context_pb2.BuildContextRequest, context_pb2.BuildContextResponse]()
    CompactHistory = Unary[context_pb2.CompactHistoryRequest, context_pb2.CompactHistoryResponse]()
    GetToolResponse = Unary[context_pb2.GetToolResponseRequest, context_pb2.GetToolResponseResponse]()
    ArchiveToolResult = Unary[context_pb2.ArchiveToolResultRequest, context_pb2.ArchiveToolResultResponse]()


class ModelsClient(Dependency):
    """ModelsService."""

    name = "models"

    ResolveModel = Unary[models_pb2.ResolveModelRequest, models_pb2.ResolveModelResponse]()
    ListModels = Unary[models_pb2.ListModelsRequest, models_pb2.ListModelsResponse]()
    ListProviders = Unary[models_pb2.ListProvidersRequest, models_pb2.ListProvidersResponse]()
    ListAliases = Unary[models_pb2.ListAliasesRequest, models_pb2.ListAliasesResponse]()
    AddModel = Unary[models_pb2.AddModelRequest, models_pb2.AddModelResponse]()
    RemoveModel = Unary[models_pb2.RemoveModelRequest, models_pb2.RemoveModelResponse]()
    WatchCatalog = ServerStream[models_pb2.WatchCatalogRequest, models_pb2.WatchCatalogResponse]()


class MemoryClient(Dependency):
    """MemoryService."""

    name = "memory"

    PutMemory = Unary[memory_pb2.PutMemoryRequest, memory_pb2.PutMemoryResponse]()
    GetMemory = Unary[memory_pb2.GetMemoryRequest, memory_pb2.GetMemoryResponse]()
    DeleteMemory = Unary[memory_pb2.DeleteMemoryRequest, memory_pb2.DeleteMemoryResponse]()
    ListMemories = Unary[memory_pb2.ListMemoriesRequest, memory_pb2.ListMemoriesResponse]()
    SearchMemories = Unary[memory_pb2.SearchMemoriesRequest, memory_pb2.SearchMemoriesResponse]()
    ListNamespaces = Unary[memory_pb2.ListNamespacesRequest, memory_pb2.ListNamespacesResponse]()


class ScheduleStoreClient(Dependency):
    """ScheduleStoreService, served by the sessions service."""

    name = "sessions"

    @classmethod
    def of(cls, clients: Clients) -> Self:
        return cls(lambda: clients.stub_at(clients.settings.sessions_addr, schedules_pb2_grpc.ScheduleStoreServiceStub))

    CreateSchedule = Unary[schedules_pb2.CreateScheduleRequest, schedules_pb2.CreateScheduleResponse]()
    GetSchedule = Unary[schedules_pb2.GetScheduleRequest, schedules_pb2.GetScheduleResponse]()
    ListSchedules = Unary[schedules_pb2.ListSchedulesRequest, schedules_pb2.ListSchedulesResponse]()
    UpdateSchedule = Unary[schedules_pb2.UpdateScheduleRequest, schedules_pb2.UpdateScheduleResponse]()
    DeleteSchedule = Unary[schedules_pb2.DeleteScheduleRequest, schedules_pb2.DeleteScheduleResponse]()
    ListDueSchedules = Unary[schedules_pb2.ListDueSchedulesRequest, schedules_pb2.ListDueSchedulesResponse]()
    PutScheduleRun = Unary[schedules_pb2.PutScheduleRunRequest, schedules_pb2.PutScheduleRunResponse]()
    ListScheduleRuns = Unary[schedules_pb2.ListScheduleRunsRequest, schedules_pb2.ListScheduleRunsResponse]()
    ListStaleScheduleRuns = Unary[
        schedules_pb2.ListStaleScheduleRunsRequest, schedules_pb2.ListStaleScheduleRunsResponse
    ]()


class WebhookStoreClient(Dependency):
    """WebhookStoreService, served by the sessions service."""

    name = "sessions"

    @classmethod
    def of(cls, clients: Clients) -> Self:
        return cls(lambda: clients.stub_at(clients.settings.sessions_addr, webhooks_pb2_grpc.WebhookStoreServiceStub))

    CreateWebhook = Unary[webhooks_pb2.CreateWebhookRequest, webhooks_pb2.CreateWebhookResponse]()
    GetWebhook = Unary[webhooks_pb2.GetWebhookRequest, webhooks_pb2.GetWebhookResponse]()
    ListWebhooks = Unary[webhooks_pb2.ListWebhooksRequest, webhooks_pb2.ListWebhooksResponse]()
    DeleteWebhook = Unary[webhooks_pb2.DeleteWebhookRequest, webhooks_pb2.DeleteWebhookResponse]()
    ListWebhookDeliveries = Unary[
        webhooks_pb2.ListWebhookDeliveriesRequest, webhooks_pb2.ListWebhookDeliveriesResponse
    ]()
    RedeliverWebhookDelivery = Unary[
        webhooks_pb2.RedeliverWebhookDeliveryRequest, webhooks_pb2.RedeliverWebhookDeliveryResponse
    ]()


class AgentStoreClient(Dependency):
    """AgentStoreService, served by the sessions service."""

    name = "sessions"

    @classmethod
    def of(cls, clients: Clients) -> Self:
        return cls(lambda: clients.stub_at(clients.settings.sessions_addr, agents_pb2_grpc.AgentStoreServiceStub))

    PutAgentVersion = Unary[agents_pb2.PutAgentVersionRequest, agents_pb2.PutAgentVersionResponse]()
    GetAgentVersion = Unary[agents_pb2.GetAgentVersionRequest, agents_pb2.GetAgentVersionResponse]()
    ListAgentVersions = Unary[agents_pb2.ListAgentVersionsRequest, agents_pb2.ListAgentVersionsResponse]()
    ListAgents = Unary[agents_pb2.ListAgentsRequest, agents_pb2.ListAgentsResponse]()
    DeleteAgent = Unary[agents_pb2.DeleteAgentRequest, agents_pb2.DeleteAgentResponse]()
    SetAgentAlias = Unary[agents_pb2.SetAgentAliasRequest, agents_pb2.SetAgentAliasResponse]()
    DeleteAgentAlias = Unary[agents_pb2.DeleteAgentAliasRequest, agents_pb2.DeleteAgentAliasResponse]()
