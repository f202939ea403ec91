"""The LangGraph peer's virtualenv and server: `langgraph dev` in its in-memory mode, offline.

The venv lives in bench/out/peer-venv (gitignored) and is created on first use from
requirements.txt; it is rebuilt when requirements.txt changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

from bench.harness import free_ports

HERE = Path(__file__).resolve().parent
VENV = HERE.parent / "out" / "peer-venv"
REQUIREMENTS = HERE / "requirements.txt"
STAMP = VENV / "requirements.sha256"
LANGGRAPH = VENV / "bin" / "langgraph"
START_TIMEOUT_S = 90.0
# Nothing may reach the internet at run time: no LangSmith tracing, no CLI analytics, no keys
# (without a license or LangSmith key, langgraph-api skips its metadata loop).
OFFLINE_ENV = {
    "LANGSMITH_TRACING": "false",
    "LANGSMITH_TRACING_V2": "false",
    "LANGCHAIN_TRACING_V2": "false",
    "LANGGRAPH_CLI_NO_ANALYTICS": "1",
    "LANGSMITH_API_KEY": "",
    "LANGCHAIN_API_KEY": "",
    "LANGGRAPH_CLOUD_LICENSE_KEY": "",
    "LANGSMITH_CONTROL_PLANE_API_KEY": "",
    "LOG_LEVEL": "WARNING",
}


def _requirements_hash() -> str:
    return hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()


def venv_ready() -> bool:
    """True when the peer's venv exists and matches requirements.txt."""
    return LANGGRAPH.exists() and STAMP.exists() and STAMP.read_text().strip() == _requirements_hash()


def ensure_venv() -> None:
    """Create the peer's venv on first use (a minute or two: pip from PyPI)."""
    if venv_ready():
        return
    print(f"creating the LangGraph peer's virtualenv in {VENV} ...", file=sys.stderr, flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
    pip = [str(VENV / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "-r", str(REQUIREMENTS)], check=True)
    STAMP.write_text(_requirements_hash())


def peer_env() -> dict[str, str]:
    # Our own venv's variables must not leak into the peer's interpreter.
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = f"{VENV / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env | OFFLINE_ENV


@contextlib.asynccontextmanager
async def running_peer(log_path: Path) -> AsyncIterator[str]:
    """`langgraph dev` on a free port; yields its base URL once /ok answers."""
    if not venv_ready():
        raise RuntimeError(f"the peer's virtualenv is missing: run ensure_venv() (it installs into {VENV})")
    port = free_ports(1)[0]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            str(LANGGRAPH),
            "dev",
            "--no-browser",
            "--no-reload",
            "--port",
            str(port),
            "--config",
            str(HERE / "langgraph.json"),
            cwd=HERE,
            env=peer_env(),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        async with httpx.AsyncClient(base_url=url, timeout=2.0) as client:
            while True:
                if process.returncode is not None:
                    raise RuntimeError(f"langgraph dev exited with {process.returncode}; see {log_path}")
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get("/ok")).status_code == 200:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"langgraph dev did not answer /ok within {START_TIMEOUT_S:.0f}s; see {log_path}"
                    )
                await asyncio.sleep(0.25)
        yield url
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 10)
            except TimeoutError:
                process.kill()
                await process.wait()
