"""The tools a turn may use: built-ins plus the tools of configured tool servers.

Tool servers are declared in a YAML file (COGMESH_TOOL_SERVERS_FILE):

    breaker: {failure_threshold: 3, cooldown_s: 30}   # defaults for every server
    servers:
      everything:                       # MCP over stdio: tools mcp__everything__<tool>
        transport: stdio
        command: npx
        args: [-y, "@modelcontextprotocol/server-everything"]
      search:                           # MCP over streamable HTTP
        transport: http
        url: http://127.0.0.1:8931/mcp
      billing:                          # cogmesh.tools.v1.ToolService in any language
        transport: grpc
        address: 127.0.0.1:7001
        prefix: billing_                # tools billing_<tool>; empty keeps their names
        retries: 2                      # after a failure to reach the server (default 1)
        backoff: exponential            # or linear, fixed; waits base_delay_s * 2^(n-1), * n, or * 1
        tool_overrides:                 # by the tool's name on its server
          charge: {retries: 0}          # never repeated
          report: {timeout_s: 120, backoff: fixed, base_delay_s: 1}

An agent's `tools` lists names: built-ins ("calculator"), MCP tools
("mcp__everything__echo"), remote tools, or glob patterns ("mcp__everything__*").
An MCP server whose name is one of the session's active skills offers all its tools
(the policy service allows them by the same rule). A server that cannot be reached
does not fail the turn: its tools are left out and the turn is told why.
"""

from __future__ import annotations

import asyncio
import fnmatch
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

import mcp
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from services.kit import yaml_config
from services.runtime.tools.base import MCP_PREFIX, Tool, ToolUnavailable
from services.runtime.tools.breaker import BreakerRegistry
from services.runtime.tools.mcp_client import McpServer
from services.runtime.tools.remote import RemoteToolServer
from services.runtime.tools.retry import Backoff, BackoffStrategy, CallSettings

SERVER_NAME_PATTERN = r"^[a-z0-9](?:[a-z0-9-]|_(?!_))*$"  # no "__": it separates mcp__<server>__<tool>
LISTING_TTL_S = 60.0


class ToolServersError(yaml_config.ConfigError):
    """The tool servers file is unreadable or invalid; each problem names file, line and field."""


MAX_RETRIES, MAX_BASE_DELAY_S = 5, 60.0


class ToolOverride(BaseModel):
    """One tool's retry settings instead of its server's; a field left out keeps the server's."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    retries: int | None = Field(default=None, ge=0, le=MAX_RETRIES)
    backoff: BackoffStrategy | None = None
    base_delay_s: float | None = Field(default=None, ge=0, le=MAX_BASE_DELAY_S)
    timeout_s: float | None = Field(default=None, gt=0)


class ToolServerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    transport: Literal["stdio", "http", "grpc"]
    command: str = ""
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: Path | None = None
    url: str = ""
    address: str = ""
    prefix: str = ""
    timeout_s: float | None = Field(default=None, gt=0)
    connect_timeout_s: float = Field(default=10.0, gt=0)
    retries: int = Field(default=1, ge=0, le=MAX_RETRIES)
    backoff: BackoffStrategy = "exponential"
    base_delay_s: float | None = Field(default=None, ge=0, le=MAX_BASE_DELAY_S)  # None: the runtime's default
    tool_overrides: dict[str, ToolOverride] = Field(default_factory=dict)
    failure_threshold: int | None = Field(default=None, ge=1)
    cooldown_s: float | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _needs_target(self) -> ToolServerConfig:
        needed = {"stdio": "command", "http": "url", "grpc": "address"}[self.transport]
        if not getattr(self, needed):
            raise ValueError(f"transport {self.transport!r} needs {needed!r}")
        return self


class BreakerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    failure_threshold: int = Field(default=3, ge=1)
    cooldown_s: float = Field(default=30.0, ge=0)


class ToolServersFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    breaker: BreakerConfig = Field(default_factory=BreakerConfig)
    servers: dict[str, ToolServerConfig] = Field(default_factory=dict)

    @field_validator("servers")
    @classmethod
    def _names(cls, servers: dict[str, ToolServerConfig]) -> dict[str, ToolServerConfig]:
        for name in servers:
            if not re.match(SERVER_NAME_PATTERN, name):
                raise ValueError(f"server name {name!r} must be lower-case letters, digits, '-' or single '_'")
        return servers


def load_tool_servers(path: Path | None) -> ToolServersFile:
    if path is None:
        return ToolServersFile()
    try:
        return yaml_config.load(path, ToolServersFile)
    except yaml_config.ConfigError as exc:
        raise ToolServersError(exc.problems) from exc


ToolServer = McpServer | RemoteToolServer


def call_settings(config: ToolServerConfig) -> tuple[CallSettings, dict[str, CallSettings]]:
    """A server's retry settings for its tools, and each overridden tool's (the server's where left out)."""
    default = CallSettings(config.retries, config.timeout_s, Backoff(config.backoff, config.base_delay_s))
    overrides = {}
    for tool, override in config.tool_overrides.items():
        backoff = Backoff(
            override.backoff or default.backoff.strategy,
            default.backoff.base_delay_s if override.base_delay_s is None else override.base_delay_s,
        )
        retries = default.retries if override.retries is None else override.retries
        overrides[tool] = CallSettings(retries, override.timeout_s or default.timeout_s, backoff)
    return default, overrides


def build_server(name: str, config: ToolServerConfig, base_dir: Path | None = None) -> ToolServer:
    default, overrides = call_settings(config)
    retries, timeout_s, backoff = default.retries, default.timeout_s, default.backoff
    if config.transport == "grpc":
        return RemoteToolServer(
            name,
            config.address,
            prefix=config.prefix,
            retries=retries,
            timeout_s=timeout_s,
            backoff=backoff,
            overrides=overrides,
        )
    target: str | mcp.StdioServerParameters
    if config.transport == "http":
        target = config.url
    else:
        cwd = config.cwd if config.cwd is None or base_dir is None else base_dir / config.cwd
        target = mcp.StdioServerParameters(command=config.command, args=config.args, env=config.env or None, cwd=cwd)
    return McpServer(
        name,
        target,
        connect_timeout_s=config.connect_timeout_s,
        retries=retries,
        timeout_s=timeout_s,
        backoff=backoff,
        overrides=overrides,
    )


class ToolCatalog:
    """Built-ins and tool servers, with one circuit breaker per server."""

    def __init__(
        self,
        builtins: Mapping[str, Tool],
        servers: Mapping[str, ToolServer] | None = None,
        breakers: BreakerRegistry | None = None,
        server_breakers: Mapping[str, BreakerConfig] | None = None,
    ) -> None:
        self.builtins = dict(builtins)
        self.servers = dict(servers or {})
        self.breakers = breakers or BreakerRegistry()
        for name, settings in (server_breakers or {}).items():
            self.breakers.configure(name, settings.failure_threshold, settings.cooldown_s)
        self._listed: dict[str, tuple[float, list[Tool]]] = {}

    @classmethod
    def from_file(cls, builtins: Mapping[str, Tool], path: Path | None) -> ToolCatalog:
        config = load_tool_servers(path)
        base = path.parent if path is not None else None
        servers = {name: build_server(name, server, base) for name, server in config.servers.items()}
        overrides = {
            name: BreakerConfig(
                failure_threshold=server.failure_threshold or config.breaker.failure_threshold,
                cooldown_s=config.breaker.cooldown_s if server.cooldown_s is None else server.cooldown_s,
            )
            for name, server in config.servers.items()
        }
        breakers = BreakerRegistry(config.breaker.failure_threshold, config.breaker.cooldown_s)
        return cls(builtins, servers, breakers, overrides)

    def breaker_states(self) -> dict[str, str]:
        """Each tool server's breaker state (closed, open, half_open), read when /metrics is scraped."""
        return {name: self.breakers.get(name).state.value for name in self.servers}

    async def tools_for(
        self, names: Sequence[str], active_skills: Sequence[str] = ()
    ) -> tuple[dict[str, Tool], list[str]]:
        """(tools by name, problems) for an agent's tool names and the session's active skills."""
        wanted = set(names)
        skills = set(active_skills)
        needed = [
            server
            for server_name, server in self.servers.items()
            if self._may_offer(server_name, server, wanted, skills)
        ]
        listings = await asyncio.gather(*(self._list(server) for server in needed))
        problems = [problem for _, problem in listings if problem]
        available: dict[str, Tool] = dict(self.builtins)
        for tools, _ in listings:
            for tool in tools:
                available.setdefault(tool.name, tool)
        chosen: dict[str, Tool] = {}
        for name in names:
            if any(ch in name for ch in "*?["):
                chosen.update({n: t for n, t in available.items() if fnmatch.fnmatchcase(n, name)})
            elif name in available:
                chosen[name] = available[name]
        for tool in available.values():
            if tool.is_mcp and tool.server in skills:
                chosen[tool.name] = tool
        return chosen, problems

    async def everything(self) -> tuple[list[Tool], list[tuple[str, str, str]]]:
        """Every tool on offer (built-ins, then each server's) and (server, name prefix, problem) of each server
        that could not be listed now."""
        names = list(self.servers)
        listings = await asyncio.gather(*(self._list(self.servers[name]) for name in names))
        tools = list(self.builtins.values())
        unlisted = []
        for name, (listed, problem) in zip(names, listings, strict=True):
            tools += sorted(listed, key=lambda tool: tool.name)
            if problem:
                server = self.servers[name]
                prefix = f"{MCP_PREFIX}{name}__" if isinstance(server, McpServer) else getattr(server, "prefix", "")
                unlisted.append((name, prefix, problem))
        return tools, unlisted

    def _may_offer(self, name: str, server: ToolServer, wanted: set[str], skills: set[str]) -> bool:
        if isinstance(server, McpServer):
            prefix = f"{MCP_PREFIX}{name}__"
            return name in skills or any(w.startswith(prefix) or fnmatch.fnmatchcase(prefix, w) for w in wanted)
        return any(w not in self.builtins and not w.startswith(MCP_PREFIX) for w in wanted)

    async def _list(self, server: ToolServer) -> tuple[list[Tool], str]:
        cached = self._listed.get(server.name)
        if cached is not None and time.monotonic() - cached[0] < LISTING_TTL_S:
            return cached[1], ""
        breaker = self.breakers.get(server.name)
        if not breaker.allow_request():
            return [], (
                f"tool server {server.name!r} is unavailable (circuit open after repeated failures; "
                f"retry in {breaker.retry_in_s():.0f}s): its tools are not offered"
            )
        try:
            tools = await server.list_tools()
        except ToolUnavailable as exc:
            breaker.record_failure()
            return [], f"{exc}: its tools are not offered"
        breaker.record_success()
        self._listed[server.name] = (time.monotonic(), tools)
        return tools, ""

    async def close(self) -> None:
        await asyncio.gather(*(server.close() for server in self.servers.values()), return_exceptions=True)
