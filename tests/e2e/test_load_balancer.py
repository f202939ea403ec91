"""Replicas of every service behind a real L7 load balancer, as a user runs them outside
Kubernetes (deploy/local, docs/load-balancing.md): `cogmesh up --replicas 2` on one shared
Redis (two processes of every service, internal calls balanced with round_robin and
health-checked), and nginx and HAProxy, started from the shipped configurations, in front
of the two gateways.

Sessions run turns through the proxies (half through each) for the whole test; every
session is watched from every gateway directly, so whichever gateway a proxy gave a turn
to, another one watches it. Meanwhile one replica of each service in turn gets SIGTERM:
it drains (NOT_SERVING, so health-checking clients and HAProxy send it nothing new),
finishes what it has, exits, and `cogmesh up` starts it again. Nothing may be lost: every
turn completes, and every watcher's seq list is gap-free, duplicate-free and equal to a
final replay. Then: an idle Subscribe outlives a proxy's read timeout (the gateway's
heartbeats on the stream itself keep it open), and a stream the gateway cuts when its
connection reaches max_connection_age_s + grace reaches the client through either proxy as
UNAVAILABLE, which the SDKs resume on.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import io
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cogmesh.client import GatewayClient
from cogmesh.common.v1 import events_pb2
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from services.suite.inprocess import start_suite
from services.suite.supervisor import ORDER
from tests.e2e.test_cogmesh_up import BIN, ROOT, free_ports
from tests.integration.conftest import SUITE_SETTINGS
from tests.support.redis_server import delete_prefix, unique_prefix

# Twelve service processes and two proxies to start, six replicas to stop and restart.
pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(900)]

LOCAL = ROOT / "deploy" / "local"
SBIN = f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin"
NGINX, HAPROXY = shutil.which("nginx", path=SBIN), shutil.which("haproxy", path=SBIN)
SHIPPED = {"listen": "127.0.0.1:50050", "gateway-1": "127.0.0.1:50051", "gateway-2": "127.0.0.1:50061"}
STATS = "127.0.0.1:50059"  # HAProxy's stats page
SESSIONS = 4
DRAIN_S = 3.0  # above HAProxy's detection of NOT_SERVING (inter 500ms + timeout check 1s)
IDLE_TIMEOUT_S = 2  # the read timeout of the proxies the idle-stream test renders
HEARTBEAT_S = 0.5
TIMEOUT_S = 60.0  # no single wait of this test may take longer, even on a loaded machine

if NGINX is None or HAPROXY is None:
    pytest.skip(
        f"{'nginx' if NGINX is None else 'haproxy'} is not installed: `make test` installs nginx and HAProxy "
        "from Debian's packages (tools/install_proxies.sh), which needs root and apt-get",
        allow_module_level=True,
    )


def rendered(shipped: Path, replace: dict[str, str]) -> str:
    """The shipped configuration with the test's ports (and any other change), each one checked to apply."""
    text = shipped.read_text()
    for old, new in replace.items():
        assert old in text, f"{shipped.name} no longer has {old!r}"
        text = text.replace(old, new)
    return text


@dataclass
class Proxy:
    name: str
    address: str
    process: subprocess.Popen[bytes]
    stats: str = ""  # HAProxy's stats address

    def servers(self) -> dict[str, dict[str, str]]:
        """HAProxy's view of each gateway: status (UP, DOWN...) and last check (L7OK, L7TOUT, L4CON...)."""
        with urllib.request.urlopen(f"http://{self.stats}/;csv", timeout=5) as reply:
            rows = csv.DictReader(io.StringIO(reply.read().decode().lstrip("# ")))
            servers = {row["svname"]: row for row in rows if row["pxname"] == "cogmesh_gateways"}
        for row in servers.values():  # "* L7OK": the last check's result while the next one runs
            row["check_status"] = row["check_status"].removeprefix("* ")
        return servers


def start_proxy(kind: str, folder: Path, gateways: list[str], timeout: str = "") -> Proxy:
    """nginx or HAProxy from deploy/local on free ports; `timeout` shortens its read timeouts."""
    listen, stats = (f"127.0.0.1:{port}" for port in free_ports(2))
    ports = {SHIPPED["listen"]: listen, SHIPPED["gateway-1"]: gateways[0], SHIPPED["gateway-2"]: gateways[1]}
    folder.mkdir(parents=True)
    log = (folder / "proxy.log").open("wb")
    if kind == "nginx":
        short = {"grpc_read_timeout 330s": f"grpc_read_timeout {timeout}"} if timeout else {}
        config = folder / "nginx.conf"
        config.write_text(rendered(LOCAL / "nginx.conf", ports | short))
        argv = [str(NGINX), "-p", str(folder), "-e", "stderr", "-c", str(config)]
        if os.geteuid() == 0:  # workers would be nobody, who cannot enter the test's private folder
            argv += ["-g", "user root;"]
    else:
        short = {"timeout server 330s": f"timeout server {timeout}"} if timeout else {}
        config = folder / "haproxy.cfg"
        config.write_text(rendered(LOCAL / "haproxy.cfg", ports | {STATS: stats} | short))
        argv = [str(HAPROXY), "-db", "-f", str(config)]
    process = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    return Proxy(kind, listen, process, stats if kind == "haproxy" else "")


def wait_through(proxy: Proxy) -> None:
    """Until a health check answered by a gateway comes back through the proxy."""
    deadline = time.monotonic() + TIMEOUT_S
    with grpc.insecure_channel(proxy.address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while True:
            assert proxy.process.poll() is None, f"{proxy.name} exited: see its proxy.log"
            with contextlib.suppress(grpc.RpcError):
                reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=2)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            assert time.monotonic() < deadline, f"no gateway answers through {proxy.name}"
            time.sleep(0.1)


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class Supervised:
    """`cogmesh up --json` and its output, read on a thread of its own so that waits can time out."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.lines: list[dict[str, Any]] = []
        self.pids: dict[str, int] = {}
        self._changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            item = json.loads(line)
            if match := re.match(r"([\w-]+)\s+SERVING\s+\S+\s+\(pid (\d+)\)", item.get("text", "")):
                self.pids[match.group(1)] = int(match.group(2))
            with self._changed:
                self.lines.append(item)
                self._changed.notify_all()
        with self._changed:
            self.lines.append({"event": "exited"})
            self._changed.notify_all()

    def wait_for(self, text: str, timeout_s: float) -> None:
        """Until a line of the output contains `text` (a supervisor report, or "ready")."""

        def seen() -> bool:
            return any(text in item.get("text", item.get("event", "")) for item in self.lines)

        with self._changed:
            if not self._changed.wait_for(lambda: seen() or self.lines[-1:] == [{"event": "exited"}], timeout_s):
                raise AssertionError(f"cogmesh up printed no {text!r} in {timeout_s:g} s; it printed {self.lines}")
            assert seen(), f"cogmesh up exited; it printed {self.lines}"


@dataclass
class Topology:
    up: Supervised
    addresses: dict[str, list[str]]  # every replica's address, by service
    proxies: list[Proxy]
    folder: Path

    @property
    def gateways(self) -> list[str]:
        return self.addresses["gateway"]


@pytest.fixture(scope="module")
def topology(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Topology]:
    folder = tmp_path_factory.mktemp("load-balancer")
    prefix = unique_prefix("load-balancer")
    ports = iter(free_ports(2 * len(ORDER) + 1))
    addresses = {service: [f"127.0.0.1:{next(ports)}" for _ in range(2)] for service in ORDER}
    env = dict(os.environ) | {
        **{f"COGMESH_{service.upper()}_ADDR": ",".join(listed) for service, listed in addresses.items()},
        "COGMESH_WEB_ADDR": f"127.0.0.1:{next(ports)}",  # the browser edge: a free port of its own too
        "COGMESH_REDIS_URL": redis_url,  # shared by every replica: sessions, leases, event logs
        "COGMESH_REDIS_KEY_PREFIX": prefix,
        "COGMESH_DRAIN_S": str(DRAIN_S),
        "COGMESH_SHUTDOWN_GRACE_S": "30",
        "COGMESH_HEARTBEAT_S": str(HEARTBEAT_S),
        "COGMESH_LOCAL_REPLY_TOKENS": "12",
        "COGMESH_LOCAL_DELAY_MS": "40",  # turns of a few hundred ms that run while replicas stop
        "COGMESH_LOG_LEVEL": "info",
    }
    process = subprocess.Popen(
        [str(BIN / "cogmesh"), "up", "--json", "--log-dir", str(folder / "logs"), "--ready-timeout", "180"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    up = Supervised(process)
    proxies: list[Proxy] = []
    try:
        up.wait_for("ready", 12 * 180)
        proxies = [start_proxy(kind, folder / kind, addresses["gateway"]) for kind in ("nginx", "haproxy")]
        for proxy in proxies:
            wait_through(proxy)
        yield Topology(up, addresses, proxies, folder)
    finally:
        for proxy in proxies:
            stop(proxy.process)
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(120)
            except subprocess.TimeoutExpired:
                process.kill()
        delete_prefix(redis_url, prefix)


@dataclass
class Session:
    session_id: str
    proxy: Proxy
    turns: list[list[events_pb2.RuntimeEvent]] = field(default_factory=list)
    watchers: dict[str, list[int]] = field(default_factory=dict)  # by the gateway watched first


async def run_turns(session: Session, until: asyncio.Event) -> None:
    """Turns through the session's proxy, one after the other, until told to stop."""
    async with GatewayClient(session.proxy.address, timeout_s=TIMEOUT_S) as client:
        n = 0
        while not until.is_set():
            n += 1
            content = f"What is {n} * 7?" if n % 2 else f"replicas keep turn {n} going"
            session.turns.append([event async for event in client.send_message(session.session_id, content)])


async def watch(session: Session, gateways: list[str], first: str) -> None:
    """Every event of the session, from the gateway `first` directly (then the next one if it stops)."""
    order = [first, *(g for g in gateways if g != first)]
    seen = session.watchers.setdefault(first, [])
    async with GatewayClient(order, timeout_s=TIMEOUT_S, max_resumes=20) as client:
        async for event in client.subscribe(session.session_id):
            seen.append(event.seq)


async def until(condition: Callable[[], bool], what: str, timeout_s: float = TIMEOUT_S) -> None:
    """Poll `condition` (turns and watchers change it on their own tasks) until it holds."""
    try:
        async with asyncio.timeout(timeout_s):
            while not condition():  # noqa: ASYNC110 - a poll of state other tasks change
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"waited {timeout_s:g} s for {what}") from None


async def marked_down(haproxy: Proxy, server: str) -> dict[str, str]:
    """HAProxy's row of `server` as soon as it says DOWN."""
    async with asyncio.timeout(TIMEOUT_S):
        while (row := haproxy.servers()[server])["status"] != "DOWN":  # noqa: ASYNC110 - polls HAProxy
            await asyncio.sleep(0.05)
    return row


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def gateway_stub(topology: Topology) -> AsyncIterator[gateway_pb2_grpc.GatewayServiceStub]:
    async with grpc.aio.insecure_channel(topology.proxies[0].address) as channel:
        yield gateway_pb2_grpc.GatewayServiceStub(channel)


async def test_nothing_is_lost_while_one_replica_of_each_service_stops_in_turn(topology: Topology) -> None:
    up, nginx, haproxy = topology.up, *topology.proxies
    assert {name: row["check_status"] for name, row in haproxy.servers().items() if "gateway" in name} == {
        "gateway-1": "L7OK",  # the grpc.health.v1 check HAProxy sends got SERVING from each gateway
        "gateway-2": "L7OK",
    }
    sessions: list[Session] = []
    async with GatewayClient(nginx.address, timeout_s=TIMEOUT_S) as client:
        for n in range(SESSIONS):
            sessions.append(Session((await client.create_session()).session_id, (nginx, haproxy)[n % 2]))
    stop_turns = asyncio.Event()
    watchers = [
        asyncio.create_task(watch(s, topology.gateways, gateway)) for s in sessions for gateway in topology.gateways
    ]
    runners = [asyncio.create_task(run_turns(s, stop_turns)) for s in sessions]
    completed = lambda: sum(len(s.turns) for s in sessions)  # noqa: E731

    def fail_fast() -> bool:
        for task in runners + watchers:
            if task.done() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
        return True

    try:
        await until(lambda: fail_fast() and completed() >= SESSIONS, "first turns")
        for k, service in enumerate(ORDER):
            name = f"{service}-{k % 2 + 1}"  # replica 1 of some services, replica 2 of others
            pid = up.pids[name]
            before = completed()
            os.kill(pid, signal.SIGTERM)
            print(f"{time.strftime('%X')} SIGTERM {name}; {completed()} turns so far", flush=True)
            if service == "gateway":  # HAProxy's health check sees the drain (NOT_SERVING) before the exit
                row = await marked_down(haproxy, name)
                assert row["check_status"] == "L7TOUT", row  # a check answered (not SERVING), not a refused connection
            await asyncio.to_thread(up.wait_for, f"{name} exited with code", TIMEOUT_S)
            # Turns go on through the stop: as many again as there are sessions, while it restarts.
            await until(lambda before=before: fail_fast() and completed() >= before + SESSIONS, f"turns past {name}")
            await asyncio.to_thread(up.wait_for, f"{name} is SERVING again", 3 * TIMEOUT_S)
            print(f"{time.strftime('%X')} {name} is back; {completed()} turns so far", flush=True)
        await until(lambda: haproxy.servers()[name]["status"] == "UP", f"HAProxy to see {name} UP again")
    finally:
        stop_turns.set()
        await asyncio.wait_for(asyncio.gather(*runners, return_exceptions=True), TIMEOUT_S)
    for runner in runners:
        runner.result()  # a turn that failed fails the test here

    async with GatewayClient(haproxy.address, timeout_s=TIMEOUT_S) as client:
        for session in sessions:
            replay = [e async for e in client.subscribe(session.session_id, stop_when_idle=True)]
            seqs = [e.seq for e in replay]
            assert seqs == list(range(1, len(replay) + 1))
            caught_up = lambda s=session, last=seqs[-1]: all(w and w[-1] >= last for w in s.watchers.values())  # noqa: E731
            await until(caught_up, "the watchers to catch up")
            for gateway, seen in session.watchers.items():
                assert seen == seqs, f"watcher first on {gateway} differs from the replay of {session.session_id}"
            for turn in session.turns:  # every turn completed, none failed or was cut
                assert turn[-1].HasField("final"), turn[-1]
                assert [e.seq for e in turn] == list(range(turn[0].seq, turn[-1].seq + 1))
            assert not any(e.HasField("error") for e in replay)
    for watcher in watchers:
        watcher.cancel()
    await asyncio.gather(*watchers, return_exceptions=True)
    print(f"{completed()} turns in {SESSIONS} sessions, {len(ORDER)} replicas stopped and restarted")


@pytest.mark.parametrize("kind", ["nginx", "haproxy"])
async def test_heartbeats_keep_an_idle_subscribe_open_past_the_proxys_read_timeout(
    topology: Topology, gateway_stub: gateway_pb2_grpc.GatewayServiceStub, kind: str
) -> None:
    session_id = (await gateway_stub.CreateSession(gateway_pb2.CreateSessionRequest())).session.session_id
    proxy = start_proxy(kind, topology.folder / f"{kind}-short", topology.gateways, timeout=f"{IDLE_TIMEOUT_S}s")
    try:
        await asyncio.to_thread(wait_through, proxy)
        async with grpc.aio.insecure_channel(proxy.address) as channel:
            stub = gateway_pb2_grpc.GatewayServiceStub(channel)
            stream = stub.Subscribe(gateway_pb2.SubscribeRequest(session_id=session_id))
            heartbeats, started = 0, time.monotonic()
            while time.monotonic() - started < 3 * IDLE_TIMEOUT_S:  # no event at all: only heartbeats
                message = await asyncio.wait_for(stream.read(), TIMEOUT_S)
                assert message is not grpc.aio.EOF and message.heartbeat, message
                heartbeats += 1
            stream.cancel()
        assert heartbeats >= 3 * IDLE_TIMEOUT_S / HEARTBEAT_S / 2
    finally:
        stop(proxy.process)


@pytest.mark.parametrize("kind", ["nginx", "haproxy"])
async def test_a_stream_cut_for_its_connections_age_reaches_the_client_as_unavailable(
    kind: str, tmp_path: Path
) -> None:
    # The gateway cuts streams on a connection older than max_connection_age_s + grace; behind a
    # proxy the status must still arrive as UNAVAILABLE, which the SDKs resume on (not a reset).
    settings = SUITE_SETTINGS.model_copy(update={"max_connection_age_s": 0.5, "max_connection_age_grace_s": 0.5})
    suite = await start_suite(settings)
    proxy = start_proxy(kind, tmp_path / kind, [suite.gateway_address] * 2)
    try:
        await asyncio.to_thread(wait_through, proxy)
        async with grpc.aio.insecure_channel(proxy.address) as channel:
            stub = gateway_pb2_grpc.GatewayServiceStub(channel)
            session_id = (await stub.CreateSession(gateway_pb2.CreateSessionRequest())).session.session_id
            with pytest.raises(grpc.aio.AioRpcError) as cut:
                async with asyncio.timeout(TIMEOUT_S):
                    async for _ in stub.Subscribe(gateway_pb2.SubscribeRequest(session_id=session_id)):
                        pass  # heartbeats, until the gateway's connection to the proxy is too old
        assert (cut.value.code(), cut.value.details()) == (grpc.StatusCode.UNAVAILABLE, "max connection age")
    finally:
        stop(proxy.process)
        await suite.stop(0)
