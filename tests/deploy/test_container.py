"""The container image: Dockerfile contract and hadolint, and the entry point that runs a service
or checks its grpc.health.v1 status (what Docker's HEALTHCHECK and compose run)."""

from __future__ import annotations

import asyncio
import http.server
import os
import signal
import sys
import threading
from pathlib import Path

import pytest

from deploy import validate
from services.kit.server import start
from services.models import main as models_main
from services.models.settings import ModelsSettings
from tests.integration.test_tracing import free_port

ENTRYPOINT = validate.DEPLOY / "docker" / "entrypoint.py"
TIMEOUT_S = 15.0


def test_the_dockerfile_passes_hadolint_and_the_image_contract() -> None:
    assert validate.check_dockerfile() == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda t: t.replace("USER 10001:10001", "USER root"), "the final USER is root"),
        (lambda t: t.replace("USER 10001:10001\n", ""), "sets no USER"),
        (lambda t: t.replace("ENV PATH=", "ENV OPENAI_API_KEY=sk-abcdefabcdefabcdef PATH="), "looks like a secret"),
        (
            lambda t: t.replace('ENTRYPOINT ["python", "/opt/cogmesh/entrypoint.py"]', "ENTRYPOINT python x.py"),
            "exec form",
        ),
        (lambda t: t[t.index("FROM ${PYTHON_IMAGE} AS runtime") :], "not multi-stage"),
    ],
)
def test_the_dockerfile_check_catches_broken_images(tmp_path: Path, change: object, expected: str) -> None:
    broken = tmp_path / "Dockerfile"
    broken.write_text(change(validate.DOCKERFILE.read_text()))  # type: ignore[operator]
    problems = validate.check_dockerfile(broken, lint=False)
    assert any(expected in p for p in problems), problems


async def health(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(ENTRYPOINT),
        "health",
        *args,
        env={**os.environ, **(env or {})},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(process.communicate(), TIMEOUT_S)
    return process.returncode or 0, out.decode()


async def test_health_check_exit_codes_follow_the_servers_status() -> None:
    running = await start(models_main.build, ModelsSettings(), "127.0.0.1:0")
    try:
        assert await health(running.address) == (0, f"{running.address}: SERVING\n")
        code, out = await health(running.address, "cogmesh.models.v1.ModelsService")
        assert code == 0, out
        code, out = await health(running.address, "no.such.Service")
        assert code == 1 and "NOT_FOUND" in out
        # The address comes from COGMESH_LISTEN when not given, as in a container.
        code, _ = await health(env={"COGMESH_LISTEN": f"0.0.0.0:{running.port}", "COGMESH_HEALTH_ADDR": ""})
        assert code == 0
        await running._health.enter_graceful_shutdown()  # what a draining server reports
        code, out = await health(running.address)
        assert code == 1 and "NOT_SERVING" in out
    finally:
        await running.stop(0)
    code, out = await health(running.address)
    assert code == 1 and "UNAVAILABLE" in out


async def test_the_entry_point_runs_a_service_that_drains_on_sigterm() -> None:
    port = free_port()
    env = {**os.environ, "COGMESH_LISTEN": f"127.0.0.1:{port}", "COGMESH_DRAIN_S": "0.2"}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(ENTRYPOINT),
        "models",
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(TIMEOUT_S):
            while (await health(f"127.0.0.1:{port}"))[0] != 0:  # noqa: ASYNC110 - polling a process
                await asyncio.sleep(0.1)
    finally:
        process.send_signal(signal.SIGTERM)  # the service itself got it: exec made it this process
        _, stderr = await asyncio.wait_for(process.communicate(), TIMEOUT_S)
    assert process.returncode == 0, stderr.decode()[-2000:]
    assert b'"draining"' in stderr and b'"stopped"' in stderr


async def test_the_entry_point_rejects_unknown_services() -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(ENTRYPOINT), "billing", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await asyncio.wait_for(process.communicate(), TIMEOUT_S)
    assert process.returncode == 2 and b"unknown service 'billing'" in out


async def test_the_web_edges_health_check_is_http() -> None:
    class Healthz(http.server.BaseHTTPRequestHandler):
        status = 200

        def do_GET(self) -> None:
            self.send_response(self.status if self.path == "/healthz" else 404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Healthz)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/healthz"
    try:
        code, out = await health(url)
        assert code == 0 and out == f"{url}: 200\n"
        Healthz.status = 503  # the gateway behind the edge is not SERVING
        code, out = await health(url)
        assert code == 1 and "503" in out
    finally:
        server.shutdown()
        server.server_close()
