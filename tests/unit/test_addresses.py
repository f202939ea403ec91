"""Addresses that name several replicas (services/kit/addresses.py), the settings that check them,
the keepalive and connection-age options built from the settings, and where `cogmesh up` runs
each replica."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.kit import addresses
from services.kit.clients import channel_options
from services.kit.config import Settings
from services.kit.server import server_options
from services.suite.settings import SuiteSettings
from services.suite.supervisor import StartupError, Supervisor, replica_addresses, runtime_workers


def test_one_address_is_dialled_as_given() -> None:
    for address in ("127.0.0.1:50052", "runtime:50052", "dns:///runtime-pods:50052", "unix:/tmp/runtime.sock"):
        assert addresses.channel_target(address) == address
    assert not addresses.names_replicas("runtime:50052")
    assert addresses.names_replicas("dns:///runtime-pods:50052")


def test_a_list_of_replicas_becomes_an_ipv4_or_ipv6_target() -> None:
    assert addresses.channel_target("127.0.0.1:50052, 127.0.0.1:50062") == "ipv4:127.0.0.1:50052,127.0.0.1:50062"
    assert addresses.channel_target("[::1]:50052,[::1]:50062") == "ipv6:[::1]:50052,[::1]:50062"
    assert addresses.names_replicas("127.0.0.1:50052,127.0.0.1:50062")


@pytest.mark.parametrize(
    ("address", "problem"),
    [
        ("runtime-a:50052,runtime-b:50052", "for host names use one dns:///name:port"),
        ("127.0.0.1:50052,[::1]:50052", "mixes IPv4 and IPv6"),
        ("127.0.0.1:50052,::1:50052", "in brackets"),
        ("127.0.0.1:50052,127.0.0.1", "is not host:port"),
        ("127.0.0.1:50052,127.0.0.1:0", "port must be a number from 1 to 65535"),
        (" , ", "no address given"),
        ("runtime", "is not host:port"),
    ],
)
def test_a_bad_address_says_what_is_wrong(address: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        addresses.replicas(address)


def test_settings_name_the_field_of_a_bad_address() -> None:
    with pytest.raises(ValueError, match=r"runtime_addr[\s\S]*dns:///name:port"):
        Settings(runtime_addr="runtime-a:50052,runtime-b:50052")
    assert Settings(runtime_addr="127.0.0.1:1,127.0.0.1:2").runtime_addr == "127.0.0.1:1,127.0.0.1:2"


async def test_resolve_gives_every_replica_now() -> None:
    assert await addresses.resolve("127.0.0.1:1,127.0.0.1:2") == ["127.0.0.1:1", "127.0.0.1:2"]
    assert "127.0.0.1:50052" in await addresses.resolve("dns:///localhost:50052")
    assert await addresses.resolve("dns://8.8.8.8/127.0.0.1:50052") == ["127.0.0.1:50052"]
    assert await addresses.resolve("runtime:50052") == ["runtime:50052"]  # one server: nothing to look up


def test_servers_accept_the_pings_the_clients_send() -> None:
    settings = Settings(keepalive_time_s=20, keepalive_timeout_s=5)
    client, server = dict(channel_options(settings)), dict(server_options(settings))
    assert client["grpc.keepalive_time_ms"] == 20_000 and client["grpc.keepalive_permit_without_calls"] == 1
    assert server["grpc.keepalive_permit_without_calls"] == 1
    # too_many_pings comes when a client pings more often than the server allows.
    assert server["grpc.http2.min_ping_interval_without_data_ms"] < client["grpc.keepalive_time_ms"]
    assert client["grpc.keepalive_timeout_ms"] == server["grpc.keepalive_timeout_ms"] == 5_000


def test_connection_age_and_its_grace_come_from_the_settings() -> None:
    settings = Settings(max_connection_age_s=120, max_connection_age_grace_s=10, turn_timeout_s=300)
    options = dict(server_options(settings))
    assert (options["grpc.max_connection_age_ms"], options["grpc.max_connection_age_grace_ms"]) == (120_000, 10_000)
    assert "grpc.max_connection_age_ms" not in dict(server_options(Settings(max_connection_age_s=0)))


def test_cogmesh_up_runs_runtime_workers_on_ports_ten_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("services.suite.supervisor.cpu_count", lambda: 1)
    assert runtime_workers(SuiteSettings()) == 2  # at least two, so a worker's restart loses no capacity
    monkeypatch.setattr("services.suite.supervisor.cpu_count", lambda: 4)
    assert replica_addresses(SuiteSettings(), "runtime") == [f"127.0.0.1:{50052 + 10 * k}" for k in range(4)]
    assert replica_addresses(SuiteSettings(runtime_workers=1), "runtime") == ["127.0.0.1:50052"]
    assert replica_addresses(SuiteSettings(), "sessions") == ["127.0.0.1:50055"]
    listed = SuiteSettings(runtime_addr="127.0.0.1:7001,127.0.0.1:7002", runtime_workers=5)
    assert replica_addresses(listed, "runtime") == ["127.0.0.1:7001", "127.0.0.1:7002"]  # a list wins


def test_cogmesh_up_runs_replicas_of_stateful_services_only_on_redis() -> None:
    with pytest.raises(StartupError, match="2 sessions processes would each keep their own state"):
        replica_addresses(SuiteSettings(replicas=2), "sessions")
    shared = SuiteSettings(replicas=2, redis_url="redis://127.0.0.1:6379/0")
    assert replica_addresses(shared, "gateway") == ["127.0.0.1:50051", "127.0.0.1:50061"]
    with pytest.raises(StartupError, match="not a dns: name"):
        replica_addresses(SuiteSettings(runtime_addr="dns:///runtime:50052"), "runtime")
    with pytest.raises(StartupError, match=r"COGMESH_GATEWAY_ADDR.*dns:///name:port"):
        replica_addresses(shared.model_copy(update={"gateway_addr": "localhost:50051"}), "gateway")


def test_every_process_is_told_every_replica(tmp_path: Path) -> None:
    settings = SuiteSettings(runtime_workers=3, metrics_port=9500)
    supervisor = Supervisor(settings, tmp_path, print)
    assert [c.name for c in supervisor.of("runtime")] == ["runtime-1", "runtime-2", "runtime-3"]
    assert [c.name for c in supervisor.of("gateway")] == ["gateway"]
    env = supervisor._env()
    assert env["COGMESH_RUNTIME_ADDR"] == "127.0.0.1:50052,127.0.0.1:50062,127.0.0.1:50072"
    assert env["COGMESH_GATEWAY_ADDR"] == "127.0.0.1:50051"
    offsets = sorted(child.metrics_offset for child in supervisor.children.values())
    assert offsets == list(range(9))  # one /metrics port each, the first replicas where they always were
    assert supervisor.children["runtime-1"].metrics_offset == 5
