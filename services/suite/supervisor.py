"""`cogmesh up`: one process per service, supervised.

Starts the services in dependency order, waits until each health check says
SERVING, restarts a service that crashes (with backoff) and stops them all
cleanly on Ctrl-C or SIGTERM.
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

from services.kit.config import Settings

# Start order: dependencies first, the public gateway last.
ORDER = ["models", "sessions", "memory", "context", "policy", "runtime", "gateway"]
# HTTP processes in front of the gateway, started after it: ready when GET /healthz answers 200.
EDGES = ["web"]
MODULES = {name: f"services.{name}" for name in ORDER} | {"gateway": "gateway", "web": "gateway.web"}
MAX_BACKOFF_S = 30.0


class StartupError(RuntimeError):
    pass


def address_of(settings: Settings, name: str) -> str:
    return str(getattr(settings, f"{name}_addr"))


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
    name: str
    address: str
    log_path: Path
    process: asyncio.subprocess.Process | None = None
    restarts: int = 0
    watcher: asyncio.Task[None] | None = field(default=None, repr=False)


class Supervisor:
    def __init__(
        self,
        settings: Settings,
        log_dir: Path,
        report: Callable[[str], None],
        ready_timeout_s: float = 30.0,
        edges: Sequence[str] = (),
    ):
        """`edges`: which of EDGES to start after the gateway (`cogmesh up` starts the browser edge;
        the benchmarks, which give only the gRPC services free ports, start none)."""
        self.settings, self.log_dir, self.report = settings, log_dir, report
        self.ready_timeout_s = ready_timeout_s
        self.names = ORDER + [name for name in EDGES if name in edges]
        self.children = {name: Child(name, address_of(settings, name), log_dir / f"{name}.log") for name in self.names}
        self._stopping = False

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        for name in ORDER:
            env[f"COGMESH_{name.upper()}_ADDR"] = address_of(self.settings, name)
        env.pop("COGMESH_LISTEN", None)  # each child gets its own --listen
        if self.settings.api_keys_file is None:
            env["COGMESH_DEV_MODE"] = "true"  # `cogmesh up` without keys is the local dev suite
        return env

    async def _spawn(self, child: Child) -> None:
        log_file = child.log_path.open("ab")
        metrics: list[str] = []
        if self.settings.metrics_port and child.name in ORDER:  # one /metrics port per gRPC child: base, base + 1, ...
            metrics = ["--metrics-port", str(self.settings.metrics_port + ORDER.index(child.name))]
        try:
            child.process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                MODULES[child.name],
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

    async def _start_one(self, child: Child) -> None:
        await self._spawn(child)
        assert child.process is not None
        exited = asyncio.create_task(child.process.wait())
        ready = wait_http_ready if child.name in EDGES else wait_serving
        healthy = asyncio.create_task(ready(child.address, self.ready_timeout_s))
        done, _ = await asyncio.wait({exited, healthy}, return_when=asyncio.FIRST_COMPLETED)
        if exited in done:
            healthy.cancel()
            raise StartupError(
                f"{child.name} exited with code {exited.result()} while starting on {child.address}:\n"
                + self._tail(child)
            )
        exited.cancel()
        try:
            healthy.result()
        except TimeoutError as exc:
            raise StartupError(f"{child.name}: {exc}\n{self._tail(child)}") from exc

    async def start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        try:
            for name in self.names:
                child = self.children[name]
                await self._start_one(child)
                self.report(
                    f"  {name:<9} SERVING  {child.address}  (pid {child.process.pid if child.process else '?'})"
                )
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
        for name in reversed(self.names):
            child = self.children[name]
            if child.watcher is not None:
                child.watcher.cancel()
            proc = child.process
            if proc is None or proc.returncode is not None:
                continue
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), grace)
            except TimeoutError:
                self.report(f"! {name} did not stop within {grace:g}s; killing it")
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
