"""The fuzz harness: the whole suite in-process with API keys for two tenants, driven from
synchronous Hypothesis tests through an event loop of its own.

Hypothesis profiles (COGMESH_FUZZ_PROFILE, default `ci`; COGMESH_FUZZ_EXAMPLES overrides
the example count and, when set, makes `nightly` the default profile):
  ci       a few dozen examples per RPC, derandomized: the same cases every run
  nightly  10,000 examples per RPC, random
COGMESH_FUZZ_REPORT=<file> appends one JSON line per RPC fuzzed: examples, seconds, status codes seen.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, settings

from cogmesh.common.v1 import messages_pb2
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from cogmesh.sessions.v1 import sessions_pb2, sessions_pb2_grpc
from gateway.auth import hash_key
from gateway.guard import GatewayGuard
from gateway.servicer import GatewayServicer
from services.kit.metrics import RPC_SECONDS
from services.sessions.store import MemorySessionStore
from services.sessions.webhooks.hooked import HookedSessionStore
from services.suite.inprocess import Suite, start_suite
from tests.integration.conftest import SUITE_SETTINGS

T = TypeVar("T")
KEYS = {"acme": "fuzz-key-acme", "globex": "fuzz-key-globex"}
CALL_TIMEOUT_S = 15.0  # a call (or stream) answering slower than this is a hang
SETTLE_S = 30.0  # how long background turns and stream teardown may take to finish

_EXAMPLES = os.environ.get("COGMESH_FUZZ_EXAMPLES", "")
PROFILE = os.environ.get("COGMESH_FUZZ_PROFILE", "nightly" if _EXAMPLES else "ci")
_common: dict[str, Any] = {
    "deadline": None,
    "database": None,  # nothing written into the checkout; failures print their reproduction blob
    "print_blob": True,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
}
settings.register_profile("ci", max_examples=int(_EXAMPLES or 50), derandomize=True, **_common)
settings.register_profile("nightly", max_examples=int(_EXAMPLES or 10_000), derandomize=False, **_common)
FUZZ = settings.get_profile(PROFILE)
EXAMPLES: int = FUZZ.max_examples
REPORT = os.environ.get("COGMESH_FUZZ_REPORT", "")
# pytest-timeout (120 s by default) must not cut a nightly run short.
TEST_TIMEOUT_S = 120 + EXAMPLES * 1.0


def bearer(tenant: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {KEYS[tenant]}"),)


def keys_file(folder: Path) -> Path:
    path = folder / "keys.yaml"
    lines = ["keys:"] + [
        f"  - {{sha256: {hash_key(key)}, tenant: {tenant}, principal: {tenant}-app}}" for tenant, key in KEYS.items()
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


@dataclass
class Resources:
    """Real ids the fuzzer aims at: each tenant's idle session, one paused on a client tool."""

    sessions: dict[str, str] = field(default_factory=dict)  # tenant -> idle session with one finished turn
    paused: dict[str, tuple[str, str]] = field(default_factory=dict)  # tenant -> (session, interrupt id)

    @property
    def ids(self) -> list[str]:
        return [*self.sessions.values(), *(i for pair in self.paused.values() for i in pair)]


@dataclass(frozen=True)
class SessionSnapshot:
    session: bytes  # the stored Session resource, serialized
    pending_interrupt_ids: tuple[str, ...]
    events: tuple[bytes, ...]  # its whole event log, serialized
    last_turn_id: str


class Harness:
    """The suite on a private event loop; `run` drives one coroutine on it to completion."""

    def __init__(self, folder: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.settings = SUITE_SETTINGS.model_copy(
            update={
                "api_keys_file": keys_file(folder),
                "dev_mode": False,
                "tenant_rate_per_s": 1e6,  # admission control is tested elsewhere; here it would hide bugs
                "tenant_burst": 1_000_000,
            }
        )
        self.suite: Suite = self.run(start_suite(self.settings), 60)
        self.channel: grpc.aio.Channel = self.run(self._channel(self.suite.gateway_address))
        self.sessions_channel: grpc.aio.Channel = self.run(self._channel(self.suite.servers["sessions"].address))
        self.gateway: Any = gateway_pb2_grpc.GatewayServiceStub(self.channel)  # type: ignore[no-untyped-call]
        self.internal_sessions: Any = sessions_pb2_grpc.SessionsServiceStub(self.sessions_channel)  # type: ignore[no-untyped-call]
        self.resources = self.run(self.fresh_resources())

    @staticmethod
    async def _channel(address: str) -> grpc.aio.Channel:
        return grpc.aio.insecure_channel(address)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = CALL_TIMEOUT_S) -> T:
        return self.loop.run_until_complete(asyncio.wait_for(coro, timeout))

    def close(self) -> None:
        async def stop() -> None:
            await self.channel.close()
            await self.sessions_channel.close()
            await self.suite.stop(0)

        self.run(stop(), 60)
        self.loop.close()

    # ------------------------------------------------------------------ white-box views of the gateway

    @property
    def servicer(self) -> GatewayServicer:
        return self.suite.servers["gateway"].app.mounts[0].servicer  # type: ignore[no-any-return]

    @property
    def guard(self) -> GatewayGuard:
        return next(i for i in self.suite.servers["gateway"].app.interceptors if isinstance(i, GatewayGuard))

    def open_streams(self) -> dict[str, int]:
        return dict(self.guard.limits._streams)

    def running_turns(self) -> dict[str, str]:
        runner = self.suite.servers["runtime"].app.mounts[0].servicer.runner
        return {session: turn for session, turn in runner._running}

    def logged_sessions(self) -> set[str]:
        """Sessions whose event log the sessions service holds (it lives and goes with the session)."""
        store = self.suite.servers["sessions"].app.mounts[0].servicer.store
        if isinstance(store, HookedSessionStore):  # webhooks: the memory store inside
            store = store.wrapped
        assert isinstance(store, MemorySessionStore)
        return {session_id for session_id, entry in store._entries.items() if entry.log is not None}

    # ------------------------------------------------------------------ setup and checks over the public API

    async def fresh_resources(self) -> Resources:
        found = Resources()
        for tenant in KEYS:
            created = await self.gateway.CreateSession(gateway_pb2.CreateSessionRequest(), metadata=bearer(tenant))
            session_id = created.session.session_id
            async for _ in self.gateway.SendMessage(
                gateway_pb2.SendMessageRequest(session_id=session_id, content="hello"), metadata=bearer(tenant)
            ):
                pass
            found.sessions[tenant] = session_id
            found.paused[tenant] = await self.pause(tenant)
        return found

    async def pause(self, tenant: str) -> tuple[str, str]:
        """A session whose turn waits for a client-side tool result: (session id, interrupt id)."""
        created = await self.gateway.CreateSession(gateway_pb2.CreateSessionRequest(), metadata=bearer(tenant))
        session_id = created.session.session_id
        request = gateway_pb2.SendMessageRequest(
            session_id=session_id,
            content='@lookup {"q": "x"}',
            client_tools=[messages_pb2.ToolSpec(name="lookup", description="client-side lookup")],
        )
        interrupt = ""
        async for response in self.gateway.SendMessage(request, metadata=bearer(tenant)):
            for event in response.events:
                if event.WhichOneof("payload") == "client_tool_call":
                    interrupt = event.client_tool_call.interrupt_id
        assert interrupt, "the built-in model did not call the client tool"
        return session_id, interrupt

    async def session_ids(self, tenant: str) -> set[str]:
        """Every session the tenant has, read from the sessions service (all pages)."""
        found: set[str] = set()
        token = ""
        while True:
            page = await self.internal_sessions.ListSessions(
                sessions_pb2.ListSessionsRequest(tenant_id=tenant, page_size=100, page_token=token),
                timeout=CALL_TIMEOUT_S,
            )
            found.update(s.session_id for s in page.sessions)
            token = page.next_page_token
            if not token:
                return found

    async def snapshot(self, tenant: str, session_ids: list[str]) -> dict[str, SessionSnapshot]:
        """What another tenant must not be able to change: each session as stored, and its event log."""
        found = {}
        for session_id in session_ids:
            stored = await self.internal_sessions.GetSession(
                sessions_pb2.GetSessionRequest(tenant_id=tenant, session_id=session_id), timeout=CALL_TIMEOUT_S
            )
            events = []
            request = gateway_pb2.SubscribeRequest(session_id=session_id, stop_when_idle=True)
            async for response in self.gateway.Subscribe(request, metadata=bearer(tenant), timeout=CALL_TIMEOUT_S):
                events.extend(response.events)
            found[session_id] = SessionSnapshot(
                stored.session.SerializeToString(deterministic=True),
                tuple(stored.state.pending_interrupt_ids),
                tuple(e.SerializeToString(deterministic=True) for e in events),
                events[-1].turn_id if events else "",
            )
        return found

    @staticmethod
    def server_faults() -> int:
        """INTERNAL or UNKNOWN statuses any in-process server has answered so far (its RPC metrics)."""
        return sum(
            int(sample.value)
            for metric in RPC_SECONDS.collect()
            for sample in metric.samples
            if sample.name.endswith("_count") and sample.labels.get("grpc_code") in ("INTERNAL", "UNKNOWN")
        )

    @staticmethod
    def rpc_codes(method: str) -> Counter[str]:
        """How many calls of `method` ("/pkg.Service/Name") the servers have ended so far, by status code."""
        service, _, name = method[1:].partition("/")
        codes: Counter[str] = Counter()
        for metric in RPC_SECONDS.collect():
            for sample in metric.samples:
                labels = sample.labels
                if sample.name.endswith("_count") and (labels.get("grpc_service"), labels.get("grpc_method")) == (
                    service,
                    name,
                ):
                    codes[labels["grpc_code"]] += int(sample.value)
        return +codes

    async def serving(self) -> dict[str, str]:
        """Health of every service, by name (all should say SERVING)."""
        states = {}
        for name, server in self.suite.servers.items():
            async with grpc.aio.insecure_channel(server.address) as channel:
                health: Any = health_pb2_grpc.HealthStub(channel)
                reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=5)
            states[name] = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
        return states

    async def settled(self) -> None:
        """Wait until no turn runs and no stream is open at the gateway (or SETTLE_S passes)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SETTLE_S
        # Polled: the gateway's turn table and stream counts have no event to wait on.
        while loop.time() < deadline:
            if not self.running_turns() and not self.open_streams():
                return
            await asyncio.sleep(0.05)


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    started = Harness(tmp_path_factory.mktemp("fuzz"))
    try:
        yield started
    finally:
        started.close()
