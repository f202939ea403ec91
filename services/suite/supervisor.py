"""`cogmesh up`: the services as supervised processes.

Starts the services in dependency order, waits until each health check says
SERVING, restarts a process that crashes (with backoff) and stops them all
cleanly on Ctrl-C or SIGTERM.

It starts nothing over a port another process holds (naming that process), counts as
SERVING only an answer from its own child, and its children die with it: each runs
under services.suite.child, which has the kernel send it SIGTERM when the supervisor dies.

Replicas: the runtime runs as several workers, one per core and at least two by
default (COGMESH_RUNTIME_WORKERS), every other service as COGMESH_REPLICAS processes
(default 1; more need Redis, where replicas share their state). Each process has its
own port: the addresses listed in COGMESH_<SERVICE>_ADDR, or else that address's port,
port + 10, port + 20... (runtime workers on 50052, 50062, ...). Every process is told
the whole list, and internal clients spread their calls over it with gRPC's
round_robin. Not one port shared with SO_REUSEPORT: the kernel would spread
connections, not calls, and each caller keeps one HTTP/2 connection, so all turns of a
gateway would land on one worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.kit import addresses
from services.suite import listeners
from services.suite.settings import SuiteSettings

# Start order: dependencies first, the public gateway last.
ORDER = ["models", "sessions", "memory", "context", "policy", "runtime", "gateway"]
# HTTP processes in front of the gateway, started after it: ready when GET /healthz answers 200.
EDGES = ["web"]
MODULES = {name: f"services.{name}" for name in ORDER} | {"gateway": "gateway", "web": "gateway.web"}
LAUNCHER = "services.suite.child"  # runs a module as a child that dies with its supervisor
MAX_BACKOFF_S = 30.0


class StartupError(RuntimeError):
    pass


REPLICA_PORT_STEP = 10  # replica k of a service listens on its port + 10 * k


def address_of(settings: SuiteSettings, name: str) -> str:
    return str(getattr(settings, f"{name}_addr"))


def cpu_count() -> int:
    """Cores this process may run on (its affinity mask), as `cogmesh up` counts them."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def runtime_workers(settings: SuiteSettings) -> int:
    return settings.runtime_workers or max(2, cpu_count())


def replica_addresses(settings: SuiteSettings, service: str) -> list[str]:
    """Where `cogmesh up` runs each process of `service`: the addresses of a list, or port, port + 10, ..."""
    variable = f"COGMESH_{service.upper()}_ADDR"
    address = address_of(settings, service)
    try:
        listed = addresses.replicas(address)
    except ValueError as exc:
        raise StartupError(f"{variable}: {exc}") from None
    if len(listed) == 1:
        if address.startswith(addresses.DNS_PREFIXES):
            raise StartupError(f"{variable}={address!r}: `cogmesh up` binds host:port addresses, not a dns: name")
        count = runtime_workers(settings) if service == "runtime" else settings.replicas
        host, _, port = address.rpartition(":")
        listed = [f"{host}:{int(port) + REPLICA_PORT_STEP * k}" for k in range(count)]
        if count > 1:
            try:
                addresses.replicas(",".join(listed))
            except ValueError as exc:
                raise StartupError(f"{variable}: {exc}") from None
    if len(listed) > 1 and service != "runtime" and not settings.redis_url:
        raise StartupError(
            f"{len(listed)} {service} processes would each keep their own state: replicas share it only "
            "through Redis (COGMESH_REDIS_URL or --redis-url)"
        )
    return listed


async def wait_serving(address: str, timeout_s: float) -> None:
    """Poll grpc.health.v1 until the server answers SERVING."""
    deadline = time.monotonic() + timeout_s
    async with grpc.aio.insecure_channel(address) as channel:
        stub: Any = health_pb2_grpc.HealthStub(channel)
        while True:
            with contextlib.suppress(grpc.aio.AioRpcError):
                reply = await stub.Check(health_pb2.HealthCheckRequest(), timeout=1.0)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{address} not SERVING after {timeout_s:g}s")
            await asyncio.sleep(0.05)


async def wait_http_ready(address: str, timeout_s: float) -> None:
    """Poll http://address/healthz until it answers 200 (the edge and the gateway behind it are up)."""
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=1.0) as http:
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if (await http.get(f"http://{address}/healthz")).status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"http://{address}/healthz not ready after {timeout_s:g}s")
            await asyncio.sleep(0.05)


@dataclass
class Child:
    name: str  # the service, or service-N for one of its replicas
    service: str
    address: str
    log_path: Path
    metrics_offset: int
    process: asyncio.subprocess.Process | None = None
    restarts: int = 0
    watcher: asyncio.Task[None] | None = field(default=None, repr=False)


class Supervisor:
    def __init__(
        self,
        settings: SuiteSettings,
        log_dir: Path,
        report: Callable[[str], None],
        ready_timeout_s: float = 30.0,
        edges: Sequence[str] = (),
    ):
        """`edges`: which of EDGES to start after the gateway (`cogmesh up` starts the browser edge;
        the benchmarks, which give only the gRPC services free ports, start none)."""
        self.settings, self.log_dir, self.report = settings, log_dir, report
        self.ready_timeout_s = ready_timeout_s
        self.addresses = {service: replica_addresses(settings, service) for service in ORDER}
        self.children: dict[str, Child] = {}
        extra = len(ORDER)  # /metrics ports: base + the service's place in ORDER, then extra replicas
        for service in ORDER:
            listed = self.addresses[service]
            for k, address in enumerate(listed):
                name = service if len(listed) == 1 else f"{service}-{k + 1}"
                offset = ORDER.index(service) if k == 0 else extra
                extra += k > 0
                self.children[name] = Child(name, service, address, log_dir / f"{name}.log", offset)
        for edge in [name for name in EDGES if name in edges]:  # no /metrics port: not a gRPC service
            self.children[edge] = Child(edge, edge, address_of(settings, edge), log_dir / f"{edge}.log", -1)
        self._stopping = False

    def of(self, service: str) -> list[Child]:
        """The processes of one service."""
        return [child for child in self.children.values() if child.service == service]

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        for name in ORDER:
            env[f"COGMESH_{name.upper()}_ADDR"] = ",".join(self.addresses[name])
        env.pop("COGMESH_LISTEN", None)  # each child gets its own --listen
        if self.settings.api_keys_file is None:
            env["COGMESH_DEV_MODE"] = "true"  # `cogmesh up` without keys is the local dev suite
        return env

    async def _spawn(self, child: Child) -> None:
        log_file = child.log_path.open("ab")
        metrics: list[str] = []
        if self.settings.metrics_port and child.metrics_offset >= 0:  # one /metrics port per gRPC child
            metrics = ["--metrics-port", str(self.settings.metrics_port + child.metrics_offset)]
        try:
            child.process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                LAUNCHER,
                str(os.getpid()),
                MODULES[child.service],
                "--listen",
                child.address,
                *metrics,
                env=self._env(),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log_file,
                stderr=log_file,
                start_new_session=True,  # Ctrl-C reaches us only; we stop children in order
            )
        finally:
            log_file.close()

    def _tail(self, child: Child, lines: int = 5) -> str:
        try:
            text = child.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])

    async def _ready(self, child: Child) -> None:
        """Until `child` answers its health check, and the answer is its own: a port held by another
        process (a leftover of an earlier run) answers SERVING just the same while our child fails to bind."""
        assert child.process is not None
        deadline = time.monotonic() + self.ready_timeout_s
        ready = wait_http_ready if child.service in EDGES else wait_serving
        await ready(child.address, self.ready_timeout_s)
        port = listeners.split_address(child.address)[1]
        while listeners.listens(child.process.pid, port) is False:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{child.address} answers, but not from {child.name} (pid {child.process.pid}): "
                    f"port {port} is held by {listeners.holder(port)}"
                )
            await asyncio.sleep(0.05)

    def _held(self, child: Child) -> str:
        """'; port N is held by ...' when another process listens on the child's port, else ''."""
        port = listeners.split_address(child.address)[1]
        pid = child.process.pid if child.process else -1
        if listeners.listens(pid, port) or listeners.bindable(child.address):
            return ""
        return f"; port {port} is held by {listeners.holder(port)}"

    async def _start_one(self, child: Child) -> None:
        await self._spawn(child)
        assert child.process is not None
        exited = asyncio.create_task(child.process.wait())
        healthy = asyncio.create_task(self._ready(child))
        done, _ = await asyncio.wait({exited, healthy}, return_when=asyncio.FIRST_COMPLETED)
        if exited in done:
            healthy.cancel()
            raise StartupError(
                f"{child.name} exited with code {exited.result()} while starting on {child.address}"
                f"{self._held(child)}:\n" + self._tail(child)
            )
        exited.cancel()
        try:
            healthy.result()
        except TimeoutError as exc:
            raise StartupError(f"{child.name}: {exc}\n{self._tail(child)}") from exc

    def ports(self) -> list[tuple[str, str]]:
        """(what, address) of every port the children will listen on: services, edges and /metrics."""
        ports = [(child.name, child.address) for child in self.children.values()]
        if self.settings.metrics_port:
            for child in self.children.values():
                if child.metrics_offset >= 0:
                    port = self.settings.metrics_port + child.metrics_offset
                    ports.append((f"{child.name} /metrics", f"{self.settings.metrics_host}:{port}"))
        return ports

    def check_ports(self) -> None:
        """Refuse to start over ports another process holds (an earlier `cogmesh up` whose services
        outlived it, say): our children would fail to bind, and its servers answer our health checks."""
        held = [
            f"port {listeners.split_address(address)[1]} ({what}, {address}) is held by "
            f"{listeners.holder(listeners.split_address(address)[1])}"
            for what, address in self.ports()
            if not listeners.bindable(address)
        ]
        if held:
            raise StartupError(
                "not starting: " + "; ".join(held) + ". Stop that process, or give the services other addresses "
                "(COGMESH_<SERVICE>_ADDR, COGMESH_METRICS_PORT)"
            )

    async def start(self) -> None:
        self.check_ports()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        try:
            # One at a time, dependencies first: each gets its whole ready timeout, not shared with a sibling.
            for child in self.children.values():
                await self._start_one(child)
                pid = child.process.pid if child.process else "?"
                self.report(f"  {child.name:<10} SERVING  {child.address}  (pid {pid})")
                child.watcher = asyncio.create_task(self._watch(child))
        except BaseException:
            await self.stop()
            raise

    async def _watch(self, child: Child) -> None:
        """Restart a crashed service with exponential backoff until we are stopping."""
        while True:
            assert child.process is not None
            code = await child.process.wait()
            if self._stopping:
                return
            child.restarts += 1
            delay = min(MAX_BACKOFF_S, 0.5 * 2 ** min(child.restarts - 1, 6))
            self.report(f"! {child.name} exited with code {code}; restart #{child.restarts} in {delay:g}s")
            await asyncio.sleep(delay)
            if self._stopping:
                return
            try:
                await self._start_one(child)
                self.report(f"  {child.name} is SERVING again on {child.address}")
            except StartupError as exc:
                self.report(f"! {exc}")

    async def stop(self, grace_s: float | None = None) -> None:
        """SIGTERM every child, the edge and gateway first; SIGKILL what is still alive after the grace period."""
        self._stopping = True
        grace = (self.settings.shutdown_grace_s if grace_s is None else grace_s) + 5.0
        for service in reversed(ORDER + EDGES):
            await asyncio.gather(*(self._stop_one(child, grace) for child in self.of(service)))

    async def _stop_one(self, child: Child, grace: float) -> None:
        if child.watcher is not None:
            child.watcher.cancel()
        proc = child.process
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), grace)
        except TimeoutError:
            self.report(f"! {child.name} did not stop within {grace:g}s; killing it")
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
