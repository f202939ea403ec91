"""What the loop knows about a tool, wherever it runs.

A tool's failure comes in two kinds, because they are handled differently:
`ToolError` — the tool ran and reported a problem (bad arguments, not found, ...):
its message goes back to the model, nothing is retried and the tool server counts as
healthy; `ToolUnavailable` — the tool server could not be reached or dropped the
call: the call is retried with backoff and the server's circuit breaker counts a
failure. Any other exception from a tool is treated like a `ToolError`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from services.lib.llm import ToolSchema
from services.runtime.tools.retry import DEFAULT_BACKOFF, Backoff

ToolSource: TypeAlias = Literal["builtin", "mcp", "remote", "client", "internal"]
# How the loop treats a call: "run" runs the tool; the others pause the turn for
# an answer from outside ("ask_user": the user's answer, "client": the caller's
# own tool) or hand the task to a subagent ("delegate"); "session" calls (a handoff, the todo
# list) the loop answers from the session's state (steps/session.py).
ToolHandling: TypeAlias = Literal["run", "ask_user", "client", "delegate", "session"]
MCP_PREFIX = "mcp__"


class ToolError(Exception):
    """The tool ran and failed; the message is for the model."""


class ToolUnavailable(Exception):
    """The tool server could not be reached or lost the call; retryable."""


@dataclass(frozen=True, slots=True)
class ToolContext:
    """Who is calling: remote tool servers get it so they can scope and dedupe.

    `idempotency_key` is the same every time this call is run, by any replica (a turn
    taken over after a crash runs a call again when its result was not yet recorded).
    `scope` is the session's scope (end user, project...): set by the application at
    CreateSession, never by the model.
    """

    call_id: str = ""
    session_id: str = ""
    tenant_id: str = ""
    turn_id: str = ""
    idempotency_key: str = ""
    scope: Mapping[str, str] = field(default_factory=dict)


ToolRun: TypeAlias = Callable[[Mapping[str, Any], ToolContext], Awaitable[str]]


@dataclass(frozen=True)
class Tool:
    """A tool offered to the model.

    `server` names the tool server (MCP server or ToolService) for its circuit
    breaker; `retries` is how often a call is repeated after `ToolUnavailable`, `backoff`
    how long it waits in between (tools/retry.py).
    `policy_checked` is False for tools the policy service does not govern: the
    runtime's own (delegation, archived results) and the caller's client-side
    tools, which run with the caller's authority, not the server's.
    """

    schema: ToolSchema
    run: ToolRun
    source: ToolSource = "builtin"
    server: str = ""
    retries: int = 0
    timeout_s: float | None = None
    backoff: Backoff = DEFAULT_BACKOFF  # the wait between retries
    handling: ToolHandling = "run"
    policy_checked: bool = True

    @property
    def name(self) -> str:
        return self.schema.name

    @property
    def is_mcp(self) -> bool:
        return self.source == "mcp"


def builtin(schema: ToolSchema, function: Callable[[Mapping[str, Any]], Awaitable[str]]) -> Tool:
    """A tool implemented in-process; it does not need the call context."""

    async def run(arguments: Mapping[str, Any], context: ToolContext) -> str:
        return await function(arguments)

    return Tool(schema, run)


def mcp_tool_name(server: str, tool: str) -> str:
    return f"{MCP_PREFIX}{server}__{tool}"


async def _never_run(arguments: Mapping[str, Any], context: ToolContext) -> str:
    raise ToolError("this tool is answered from outside the runtime, not run")


def answered_outside(schema: ToolSchema, handling: ToolHandling, source: ToolSource, policy_checked: bool) -> Tool:
    """A tool whose calls the loop answers itself (pause for an answer, or delegate)."""
    return Tool(schema, _never_run, source=source, handling=handling, policy_checked=policy_checked)
