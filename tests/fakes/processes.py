"""Start the test tool servers as real child processes, and stop them for sure."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
NODE_TOOLS = ROOT / "tests" / "node_tools"
EVERYTHING = NODE_TOOLS / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
NODE_TOOL_SERVER = NODE_TOOLS / "tool_server.js"
PYTHON_MCP = [sys.executable, "-m", "tests.fakes.mcp_server"]
START_TIMEOUT_S = 20.0


def require_node_tools() -> None:
    """The Node servers come from npm: fail with the fix instead of a confusing error."""
    if not EVERYTHING.is_file() or not (NODE_TOOLS / "node_modules" / "@grpc" / "grpc-js").is_dir():
        raise RuntimeError(f"Node test servers are not installed: run `npm ci --prefix {NODE_TOOLS.relative_to(ROOT)}`")


async def _wait_for_port(port: int, process: asyncio.subprocess.Process) -> None:
    deadline = asyncio.get_running_loop().time() + START_TIMEOUT_S
    while asyncio.get_running_loop().time() < deadline:
        if process.returncode is not None:
            raise RuntimeError(f"server exited with {process.returncode} before listening on {port}")
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.05)
            continue
        writer.close()
        return
    raise TimeoutError(f"nothing listens on port {port} after {START_TIMEOUT_S}s")


async def stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), 5)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()


@contextlib.asynccontextmanager
async def node_tool_server() -> AsyncIterator[str]:
    """The Node ToolService; yields its address."""
    require_node_tools()
    process = await asyncio.create_subprocess_exec(
        "node", str(NODE_TOOL_SERVER), "0", stdout=asyncio.subprocess.PIPE, start_new_session=True
    )
    try:
        assert process.stdout is not None
        line = (await asyncio.wait_for(process.stdout.readline(), START_TIMEOUT_S)).decode().split()
        if len(line) != 2 or line[0] != "LISTENING":
            raise RuntimeError(f"node tool server did not start: {line}")
        yield f"127.0.0.1:{line[1]}"
    finally:
        await stop(process)


@contextlib.asynccontextmanager
async def mcp_http_server(kind: str) -> AsyncIterator[str]:
    """An MCP server over streamable HTTP ("python" or "everything"); yields its /mcp URL."""
    port = free_port()
    env = dict(os.environ)
    if kind == "everything":
        require_node_tools()
        command = ["node", str(EVERYTHING), "streamableHttp"]
        env["PORT"] = str(port)
    else:
        command = [*PYTHON_MCP, "http", "--port", str(port)]
    process = await asyncio.create_subprocess_exec(
        *command,
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        await _wait_for_port(port, process)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        await stop(process)
