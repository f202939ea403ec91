"""A Python MCP server for tests, on the `mcp` SDK's MCPServer, over stdio or streamable HTTP.

    python -m tests.fakes.mcp_server stdio
    python -m tests.fakes.mcp_server http --port 8931      # serves /mcp

Tools: `add` (two numbers), `shout` (upper-cases text), `fail` (always raises: a tool
error), `sleep` (waits, to test timeouts and cancellation), `pid` (the server's
process id, to tell a restarted server from the first one), `whoami` (the `_meta`
cogmesh sent with the call, as JSON: session, tenant, scope), `blob` (a result of any
size, after an optional wait: numbered 15-byte lines, so a page of it shows where it comes from).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("cogmesh-test-tools")


@server.tool()
def add(a: float, b: float) -> str:
    """Add two numbers."""
    total = a + b
    return str(int(total)) if total == int(total) else str(total)


@server.tool()
def shout(text: str) -> str:
    """Return the text in upper case."""
    return text.upper()


@server.tool()
def fail(message: str = "boom") -> str:
    """Always fails with the given message."""
    raise ValueError(message)


@server.tool()
async def sleep(seconds: float) -> str:
    """Wait, then say how long."""
    await asyncio.sleep(seconds)
    return f"slept {seconds:g}s"


@server.tool()
def pid() -> str:
    """The server's process id."""
    return str(os.getpid())


@server.tool()
def whoami(ctx: Context) -> str:  # type: ignore[type-arg]
    """The call's _meta, as JSON."""
    meta = ctx.request_context.meta or {}
    return json.dumps({key: value for key, value in dict(meta).items() if key.startswith("dev.cogmesh/")})


@server.tool()
async def blob(size: int, seconds: float = 0) -> str:
    """A text of exactly `size` bytes: lines "line 000000001\n" (15 bytes), then padding; after `seconds`."""
    await asyncio.sleep(seconds)
    lines = "".join(f"line {n:09d}\n" for n in range(size // 15))
    return lines + "." * (size - len(lines))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("transport", choices=["stdio", "http"])
    parser.add_argument("--port", type=int, default=8931)
    args = parser.parse_args()
    if args.transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
