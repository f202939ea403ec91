"""The memory tools (`save_memory`, `search_memories`) and the recall of the memory context pack.

Both reach the memory service (cogmesh.memory.v1.MemoryService) with the session's tenant
and a namespace made from the agent's `memory.namespace` template and the session's scope:
a label `{end_user}` is the scope's `end_user` entry as `end_user=<value>`, other labels are literal. The scope is
set by the application at CreateSession; the model never names a namespace, tenant or scope
(the tools' schemas have no such argument and reject unknown ones).

The tools are per agent (their names and namespace come from its definition), so they are
not in the catalogue's built-ins: the runtime adds them to a turn when the agent's `tools`
lists them by name (`tools_for_agent`). The policy service governs them like every tool:
they are allowed because the agent lists them. Off by default: no shipped agent lists them.

Failures are tool errors the model reads: the memory service unreachable is
`ToolUnavailable` (retried, counted by the "memory" circuit breaker); a session without the
scope key the template needs, a full namespace (naming the setting) or a rejected argument
is `ToolError`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from cogmesh.memory.v1 import memory_pb2
from services.kit.clients import Clients
from services.kit.dependencies import MemoryClient
from services.kit.errors import DependencyError
from services.kit.protos import dict_to_struct
from services.lib import scope as scopes
from services.lib.agents import AgentDefinition, AgentMemory, namespace_placeholder
from services.lib.llm import ToolSchema
from services.runtime.tools.base import Tool, ToolContext, ToolError, ToolUnavailable

# The circuit breaker of the memory service as a tool server. Not a possible tool server name
# (those are lower-case letters, digits, '-' and '_'), so it cannot share a configured server's breaker.
MEMORY_SERVER = "cogmesh.memory"
MAX_FACT_CHARS = 2000
MAX_KEY_CHARS = 128
MAX_QUERY_CHARS = 1000
DEFAULT_SEARCH_LIMIT = 5
MAX_SEARCH_LIMIT = 20
# A found memory's text is cut to this many characters in a tool result and in the context pack.
MAX_RESULT_CHARS = 1000
DERIVED_KEY_PREFIX = "m_"


class MissingScope(Exception):
    """The namespace template needs a scope key the session does not have."""

    def __init__(self, key: str, agent: str) -> None:
        self.key = key
        super().__init__(
            f"the session has no scope {key!r}, which agent {agent!r}'s memory namespace needs "
            f"(the application sets it with CreateSession's scope, e.g. {{{key!r}: ...}})"
        )


def namespace_for(memory: AgentMemory, scope: Mapping[str, str], agent: str = "") -> list[str]:
    """The namespace labels (after the tenant) for a session's scope."""
    labels = []
    for label in memory.namespace:
        key = namespace_placeholder(label)
        if key is None:
            labels.append(label)
        elif scope.get(key):
            labels.append(scopes.label(key, scope[key]))
        else:
            raise MissingScope(key, agent)
    return labels


def derived_key(text: str) -> str:
    """A stable key for a fact: the same text (up to case and spacing) gives the same key."""
    normal = " ".join(text.split()).casefold()
    return DERIVED_KEY_PREFIX + hashlib.sha256(normal.encode()).hexdigest()[:16]


def one_line(text: str, limit: int = MAX_RESULT_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def memory_text(memory: memory_pb2.Memory) -> str:
    """What a memory says: its indexed text, else the value's `text` field."""
    if memory.text.strip():
        return memory.text
    value = memory.value.fields.get("text")
    return value.string_value if value is not None else ""


def _setting_of(exc: DependencyError) -> str:
    info = exc.error_info
    return str(info.metadata.get("setting", "")) if info is not None else ""


def tool_failure(exc: DependencyError, what: str) -> Exception:
    """The memory service's error as the model should read it."""
    code, details = exc.status_code, exc.status_message or exc.status_code.name
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED):
        return ToolUnavailable(f"the memory service is unavailable ({code.name}: {details})")
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        setting = _setting_of(exc)
        named = f" (setting {setting})" if setting and setting not in details else ""
        return ToolError(f"cannot {what}: {details}{named}")
    if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND):
        return ToolError(f"cannot {what}: {details}")
    return ToolError(f"cannot {what}: memory service error {code.name}: {details}")


def save_schema(name: str) -> ToolSchema:
    return ToolSchema(
        name=name,
        description=(
            "Save a fact worth remembering in later conversations with this user (a preference, a "
            "detail about them or their work). Write it as one self-contained sentence. Saving the same "
            "fact again changes nothing; to correct a memory, save the new fact under the old one's key."
        ),
        parameters={
            "type": "object",
            "properties": {
                "text": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_FACT_CHARS,
                    "description": "The fact, e.g. 'Prefers dark roast coffee'.",
                },
                "key": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_KEY_CHARS,
                    "description": "Optional: the key to save under (a memory's key replaces that memory).",
                },
            },
            "required": ["text"],
            "additionalProperties": False,
        },
    )


def search_schema(name: str) -> ToolSchema:
    return ToolSchema(
        name=name,
        description=(
            "Search the facts saved in earlier conversations with this user. Returns the best matches, "
            "each with its key."
        ),
        parameters={
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_QUERY_CHARS,
                    "description": "What to look for, in words the fact would contain.",
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_SEARCH_LIMIT,
                    "description": f"How many memories at most (default {DEFAULT_SEARCH_LIMIT}).",
                },
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    )


def _text_argument(arguments: Mapping[str, Any], tool: str, name: str, limit: int, required: bool) -> str:
    value = arguments.get(name)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or not value.strip():
        raise ToolError(f"{tool}: {name!r} must be a non-empty string")
    if len(value) > limit:
        raise ToolError(f"{tool}: {name!r} must be at most {limit} characters, not {len(value)}")
    return value.strip()


def _no_other_arguments(arguments: Mapping[str, Any], tool: str, known: Sequence[str]) -> None:
    unknown = sorted(set(arguments) - set(known))
    if unknown:
        raise ToolError(f"{tool}: unknown argument(s) {', '.join(map(repr, unknown))}; it takes {', '.join(known)}")


@dataclass(frozen=True)
class _MemoryTool:
    """One memory tool bound to an agent's definition."""

    clients: Clients
    agent: AgentDefinition
    name: str

    def namespace(self, context: ToolContext) -> list[str]:
        try:
            return namespace_for(self.agent.memory, context.scope, self.agent.name)
        except MissingScope as exc:
            raise ToolError(f"{self.name}: {exc}") from exc

    async def save(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        _no_other_arguments(arguments, self.name, ("text", "key"))
        text = _text_argument(arguments, self.name, "text", MAX_FACT_CHARS, required=True)
        key = _text_argument(arguments, self.name, "key", MAX_KEY_CHARS, required=False) or derived_key(text)
        request = memory_pb2.PutMemoryRequest(
            tenant_id=context.tenant_id,
            namespace=self.namespace(context),
            key=key,
            value=dict_to_struct({"text": text, "agent": self.agent.name, "session_id": context.session_id}),
            text=text,
        )
        try:
            reply = await MemoryClient.of(self.clients).PutMemory(request)
        except DependencyError as exc:
            raise tool_failure(exc, "save the memory") from exc
        return f"Saved under key {key!r}." if reply.created else f"Updated the memory under key {key!r}."

    async def search(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        _no_other_arguments(arguments, self.name, ("query", "limit"))
        query = _text_argument(arguments, self.name, "query", MAX_QUERY_CHARS, required=True)
        limit = arguments.get("limit", DEFAULT_SEARCH_LIMIT)
        # Arguments travel as a protobuf Struct, where every number is a double: 5.0 is 5.
        if isinstance(limit, float) and limit.is_integer():
            limit = int(limit)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_SEARCH_LIMIT:
            raise ToolError(f"{self.name}: 'limit' must be an integer from 1 to {MAX_SEARCH_LIMIT}")
        request = memory_pb2.SearchMemoriesRequest(
            tenant_id=context.tenant_id, namespace_prefix=self.namespace(context), query=query, limit=limit
        )
        try:
            reply = await MemoryClient.of(self.clients).SearchMemories(request)
        except DependencyError as exc:
            raise tool_failure(exc, "search the memories") from exc
        found = [(r.memory.key, memory_text(r.memory)) for r in reply.results]
        found = [(key, text) for key, text in found if text.strip()]
        if not found:
            return f"No saved memory matches {one_line(query, 100)!r}."
        lines = [f"- [{key}] {one_line(text)}" for key, text in found]
        return f"{len(lines)} saved {'memory' if len(lines) == 1 else 'memories'}, best first:\n" + "\n".join(lines)


def tools_for_agent(clients: Clients, agent: AgentDefinition) -> dict[str, Tool]:
    """The agent's memory tools that its `tools` lists (by their configured names)."""
    settings = agent.memory
    listed = set(agent.tools)
    tools: dict[str, Tool] = {}
    if settings.save_tool in listed:
        bound = _MemoryTool(clients, agent, settings.save_tool)
        tools[settings.save_tool] = Tool(save_schema(settings.save_tool), bound.save, server=MEMORY_SERVER, retries=1)
    if settings.search_tool in listed:
        bound = _MemoryTool(clients, agent, settings.search_tool)
        tools[settings.search_tool] = Tool(
            search_schema(settings.search_tool), bound.search, server=MEMORY_SERVER, retries=1
        )
    return tools


def memory_tool_names(agent: AgentDefinition) -> frozenset[str]:
    return frozenset(agent.memory.tool_names())


async def recall(
    clients: Clients, agent: AgentDefinition, tenant_id: str, scope: Mapping[str, str], text: str
) -> tuple[list[tuple[str, str]], str]:
    """The memory context pack: ((key, text) best first, a problem to report or "").

    Nothing is searched when the agent's pack is off or the message has no text. A failure
    never fails the turn: the pack is left out and the problem is reported as a notice.
    """
    settings = agent.memory.context
    if not settings.enabled or not text.strip():
        return [], ""
    try:
        namespace = namespace_for(agent.memory, scope, agent.name)
    except MissingScope as exc:
        return [], f"no memories were recalled: {exc}"
    request = memory_pb2.SearchMemoriesRequest(
        tenant_id=tenant_id, namespace_prefix=namespace, query=text[:MAX_QUERY_CHARS], limit=settings.limit
    )
    try:
        # Its own deadline (memory.context.timeout_ms): the pack must not hold up the turn for long.
        timeout = min(settings.timeout_ms / 1000, clients.call_timeout_s)
        reply = await MemoryClient.of(clients).SearchMemories(request, timeout=timeout)
    except DependencyError as exc:
        return [], f"no memories were recalled: memory service {exc.status_code.name}: {exc.status_message}"
    found = [(r.memory.key, one_line(memory_text(r.memory))) for r in reply.results]
    return [(key, text) for key, text in found if text], ""
