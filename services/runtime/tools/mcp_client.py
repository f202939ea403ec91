"""MCP tool servers over stdio or streamable HTTP, through the `mcp` SDK.

Each server's tools are offered as ``mcp__<server>__<tool>``. The SDK's client lives
inside anyio task groups that must be entered and left by the same task, so each
connection is owned by one long-lived task; turns call through the open session
from their own tasks. A dropped connection (the server process died, the HTTP
server went away) is noticed on the next call, reported as `ToolUnavailable`, and
the following call reconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from typing import Any

import mcp
import mcp_types

from services.kit.logging import log
from services.lib.llm import ToolSchema
from services.runtime.tools.base import Tool, ToolContext, ToolError, ToolUnavailable, mcp_tool_name
from services.runtime.tools.retry import DEFAULT_BACKOFF, Backoff, CallSettings, unknown_overrides


class McpServer:
    """One MCP server: `target` is a URL (streamable HTTP) or stdio launch parameters."""

    def __init__(
        self,
        name: str,
        target: str | mcp.StdioServerParameters,
        *,
        connect_timeout_s: float = 10.0,
        retries: int = 1,
        timeout_s: float | None = None,
        backoff: Backoff = DEFAULT_BACKOFF,
        overrides: Mapping[str, CallSettings] | None = None,
    ) -> None:
        self.name = name
        self.target = target
        self.connect_timeout_s = connect_timeout_s
        self.settings = CallSettings(retries, timeout_s, backoff)
        self.overrides = dict(overrides or {})  # by the tool's name on this server
        self._client: mcp.Client | None = None
        self._owner: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._connect_lock = asyncio.Lock()
        self._tools: list[Tool] | None = None

    @property
    def transport(self) -> str:
        return "http" if isinstance(self.target, str) else "stdio"

    async def _session(self) -> mcp.Client:
        if self._client is not None and self._owner is not None and not self._owner.done():
            return self._client
        async with self._connect_lock:
            if self._client is not None and self._owner is not None and not self._owner.done():
                return self._client
            await self._drop()
            ready: asyncio.Future[mcp.Client] = asyncio.get_running_loop().create_future()
            self._stop = asyncio.Event()
            self._owner = asyncio.create_task(self._own(ready, self._stop), name=f"mcp:{self.name}")
            try:
                self._client = await asyncio.wait_for(asyncio.shield(ready), self.connect_timeout_s)
            except TimeoutError as exc:
                await self._drop()
                raise ToolUnavailable(
                    f"MCP server {self.name!r} did not connect within {self.connect_timeout_s:g}s"
                ) from exc
            except Exception as exc:
                await self._drop()
                raise ToolUnavailable(f"cannot connect to MCP server {self.name!r}: {_describe(exc)}") from exc
            log.info("mcp server connected", server=self.name, transport=self.transport)
            return self._client

    async def _own(self, ready: asyncio.Future[mcp.Client], stop: asyncio.Event) -> None:
        """Enter and leave the SDK client in this one task, as anyio requires."""
        try:
            async with mcp.Client(self.target, mode="legacy", cache=None) as client:
                ready.set_result(client)
                await stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else ToolUnavailable("connection cancelled"))
            elif not isinstance(exc, asyncio.CancelledError):
                log.warning("mcp connection ended", server=self.name, error=_describe(exc))
            if isinstance(exc, asyncio.CancelledError):
                raise

    async def _drop(self) -> None:
        owner, self._owner, self._client = self._owner, None, None
        if owner is not None and not owner.done():
            self._stop.set()
            try:
                await asyncio.wait_for(asyncio.shield(owner), 5)
            except (TimeoutError, Exception):  # noqa: BLE001 - closing must not fail the caller
                owner.cancel()
                with contextlib.suppress(BaseException):
                    await owner

    async def list_tools(self) -> list[Tool]:
        """The server's tools (listed once per connection)."""
        if self._tools is not None and self._owner is not None and not self._owner.done():
            return self._tools
        client = await self._session()
        try:
            listed = await client.list_tools()
        except Exception as exc:
            await self._drop()
            raise ToolUnavailable(f"MCP server {self.name!r} failed to list tools: {_describe(exc)}") from exc
        unknown_overrides(self.name, self.overrides, [t.name for t in listed.tools])
        self._tools = [self._tool(t) for t in listed.tools]
        return self._tools

    def _tool(self, tool: mcp_types.Tool) -> Tool:
        schema = dict(tool.input_schema or {"type": "object"})
        schema.pop("$schema", None)  # providers reject the draft marker in function parameters
        remote_name = tool.name
        settings = self.overrides.get(remote_name, self.settings)

        async def run(arguments: Mapping[str, Any], context: ToolContext) -> str:
            return await self.call(remote_name, arguments, context)

        return Tool(
            ToolSchema(mcp_tool_name(self.name, tool.name), tool.description or tool.title or tool.name, schema),
            run,
            source="mcp",
            server=self.name,
            retries=settings.retries,
            timeout_s=settings.timeout_s,
            backoff=settings.backoff,
        )

    async def call(self, tool: str, arguments: Mapping[str, Any], context: ToolContext | None = None) -> str:
        client = await self._session()
        try:
            result = await client.call_tool(tool, dict(arguments), meta=call_meta(context))
        except mcp.MCPError as exc:
            if exc.code == mcp_types.CONNECTION_CLOSED:
                await self._drop()
                raise ToolUnavailable(f"MCP server {self.name!r} closed the connection during the call") from exc
            raise ToolError(exc.message) from exc  # the server answered with a JSON-RPC error
        except Exception as exc:
            await self._drop()
            raise ToolUnavailable(f"MCP server {self.name!r} lost the call: {_describe(exc)}") from exc
        text = result_text(result)
        if result.is_error:
            raise ToolError(text or "the tool reported an error")
        return text

    async def close(self) -> None:
        await self._drop()


META_PREFIX = "dev.cogmesh/"  # keys of the _meta cogmesh sends with every MCP call


def call_meta(context: ToolContext | None) -> mcp_types.RequestParamsMeta | None:
    """Who calls, as the call's `_meta`: the server can scope by session and scope and dedupe by idempotency key."""
    if context is None:
        return None
    meta: dict[str, Any] = {
        f"{META_PREFIX}{name}": value
        for name, value in (
            ("session_id", context.session_id),
            ("tenant_id", context.tenant_id),
            ("turn_id", context.turn_id),
            ("call_id", context.call_id),
            ("idempotency_key", context.idempotency_key),
        )
        if value
    }
    if context.scope:  # the session's scope, as an object: the application's, never the model's
        meta[f"{META_PREFIX}scope"] = dict(context.scope)
    return meta or None  # type: ignore[return-value]


def result_text(result: mcp_types.CallToolResult) -> str:
    """Text content joined; other content described; structured content as JSON when there is no text."""
    pieces: list[str] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            pieces.append(block.text)
        elif isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
            pieces.append(f"[{block.type}: {block.mime_type}, {len(block.data) * 3 // 4} bytes]")
        elif isinstance(block, mcp_types.EmbeddedResource):
            resource = block.resource
            text = getattr(resource, "text", None)
            pieces.append(text if isinstance(text, str) else f"[resource {resource.uri}]")
        else:
            uri = getattr(block, "uri", "")
            pieces.append(f"[{block.type} {uri}]".replace(" ]", "]"))
    if not pieces and result.structured_content is not None:
        pieces.append(json.dumps(result.structured_content, sort_keys=True))
    # A result over the agent's limit is archived, not cut, by the loop (steps/call.py).
    return "\n".join(pieces)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _describe(exc.exceptions[0])
    return " ".join(str(exc).split()) or type(exc).__name__
