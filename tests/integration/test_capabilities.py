"""GatewayService.GetCapabilities over real gRPC: the suite's version, protocols, features, runtime engines
and the policy's interceptors, as the whole suite in process serves them."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Any

import grpc
import pytest

from cogmesh.gateway.v1 import gateway_pb2
from services.lib.policy.config import DEFAULT_POLICY_DIR
from tests.integration.conftest import SUITE_SETTINGS, TIMEOUT_S, running_suite, status_details

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_what_the_suite_offers(gateway: Any) -> None:
    reply = await gateway.GetCapabilities(gateway_pb2.GetCapabilitiesRequest(), timeout=TIMEOUT_S)
    assert reply.version == importlib.metadata.version("cogmesh")
    assert {"cogmesh.gateway.v1", "cogmesh.memory.v1", "lf.a2a.v1"} <= set(reply.api_versions)
    assert reply.protocols[0] == "grpc"
    assert {"a2a", "connect", "grpc-web", "openai-chat", "ag-ui", "mcp"} <= set(reply.protocols)
    engines = {runtime.name: set(runtime.capabilities) for runtime in reply.runtimes}
    assert {"pause_resume", "tools", "streaming"} <= engines["cogmesh"]
    assert "single-shot" in engines and "pause_resume" not in engines["single-shot"]
    assert reply.interceptors == ["BudgetGuard"]  # services/defaults/policy/interceptors.yaml
    features = dict(reply.features)
    assert features["memory"] and features["a2a"] and features["approvals"] and features["client_tools"]
    assert features["handoff"] and features["plans"]
    assert features["auth"] is False and features["shared_store"] is False  # dev mode, memory stores
    assert "schedules" in features and "webhooks" in features


async def test_interceptors_by_name_for_every_agent_and_role(tmp_path: Path) -> None:
    policy = tmp_path / "policy"
    policy.mkdir()
    for name in ("policy.yaml", "role_router.yaml"):
        (policy / name).write_text((DEFAULT_POLICY_DIR / name).read_text())
    (policy / "interceptors.yaml").write_text(
        "interceptors:\n  - {type: PIIShield, name: pii}\n"
        "agents:\n  careful:\n    interceptors: [{type: BudgetGuard, tool_calls: 2}]\n"
        "    roles:\n      assistant: [{type: PIIShield, name: pii}, {type: HITLInterceptor, tools: [calculator]}]\n"
    )
    async with running_suite(SUITE_SETTINGS.model_copy(update={"policy_dir": policy})) as (_, stubs):
        reply = await stubs["gateway"].GetCapabilities(gateway_pb2.GetCapabilitiesRequest(), timeout=TIMEOUT_S)
    assert list(reply.interceptors) == ["pii", "BudgetGuard", "HITLInterceptor"]


async def test_a_runtime_that_does_not_answer_is_the_calls_error() -> None:
    """Capabilities are never answered with parts silently left out: the runtime's absence is the status."""
    async with running_suite() as (suite, stubs):
        await suite.servers["runtime"].stop(0)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stubs["gateway"].GetCapabilities(gateway_pb2.GetCapabilitiesRequest(), timeout=TIMEOUT_S)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    info, _ = status_details(caught.value)
    assert info is not None and "runtime" in (caught.value.details() or "")
