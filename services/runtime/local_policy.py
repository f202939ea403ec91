"""The policy service's decisions made in the runtime's process, from the policy snapshot it holds.

The policy service validates, hot-reloads and publishes its configuration (WatchPolicy);
this module keeps the last good snapshot and answers BeginTurn, RunInterceptors,
CheckToolCall(s) and CheckToolResult with the same engine and the same proto API as
the service (services/lib/policy), so a decision made here is the one the service's
RPC gives. It stands in for the PolicyService stub (`clients.policy_api`).

- Until a snapshot arrives (the service is down, slow, or too old to have WatchPolicy),
  every call goes to the service: behaviour never depends on how fast the watch syncs.
- A snapshot that does not validate here (a hook module the runtime cannot import, a
  torn snapshot) is refused and the last good one stays in force.
- Rate windows: with Redis they are the service's own (same keys), so runtime replicas
  and the service count together. Without Redis a window would be per process and N
  runtime workers would let an agent make N times its limit, so while the snapshot
  configures a RateLimiter or ThrottleInterceptor, the tool call checks (PRE_ACT, where
  those interceptors act) stay with the service; the other phases are decided here.
- Hooks and the ContextCompressor still call out (HookService, ContextService), as the
  service's would; circuit breakers are per process, as the service's are.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc

from cogmesh.policy.v1 import policy_pb2
from services.kit.clients import Clients
from services.kit.config import Settings
from services.kit.dependencies import PolicyClient
from services.kit.errors import DependencyError
from services.kit.logging import log
from services.kit.metrics import POLICY_DENIALS
from services.kit.snapshots import WATCH_RENEW_S, SnapshotWatcher
from services.kit.validation import check as check_rules
from services.lib.agents import AgentRegistry
from services.lib.policy.api import PolicyAPI, store_of
from services.lib.policy.assembly import Shared
from services.lib.policy.compactor import ContextServiceCompactor
from services.lib.policy.config import PolicyConfig, RateLimiterSpec, ThrottleSpec
from services.lib.policy.engine import PolicyEngine
from services.lib.policy.hook_client import HookChannels, RemoteHook
from services.lib.policy.hooks import HookHandler
from services.lib.policy.ratelimit import MemoryWindowStore, RedisWindowStore, WindowStore, redis_client

# The methods that run the PRE_ACT chain, where RateLimiter and ThrottleInterceptor act.
TOOL_CALL_CHECKS = frozenset({"CheckToolCall", "CheckToolCalls"})
# Turns whose BeginTurn version is remembered for the turn's start record.
REMEMBERED_TURNS = 4096


@dataclass(frozen=True)
class Held:
    """A snapshot turned into what decides: the proto API over its engine."""

    api: PolicyAPI
    version: str  # the snapshot's digest
    remote: frozenset[str]  # methods still asked of the service with this snapshot


def rate_limited(config: PolicyConfig) -> bool:
    """Whether any level of interceptors.yaml configures a RateLimiter or ThrottleInterceptor."""
    specs: list[Any] = list(config.interceptors.interceptors)
    for agent in config.interceptors.agents.values():
        specs += agent.interceptors
        for role in agent.roles.values():
            specs += role
    return any(isinstance(spec, RateLimiterSpec | ThrottleSpec) for spec in specs)


class LocalPolicy:
    """PolicyService's decision RPCs (request proto -> response proto), answered in process."""

    def __init__(self, clients: Clients, agents: AgentRegistry, settings: Settings) -> None:
        self.clients = clients
        self.agents = agents
        self._channels = HookChannels()
        self._redis: Any = None
        windows: WindowStore = MemoryWindowStore()
        if settings.redis_url:
            # The policy service's windows: the same keys, so every replica counts against one limit.
            self._redis = redis_client(settings.redis_url, settings.redis_timeout_s)
            windows = RedisWindowStore(self._redis, settings.redis_key_prefix + "policy:ratelimit:")
        self.windows_shared = bool(settings.redis_url)

        def remote_hook(address: str, timeout_s: float) -> HookHandler:
            return RemoteHook(self._channels, address, timeout_s)

        # Outlives snapshots, as the service's Shared outlives reloads: windows, breakers, hook channels.
        self.shared = Shared(windows, remote_hook, ContextServiceCompactor(clients), {})
        self.watcher: SnapshotWatcher[Held, policy_pb2.WatchPolicyResponse] = SnapshotWatcher(
            "policy", self._open, self._apply, lambda message: message.snapshot.version
        )
        self.watcher.listeners.append(self._applied)
        self.service_version = ""  # the last version the service announced (applied or not)
        self._built = 0
        self._said_unimplemented = False
        self._turns: OrderedDict[str, str] = OrderedDict()

    # ------------------------------------------------------------------ the watch

    def start(self) -> None:
        if not self.watcher.synced:
            log.info("policy decisions: asked of the policy service until its first snapshot arrives")
        self.watcher.start()

    async def close(self) -> None:
        await self.watcher.close()
        await self._channels.close()
        if self._redis is not None:
            await self._redis.aclose()

    @property
    def version(self) -> str:
        """The snapshot decisions are made with; "" while the service is asked instead."""
        return self.watcher.version

    @property
    def mode(self) -> str:
        held = self.watcher.current_or_none()
        if held is None:
            return "remote"
        return "local, tool call checks remote" if held.remote else "local"

    async def _open(self, known_version: str) -> AsyncIterator[policy_pb2.WatchPolicyResponse]:
        stream = PolicyClient.of(self.clients).WatchPolicy(
            policy_pb2.WatchPolicyRequest(known_version=known_version), wait_for_ready=True, timeout=WATCH_RENEW_S
        )
        try:
            async for message in stream:
                self.service_version = message.snapshot.version
                yield message
        except DependencyError as exc:
            if exc.status_code == grpc.StatusCode.UNIMPLEMENTED and not self._said_unimplemented:
                self._said_unimplemented = True
                log.info("policy decisions: the policy service has no WatchPolicy (older version); asking it each time")
            raise
        finally:
            stream.cancel()

    def _apply(self, message: policy_pb2.WatchPolicyResponse) -> Held:
        self._built += 1
        store = store_of(message.snapshot, self._built)  # ConfigRejected: refused, the last good one stays
        remote = frozenset() if self.windows_shared or not rate_limited(store.current) else TOOL_CALL_CHECKS
        return Held(PolicyAPI(PolicyEngine(self.agents, store, self.shared)), message.snapshot.version, remote)

    def _applied(self, held: Held, version: str) -> None:
        if held.remote:
            log.info(
                "policy decisions: local, but tool call checks asked of the policy service "
                "(rate limits without Redis are per process)",
                version=version,
            )
        else:
            log.info("policy decisions: local", version=version)

    # ------------------------------------------------------------------ the RPCs

    def turn_version(self, turn_id: str) -> str:
        """The policy version the BeginTurn of `turn_id` was decided with ("" when not known)."""
        return self._turns.get(turn_id, "")

    async def _ask(self, method: str, request: Any, **options: Any) -> tuple[Any, str]:
        """(answer, the version it was decided with: the snapshot's, or the service's when it is known)."""
        held = self.watcher.current_or_none()
        if held is None or method in held.remote:
            answer = await getattr(self.clients.policy, method)(request, **options)
            return answer, self.service_version
        check_rules(request)  # the protos' field rules, as the service's interceptor checks them
        answer = await getattr(held.api, method)(request)
        if method in TOOL_CALL_CHECKS:
            _count_denials(answer)  # the service counts the denials it serves; these are decided here
        return answer, held.version

    async def BeginTurn(self, request: policy_pb2.BeginTurnRequest, **options: Any) -> policy_pb2.BeginTurnResponse:
        answer, version = await self._ask("BeginTurn", request, **options)
        if request.scope.turn_id:
            self._turns[request.scope.turn_id] = version
            self._turns.move_to_end(request.scope.turn_id)
            while len(self._turns) > REMEMBERED_TURNS:
                self._turns.popitem(last=False)
        return answer  # type: ignore[no-any-return]

    async def RunInterceptors(
        self, request: policy_pb2.RunInterceptorsRequest, **options: Any
    ) -> policy_pb2.RunInterceptorsResponse:
        return (await self._ask("RunInterceptors", request, **options))[0]  # type: ignore[no-any-return]

    async def CheckToolCall(
        self, request: policy_pb2.CheckToolCallRequest, **options: Any
    ) -> policy_pb2.CheckToolCallResponse:
        return (await self._ask("CheckToolCall", request, **options))[0]  # type: ignore[no-any-return]

    async def CheckToolCalls(
        self, request: policy_pb2.CheckToolCallsRequest, **options: Any
    ) -> policy_pb2.CheckToolCallsResponse:
        return (await self._ask("CheckToolCalls", request, **options))[0]  # type: ignore[no-any-return]

    async def CheckToolResult(
        self, request: policy_pb2.CheckToolResultRequest, **options: Any
    ) -> policy_pb2.CheckToolResultResponse:
        return (await self._ask("CheckToolResult", request, **options))[0]  # type: ignore[no-any-return]


def _count_denials(answer: policy_pb2.CheckToolCallResponse | policy_pb2.CheckToolCallsResponse) -> None:
    decisions = answer.decisions if isinstance(answer, policy_pb2.CheckToolCallsResponse) else [answer]
    for decision in decisions:
        if decision.verdict == policy_pb2.VERDICT_DENY:
            POLICY_DENIALS.labels(decision.rule or "unspecified", decision.source or "unspecified").inc()
