"""Remote tools through cogmesh.tools.v1.ToolService, which any language can serve.

Tools keep the names their server gives them, behind an optional `prefix`. A call
carries the call id (stable across retries, so servers can dedupe), the session and
the tenant. UNAVAILABLE and DEADLINE_EXCEEDED mean the server could not answer
(retried, counted by the breaker); any other status, or `is_error`, is the tool's
own failure and goes back to the model.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import grpc

from cogmesh.tools.v1 import tools_pb2, tools_pb2_grpc
from services.kit.clients import PEER_CHANNEL_OPTIONS
from services.kit.protos import dict_to_struct, struct_to_dict
from services.lib.llm import ToolSchema
from services.runtime.tools.base import Tool, ToolContext, ToolError, ToolUnavailable
from services.runtime.tools.retry import DEFAULT_BACKOFF, Backoff, CallSettings, unknown_overrides

_UNAVAILABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}


class RemoteToolServer:
    def __init__(
        self,
        name: str,
        address: str,
        *,
        prefix: str = "",
        retries: int = 1,
        timeout_s: float | None = None,
        backoff: Backoff = DEFAULT_BACKOFF,
        overrides: Mapping[str, CallSettings] | None = None,
        list_timeout_s: float = 10.0,
    ) -> None:
        self.name = name
        self.address = address
        self.prefix = prefix
        self.settings = CallSettings(retries, timeout_s, backoff)
        self.overrides = dict(overrides or {})  # by the tool's name on this server
        self.list_timeout_s = list_timeout_s
        self._channel: grpc.aio.Channel | None = None
        self._stub: tools_pb2_grpc.ToolServiceStub | None = None

    def _service(self) -> tools_pb2_grpc.ToolServiceStub:
        if self._stub is None:
            self._channel = grpc.aio.insecure_channel(self.address, options=PEER_CHANNEL_OPTIONS)
            self._stub = tools_pb2_grpc.ToolServiceStub(self._channel)  # type: ignore[no-untyped-call]
        return self._stub

    async def list_tools(self) -> list[Tool]:
        try:
            reply = await self._service().ListTools(tools_pb2.ListToolsRequest(), timeout=self.list_timeout_s)
        except grpc.aio.AioRpcError as exc:
            raise ToolUnavailable(
                f"tool server {self.name!r} at {self.address} failed to list tools: {exc.code().name}: {exc.details()}"
            ) from exc
        names = [spec.name for spec in reply.tools]
        unknown_overrides(self.name, self.overrides, names)
        return [self._tool(spec.name, spec.description, struct_to_dict(spec.parameters)) for spec in reply.tools]

    def _tool(self, remote_name: str, description: str, parameters: dict[str, Any]) -> Tool:
        settings = self.overrides.get(remote_name, self.settings)

        async def run(arguments: Mapping[str, Any], context: ToolContext) -> str:
            return await self.call(remote_name, arguments, context, settings.timeout_s)

        return Tool(
            ToolSchema(self.prefix + remote_name, description, parameters or {"type": "object"}),
            run,
            source="remote",
            server=self.name,
            retries=settings.retries,
            timeout_s=settings.timeout_s,
            backoff=settings.backoff,
        )

    async def call(
        self, tool: str, arguments: Mapping[str, Any], context: ToolContext, timeout_s: float | None = None
    ) -> str:
        request = tools_pb2.CallToolRequest(
            name=tool,
            arguments=dict_to_struct(arguments),
            call_id=context.call_id,
            session_id=context.session_id,
            tenant_id=context.tenant_id,
            turn_id=context.turn_id,
            idempotency_key=context.idempotency_key,
            scope=context.scope,
        )
        try:
            # The loop bounds the call with the tool timeout; this deadline only backs it up.
            reply = await self._service().CallTool(request, timeout=timeout_s or 300.0)
        except grpc.aio.AioRpcError as exc:
            message = f"{exc.code().name}: {exc.details()}"
            if exc.code() in _UNAVAILABLE:
                raise ToolUnavailable(f"tool server {self.name!r} at {self.address}: {message}") from exc
            raise ToolError(message) from exc
        text: str = reply.content
        if not text and reply.HasField("structured_content"):
            text = json.dumps(struct_to_dict(reply.structured_content), sort_keys=True)
        if reply.is_error:
            raise ToolError(text or "the tool reported an error")
        return text

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
        self._channel, self._stub = None, None
