"""What the suite offers, for GatewayService.GetCapabilities: a client asks once instead of probing.

Built from what the gateway knows: its package's version, the services served beside the
GatewayService (A2A, memory, schedules, webhooks: their features are on when they are), the
protocols of the gateway and of the browser edge (gateway/web), the runtime engines the
runtime replicas offer (RuntimeService.ListRuntimes) and the interceptors of the policy
service's snapshot (WatchPolicy's first message). A dependency that does not answer fails the
call with its status, as ListModels does: never an answer that silently leaves things out.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
from collections.abc import Sequence

from cogmesh.gateway.v1 import gateway_pb2
from cogmesh.policy.v1 import policy_pb2
from cogmesh.runtime.v1 import runtime_pb2
from gateway.settings import GatewaySettings
from services.kit.clients import Clients
from services.kit.dependencies import PolicyClient, RuntimeClient
from services.lib.policy.config import (
    INTERCEPTORS_FILE,
    ConfigRejected,
    InterceptorsFile,
    InterceptorSpec,
    parse_text,
)

PACKAGE = "cogmesh"
# What the browser edge (gateway/web, `cogmesh up` on COGMESH_WEB_ADDR) serves in front of this gateway.
WEB_PROTOCOLS = ("connect", "grpc-web", "openai-chat", "openai-responses", "ag-ui", "mcp")
# Services served beside the GatewayService, by the feature they bring (and a protocol, for A2A).
SERVICE_FEATURES = {
    "lf.a2a.v1.A2AService": "a2a",
    "cogmesh.memory.v1.MemoryService": "memory",
    "cogmesh.gateway.v1.ScheduleService": "schedules",
    "cogmesh.gateway.v1.WebhookService": "webhooks",
}
# Features of every runtime engine that supports them, by RuntimeCapabilities field.
RUNTIME_FEATURES = {"approvals": "pause_resume", "client_tools": "pause_resume", "delegation": "delegation"}
# Features of this version's agent definitions (services/lib/agents.py: handoffs, todo_list, approvals).
AGENT_FEATURES = ("handoff", "plans")


def version() -> str:
    """The installed cogmesh package's version ("0+unknown" when run from a tree that is not installed)."""
    try:
        return importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


async def describe(
    settings: GatewaySettings, clients: Clients, services: Sequence[str]
) -> gateway_pb2.GetCapabilitiesResponse:
    """The answer for a gateway serving `services` (full service names)."""
    runtimes, interceptors = await asyncio.gather(_runtimes(clients), _interceptors(clients, settings))
    served = set(services)
    reply = gateway_pb2.GetCapabilitiesResponse(
        version=version(),
        api_versions=sorted({name.rsplit(".", 1)[0] for name in served}),
        protocols=["grpc", *(["a2a"] if "lf.a2a.v1.A2AService" in served else []), *WEB_PROTOCOLS],
        runtimes=[
            gateway_pb2.RuntimeCapability(name=engine.name, capabilities=_supported(engine.capabilities))
            for engine in runtimes
        ],
        interceptors=interceptors,
    )
    features = {feature: name in served for name, feature in SERVICE_FEATURES.items()}
    for feature, field in RUNTIME_FEATURES.items():
        features[feature] = any(getattr(engine.capabilities, field) for engine in runtimes)
    features |= dict.fromkeys(AGENT_FEATURES, True)
    features["auth"] = settings.api_keys_file is not None
    features["shared_store"] = bool(settings.redis_url)  # sessions, journals and the log in Redis
    reply.features.update(features)
    return reply


def _supported(capabilities: runtime_pb2.RuntimeCapabilities) -> list[str]:
    return [field.name for field, on in capabilities.ListFields() if on]


async def _runtimes(clients: Clients) -> list[runtime_pb2.RuntimeEngine]:
    reply = await RuntimeClient.of(clients).ListRuntimes(runtime_pb2.ListRuntimesRequest())
    return list(reply.runtimes)


async def _interceptors(clients: Clients, settings: GatewaySettings) -> list[str]:
    """Names of the interceptors the policy snapshot configures (top level, per agent, per role), in order."""
    stream = PolicyClient.of(clients).WatchPolicy(policy_pb2.WatchPolicyRequest(), timeout=settings.call_timeout_s)
    try:
        first = await stream.read()
    finally:
        stream.cancel()
    if first is None:
        return []
    text = next((f.content for f in first.snapshot.files if f.path == INTERCEPTORS_FILE), "")
    try:
        config = parse_text(INTERCEPTORS_FILE, text, InterceptorsFile) if text else InterceptorsFile()
    except ConfigRejected:  # the service validated its snapshot; a newer schema than ours names nothing here
        return []
    chains: list[list[InterceptorSpec]] = [config.interceptors]
    for agent in config.agents.values():
        chains.append(agent.interceptors)
        chains.extend(agent.roles.values())
    names: dict[str, None] = {}
    for chain in chains:
        for spec in chain:
            names.setdefault(spec.name or spec.type, None)
    return list(names)
