"""API keys, tenant isolation, per-tenant limits and TLS at the gateway."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status

from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from gateway.auth import hash_key
from gateway.main import authenticator
from gateway.settings import GatewaySettings
from tests.integration.conftest import SUITE_SETTINGS, running_suite, status_details

KEYS = {"acme": "key-acme-1", "globex": "key-globex-1"}


def bearer(tenant: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {KEYS[tenant]}"),)


def keys_file(tmp_path: Path) -> Path:
    path = tmp_path / "keys.yaml"
    lines = ["keys:"] + [
        f"  - {{sha256: {hash_key(key)}, tenant: {tenant}, principal: {tenant}-app}}" for tenant, key in KEYS.items()
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


async def collect(call: object) -> list[gateway_pb2.SendMessageResponse]:
    return [r async for r in call]  # type: ignore[attr-defined]


async def test_keys_tenants_and_isolation(tmp_path: Path) -> None:
    settings = SUITE_SETTINGS.model_copy(update={"api_keys_file": keys_file(tmp_path)})
    async with running_suite(settings) as (suite, stubs):
        gw: gateway_pb2_grpc.GatewayServiceStub = stubs["gateway"]

        for metadata, why in [
            ((), "missing"),
            ((("authorization", "Bearer nope"),), "unknown"),
            ((("authorization", "Basic abc"),), "must be `Bearer"),
        ]:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await gw.ListAgents(gateway_pb2.ListAgentsRequest(), metadata=metadata, timeout=5)
            assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
            info, _ = status_details(caught.value)
            assert info is not None and info.reason == "UNAUTHENTICATED"
            assert why in (caught.value.details() or "")

        # Probes and reflection need no key.
        async with grpc.aio.insecure_channel(suite.gateway_address) as channel:
            health = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert health.status == health_pb2.HealthCheckResponse.SERVING

        mine = (await gw.CreateSession(gateway_pb2.CreateSessionRequest(), metadata=bearer("acme"))).session
        assert mine.tenant_id == "acme"
        turn = await collect(
            gw.SendMessage(
                gateway_pb2.SendMessageRequest(session_id=mine.session_id, content="What is 2 * 3?"),
                metadata=bearer("acme"),
            )
        )
        assert "6" in turn[-1].events[-1].final.text

        sid = mine.session_id
        foreign_calls = [
            lambda: gw.GetSession(gateway_pb2.GetSessionRequest(session_id=sid), metadata=bearer("globex")),
            lambda: gw.CancelTurn(gateway_pb2.CancelTurnRequest(session_id=sid), metadata=bearer("globex")),
            lambda: collect(
                gw.SendMessage(gateway_pb2.SendMessageRequest(session_id=sid, content="hi"), metadata=bearer("globex"))
            ),
            lambda: collect(
                gw.Subscribe(
                    gateway_pb2.SubscribeRequest(session_id=sid, stop_when_idle=True), metadata=bearer("globex")
                )
            ),
        ]
        for attempt in foreign_calls:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await asyncio.wait_for(attempt(), 5)
            assert caught.value.code() == grpc.StatusCode.NOT_FOUND
        # Delete is idempotent: a foreign session looks exactly like a missing one (deleted=false).
        foreign_delete = await gw.DeleteSession(
            gateway_pb2.DeleteSessionRequest(session_id=sid), metadata=bearer("globex")
        )
        assert foreign_delete.deleted is False
        theirs = await gw.ListSessions(gateway_pb2.ListSessionsRequest(), metadata=bearer("globex"))
        assert sid not in {s.session_id for s in theirs.sessions}
        # Nothing the other tenant tried changed the session.
        again = await gw.GetSession(gateway_pb2.GetSessionRequest(session_id=sid), metadata=bearer("acme"))
        assert again.session.message_count == 4


async def test_rate_limit_answers_resource_exhausted_with_retry_info() -> None:
    settings = SUITE_SETTINGS.model_copy(update={"tenant_rate_per_s": 1.0, "tenant_burst": 2})
    async with running_suite(settings) as (_, stubs):
        gw = stubs["gateway"]
        for _ in range(2):
            await gw.ListAgents(gateway_pb2.ListAgentsRequest(), timeout=5)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await gw.ListAgents(gateway_pb2.ListAgentsRequest(), timeout=5)
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        status = rpc_status.from_call(caught.value)  # type: ignore[arg-type]
        retry = error_details_pb2.RetryInfo()
        assert status is not None and any(d.Unpack(retry) for d in status.details)
        assert 0 < retry.retry_delay.ToTimedelta().total_seconds() <= 1.0
        info, _ = status_details(caught.value)
        assert info is not None and info.reason == "RATE_LIMITED"
        await asyncio.sleep(1.05)
        await gw.ListAgents(gateway_pb2.ListAgentsRequest(), timeout=5)  # refilled


async def test_concurrent_stream_cap_per_tenant() -> None:
    settings = SUITE_SETTINGS.model_copy(update={"tenant_max_streams": 1})
    async with running_suite(settings) as (_, stubs):
        gw = stubs["gateway"]
        session = (await gw.CreateSession(gateway_pb2.CreateSessionRequest())).session
        first = gw.Subscribe(gateway_pb2.SubscribeRequest(session_id=session.session_id))
        assert (await asyncio.wait_for(first.read(), 5)).heartbeat  # open and idle
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await collect(gw.Subscribe(gateway_pb2.SubscribeRequest(session_id=session.session_id)))
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "open streams" in (caught.value.details() or "")
        first.cancel()
        await asyncio.sleep(0.1)
        second = gw.Subscribe(gateway_pb2.SubscribeRequest(session_id=session.session_id, stop_when_idle=True))
        assert await collect(second) == []


def test_dev_mode_is_explicit_and_loopback_only(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no API keys configured"):
        authenticator(GatewaySettings(listen="127.0.0.1:1"))
    with pytest.raises(SystemExit, match="binds loopback only"):
        authenticator(GatewaySettings(dev_mode=True, listen="0.0.0.0:1"))
    assert authenticator(GatewaySettings(dev_mode=True, listen="[::1]:1")).dev_mode
    bad = tmp_path / "bad.yaml"
    bad.write_text("keys:\n  - {sha256: xyz, tenant: a, principal: b}\n")
    with pytest.raises(SystemExit, match=r"bad.yaml:2: keys\[0\]\.sha256"):
        authenticator(GatewaySettings(api_keys_file=bad))


def make_cert(tmp_path: Path, name: str, ca: tuple[Path, Path] | None = None) -> tuple[Path, Path]:
    key, cert = tmp_path / f"{name}.key", tmp_path / f"{name}.pem"
    if ca is None:
        subprocess.run(
            [
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "1",
                "-keyout",
                str(key),
                "-out",
                str(cert),
                "-subj",
                f"/CN={name}",
                "-addext",
                "subjectAltName=IP:127.0.0.1",
            ],
            check=True,
            capture_output=True,
        )
    else:
        csr = tmp_path / f"{name}.csr"
        subprocess.run(
            [
                "openssl",
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                str(key),
                "-out",
                str(csr),
                "-subj",
                f"/CN={name}",
            ],
            check=True,
            capture_output=True,
        )
        subprocess.run(
            [
                "openssl",
                "x509",
                "-req",
                "-in",
                str(csr),
                "-CA",
                str(ca[1]),
                "-CAkey",
                str(ca[0]),
                "-CAcreateserial",
                "-days",
                "1",
                "-out",
                str(cert),
            ],
            check=True,
            capture_output=True,
        )
    return key, cert


async def test_tls_and_mutual_tls(tmp_path: Path) -> None:
    server_key, server_cert = make_cert(tmp_path, "server")
    ca_key, ca_cert = make_cert(tmp_path, "client-ca")
    client_key, client_cert = make_cert(tmp_path, "client", ca=(ca_key, ca_cert))
    settings = SUITE_SETTINGS.model_copy(
        update={"tls_cert_file": server_cert, "tls_key_file": server_key, "tls_client_ca_file": ca_cert}
    )
    async with running_suite(settings) as (suite, _):
        address = suite.gateway_address
        with_client_cert = grpc.ssl_channel_credentials(
            server_cert.read_bytes(), client_key.read_bytes(), client_cert.read_bytes()
        )
        async with grpc.aio.secure_channel(address, with_client_cert) as channel:
            reply = await gateway_pb2_grpc.GatewayServiceStub(channel).ListAgents(
                gateway_pb2.ListAgentsRequest(), timeout=5
            )
        assert "default" in {a.name for a in reply.agents}
        without = grpc.ssl_channel_credentials(server_cert.read_bytes())
        async with grpc.aio.secure_channel(address, without) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await gateway_pb2_grpc.GatewayServiceStub(channel).ListAgents(
                    gateway_pb2.ListAgentsRequest(), timeout=5
                )
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        async with grpc.aio.insecure_channel(address) as channel:
            with pytest.raises(grpc.aio.AioRpcError):
                await gateway_pb2_grpc.GatewayServiceStub(channel).ListAgents(
                    gateway_pb2.ListAgentsRequest(), timeout=5
                )
