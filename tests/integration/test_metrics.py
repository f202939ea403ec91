"""Metrics: RPC latency by method and status, active streams, events, turn latency, tokens
and cost by model, policy denials and breaker states, and /metrics from a real process."""

from __future__ import annotations

import asyncio
import math
import sys
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
import yaml
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from cogmesh.gateway.v1 import gateway_pb2_grpc
from cogmesh.models.v1 import models_pb2, models_pb2_grpc
from cogmesh.policy.v1 import policy_pb2, policy_pb2_grpc
from cogmesh.sessions.v1 import sessions_pb2, sessions_pb2_grpc
from services.kit.metrics import BREAKERS, register_breakers, serve_metrics
from services.kit.server import start
from services.lib.models.catalog import DEFAULT_CATALOG_PATH
from services.runtime import main as runtime_main
from services.runtime.tools.breaker import BreakerRegistry
from services.suite.inprocess import Suite, start_suite
from services.suite.supervisor import wait_serving
from tests.integration.conftest import SUITE_SETTINGS, TIMEOUT_S, new_session, send, subscribe
from tests.integration.test_tracing import free_port

pytestmark = pytest.mark.asyncio(loop_scope="module")

RUNTIME = "cogmesh.runtime.v1.RuntimeService"
GATEWAY = "cogmesh.gateway.v1.GatewayService"
PRICE_IN, PRICE_OUT = 2.0, 8.0  # USD per million tokens of the priced local model


def value(metric: str, /, **labels: str) -> float:
    return REGISTRY.get_sample_value(metric, labels) or 0.0


@pytest.fixture(scope="module")
def priced_catalogue(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped catalogue plus a priced model served by the built-in local model."""
    catalogue = yaml.safe_load(Path(DEFAULT_CATALOG_PATH).read_text())
    local = next(m for m in catalogue["models"] if m["id"] == "cogmesh-local")
    priced = dict(local, id="priced-local", aliases=["priced"])
    priced["pricing"] = {"input_per_million_usd": PRICE_IN, "output_per_million_usd": PRICE_OUT}
    catalogue["models"].append(priced)
    path = tmp_path_factory.mktemp("models") / "models.yaml"
    path.write_text(yaml.safe_dump(catalogue))
    return path


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def metered(priced_catalogue: Path) -> AsyncIterator[Suite]:
    suite = await start_suite(SUITE_SETTINGS.model_copy(update={"models_file": priced_catalogue}))
    try:
        yield suite
    finally:
        await suite.stop(0)


async def test_a_turn_records_rpc_event_turn_token_and_cost_metrics(metered: Suite) -> None:
    run_turn = {"grpc_service": RUNTIME, "grpc_method": "StartTurn", "grpc_type": "unary", "grpc_code": "OK"}
    send_message = {"grpc_service": GATEWAY, "grpc_method": "SendMessage"}
    tokens = {"model": "priced-local", "provider": "local"}
    before = {
        "run_turn": value("grpc_server_handling_seconds_count", **run_turn),
        "turns": value("cogmesh_turn_duration_seconds_count", outcome="ok"),
        "produced": value("cogmesh_events_total", grpc_service=RUNTIME, grpc_method="StartTurn", kind="final"),
        "delivered": value("cogmesh_events_total", **send_message, kind="final"),
        "deltas": value("cogmesh_events_total", **send_message, kind="assistant_delta"),
        "calls": value("cogmesh_model_calls_total", **tokens),
        "input": value("cogmesh_model_tokens_total", **tokens, direction="input"),
        "output": value("cogmesh_model_tokens_total", **tokens, direction="output"),
        "cost": value("cogmesh_model_cost_usd_total", **tokens),
    }
    async with grpc.aio.insecure_channel(metered.gateway_address) as channel:
        gateway = gateway_pb2_grpc.GatewayServiceStub(channel)
        session_id = await new_session(gateway)
        events = await send(gateway, session_id, "What is 17 * 23?", model="priced")
    assert events[-1].WhichOneof("payload") == "final", events[-1]
    usage = [e.usage for e in events if e.WhichOneof("payload") == "usage"]
    assert len(usage) == 2, "the calculator turn makes two model calls"
    in_tokens, out_tokens = sum(u.input_tokens for u in usage), sum(u.output_tokens for u in usage)
    assert in_tokens > 0 and out_tokens > 0

    assert value("grpc_server_handling_seconds_count", **run_turn) == before["run_turn"] + 1
    assert value("cogmesh_turn_duration_seconds_count", outcome="ok") == before["turns"] + 1
    assert value("cogmesh_events_total", grpc_service=RUNTIME, grpc_method="StartTurn", kind="final") == (
        before["produced"] + 1
    )
    assert value("cogmesh_events_total", **send_message, kind="final") == before["delivered"] + 1
    delta_events = sum(1 for e in events if e.WhichOneof("payload") == "assistant_delta")
    assert value("cogmesh_events_total", **send_message, kind="assistant_delta") == before["deltas"] + delta_events
    assert value("cogmesh_model_calls_total", **tokens) == before["calls"] + 2
    assert value("cogmesh_model_tokens_total", **tokens, direction="input") == before["input"] + in_tokens
    assert value("cogmesh_model_tokens_total", **tokens, direction="output") == before["output"] + out_tokens
    expected_cost = (in_tokens * PRICE_IN + out_tokens * PRICE_OUT) / 1e6
    assert math.isclose(value("cogmesh_model_cost_usd_total", **tokens) - before["cost"], expected_cost, rel_tol=1e-6)
    assert math.isclose(sum(u.cost_usd for u in usage), expected_cost, rel_tol=1e-6)


async def test_latency_is_recorded_by_status_code(metered: Suite) -> None:
    labels = {"grpc_service": "cogmesh.sessions.v1.SessionsService", "grpc_method": "GetSession"}
    labels["grpc_type"] = "unary"
    before = value("grpc_server_handling_seconds_count", **labels, grpc_code="NOT_FOUND")
    async with grpc.aio.insecure_channel(metered.servers["sessions"].address) as channel:
        stub = sessions_pb2_grpc.SessionsServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await stub.GetSession(
                sessions_pb2.GetSessionRequest(tenant_id="default", session_id="nope"), timeout=TIMEOUT_S
            )
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    assert value("grpc_server_handling_seconds_count", **labels, grpc_code="NOT_FOUND") == before + 1
    # Buckets are cumulative: the +Inf bucket counts every call.
    assert value("grpc_server_handling_seconds_bucket", **labels, grpc_code="NOT_FOUND", le="+Inf") == before + 1


async def test_active_streams_go_up_while_a_subscriber_listens_and_back_down(metered: Suite) -> None:
    labels = {"grpc_service": GATEWAY, "grpc_method": "Subscribe"}
    async with grpc.aio.insecure_channel(metered.gateway_address) as channel:
        gateway = gateway_pb2_grpc.GatewayServiceStub(channel)
        session_id = await new_session(gateway)
        base = value("grpc_server_active_streams", **labels)
        watcher = subscribe(gateway, session_id)
        await watcher.next()  # the stream is open when its first heartbeat arrives
        assert value("grpc_server_active_streams", **labels) == base + 1
        watcher.cancel()
        async with asyncio.timeout(TIMEOUT_S):
            while value("grpc_server_active_streams", **labels) != base:  # noqa: ASYNC110 - polling a gauge
                await asyncio.sleep(0.01)
    cancelled = {**labels, "grpc_type": "server_stream", "grpc_code": "CANCELLED"}
    assert value("grpc_server_handling_seconds_count", **cancelled) >= 1


async def test_policy_denials_are_counted_by_rule(metered: Suite) -> None:
    async with grpc.aio.insecure_channel(metered.servers["policy"].address) as channel:
        stub = policy_pb2_grpc.PolicyServiceStub(channel)
        request = policy_pb2.CheckToolCallRequest(
            tenant_id="default", agent="default", tool_name="Bash", session_id="s1", turn_id="t1"
        )
        reply = await stub.CheckToolCall(request, timeout=TIMEOUT_S)
        assert reply.verdict == policy_pb2.VERDICT_DENY
        labels = {"rule": reply.rule, "source": reply.source}
        before = value("cogmesh_policy_denials_total", **labels)
        await stub.CheckToolCall(request, timeout=TIMEOUT_S)
        allowed = await stub.CheckToolCall(
            policy_pb2.CheckToolCallRequest(
                tenant_id="default", agent="default", tool_name="calculator", session_id="s1", turn_id="t1"
            ),
            timeout=TIMEOUT_S,
        )
    assert allowed.verdict == policy_pb2.VERDICT_ALLOW
    assert value("cogmesh_policy_denials_total", **labels) == before + 1


async def test_breaker_states_are_read_at_scrape_time() -> None:
    breakers = BreakerRegistry(failure_threshold=2, cooldown_s=60)
    names = ("search", "files")
    register_breakers("runtime", "tool_server", lambda: {n: breakers.get(n).state.value for n in names})
    try:
        state = {"service": "runtime", "scope": "tool_server", "name": "search"}
        assert value("cogmesh_circuit_breaker_state", **state, state="closed") == 1
        assert value("cogmesh_circuit_breaker_state", **state, state="open") == 0
        breakers.get("search").record_failure()
        breakers.get("search").record_failure()
        assert value("cogmesh_circuit_breaker_state", **state, state="open") == 1
        assert value("cogmesh_circuit_breaker_state", **state, state="closed") == 0
        files = {"service": "runtime", "scope": "tool_server", "name": "files"}
        assert value("cogmesh_circuit_breaker_state", **files, state="closed") == 1
    finally:
        BREAKERS.unregister("runtime", "tool_server")
    assert value("cogmesh_circuit_breaker_state", **state, state="open") == 0


async def test_the_metrics_endpoint_serves_prometheus_text() -> None:
    server = serve_metrics("127.0.0.1", 0)

    def scrape() -> tuple[str, str]:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=TIMEOUT_S) as reply:
            return reply.read().decode(), str(reply.headers["Content-Type"])

    try:
        body, content_type = await asyncio.to_thread(scrape)
    finally:
        server.close()
    assert content_type.startswith("text/plain")
    families = {f.name for f in text_string_to_metric_families(body)}
    assert {"grpc_server_handling_seconds", "cogmesh_turn_duration_seconds", "cogmesh_model_tokens"} <= families


async def test_a_service_process_serves_metrics_on_its_metrics_port() -> None:
    listen, metrics_port = f"127.0.0.1:{free_port()}", free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.models",
        "--listen",
        listen,
        "--metrics-port",
        str(metrics_port),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        await wait_serving(listen, TIMEOUT_S)
        async with grpc.aio.insecure_channel(listen) as channel:
            stub = models_pb2_grpc.ModelsServiceStub(channel)
            for _ in range(3):
                await stub.ResolveModel(models_pb2.ResolveModelRequest(name="local"), timeout=TIMEOUT_S)
        url = f"http://127.0.0.1:{metrics_port}/metrics"
        body = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=TIMEOUT_S).read().decode())
    finally:
        process.terminate()
        _, stderr = await asyncio.wait_for(process.communicate(), TIMEOUT_S)
    assert process.returncode == 0, stderr.decode()[-2000:]
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }
    key = (
        "grpc_server_handling_seconds_count",
        (
            ("grpc_code", "OK"),
            ("grpc_method", "ResolveModel"),
            ("grpc_service", "cogmesh.models.v1.ModelsService"),
            ("grpc_type", "unary"),
        ),
    )
    assert samples.get(key) == 3, [k for k in samples if "handling" in k[0]]
    assert any(name == "process_resident_memory_bytes" for name, _ in samples), "process metrics are served too"


async def test_the_runtime_exports_its_tool_servers_breakers(tmp_path: Path) -> None:
    (tmp_path / "tools.yaml").write_text(
        f"servers:\n  offline:\n    transport: grpc\n    address: 127.0.0.1:{free_port()}\n"
    )
    settings = SUITE_SETTINGS.model_copy(update={"tool_servers_file": tmp_path / "tools.yaml"})
    runtime = await start(runtime_main.build, settings, "127.0.0.1:0")
    state = {"service": "runtime", "scope": "tool_server", "name": "offline"}
    try:
        # Listed from start, before any call reaches the server.
        assert value("cogmesh_circuit_breaker_state", **state, state="closed") == 1
    finally:
        await runtime.stop(0)
    assert value("cogmesh_circuit_breaker_state", **state, state="closed") == 0
