"""Default-deny tool policy: decides whether an agent may invoke a tool.

Pure domain code; the gRPC policy service wraps it.

:meth:`DefaultToolPolicy.decide` applies these steps in order and stops at the
first one that matches:

1. tool is always denied (built-in list or ``extra_denied``) -> deny
2. tool is in the caller's ``allowed_local_tools``            -> allow
3. tool is in the policy's ``allowed_system_tools``           -> allow
4. ``mcp__<server>__<tool>`` whose skill ``<server>`` is active -> allow
5. ``mcp__<server>__<tool>`` whose skill is not active          -> deny
6. anything else                                                -> deny

Because step 1 runs first, listing an always-denied tool in either allow-list
has no effect. Tool names are matched exactly (case-sensitive); that is safe
because anything not explicitly allowed ends up denied in step 6.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "ALWAYS_DENIED",
    "MCP_PREFIX",
    "Decision",
    "DefaultToolPolicy",
    "Rule",
    "ToolPolicyInput",
]

# Host-access tools (shell, filesystem, web) that agents must never reach,
# in the PascalCase and snake_case spellings used by different runtimes.
ALWAYS_DENIED: frozenset[str] = frozenset(
    {
        "Bash", "bash",
        "Read", "read",
        "Write", "write",
        "Edit", "edit",
        "MultiEdit", "multi_edit",
        "Glob", "glob",
        "Grep", "grep",
        "LS", "ls",
        "TodoRead", "todo_read",
        "TodoWrite", "todo_write",
        "WebFetch", "web_fetch",
        "WebSearch", "web_search",
    }
)  # fmt: skip

MCP_PREFIX = "mcp__"
_MCP_SEPARATOR = "__"
_MCP_NAME_FORMAT = "mcp__<server>__<tool>"

Rule = Literal[
    "always_denied",
    "allowed_local",
    "allowed_system",
    "mcp_skill_active",
    "mcp_skill_inactive",
    "default_deny",
]


@dataclass(frozen=True, slots=True)
class ToolPolicyInput:
    tool_name: str
    input_data: Mapping[str, Any]
    active_skill_ids: frozenset[str] = frozenset()
    allowed_local_tools: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    reason: str
    rule: Rule
    # Input the tool should run with; set only on allow decisions.
    updated_input: Mapping[str, Any] | None = None


def _mcp_server(tool_name: str) -> str | None:
    """Return ``<server>`` of a well-formed ``mcp__<server>__<tool>`` name, else None.

    The server is everything up to the first ``__`` after the prefix, so server
    names may contain single underscores (``mcp__app_tools__calculator``).
    """
    server, separator, tool = tool_name[len(MCP_PREFIX) :].partition(_MCP_SEPARATOR)
    if not (server and separator and tool):
        return None
    return server


class DefaultToolPolicy:
    def __init__(
        self,
        extra_denied: AbstractSet[str] = frozenset(),
        allowed_system_tools: AbstractSet[str] = frozenset(),
    ) -> None:
        # Copied into frozensets so later mutation of the caller's sets cannot
        # change the policy.
        self._extra_denied = frozenset(extra_denied)
        self._allowed_system_tools = frozenset(allowed_system_tools)

    def decide(self, inp: ToolPolicyInput) -> Decision:
        name = inp.tool_name

        if name in ALWAYS_DENIED:
            return _deny(name, "always_denied", "is denied by security policy")
        if name in self._extra_denied:
            return _deny(name, "always_denied", "is denied by the configured deny-list")

        if name in inp.allowed_local_tools:
            return _allow(inp, "allowed_local", "is allowed as a local tool")
        if name in self._allowed_system_tools:
            return _allow(inp, "allowed_system", "is allowed as a system tool")

        if name.startswith(MCP_PREFIX):
            server = _mcp_server(name)
            if server is None:
                # No skill can be derived, so it falls through to the final deny.
                return _deny(
                    name,
                    "default_deny",
                    f"is denied: malformed MCP name, expected {_MCP_NAME_FORMAT!r}",
                )
            if server in inp.active_skill_ids:
                return _allow(
                    inp,
                    "mcp_skill_active",
                    f"is allowed because skill {server!r} is active",
                )
            return _deny(
                name,
                "mcp_skill_inactive",
                f"is denied because skill {server!r} is not active",
            )

        return _deny(name, "default_deny", "is denied: not on any allow-list")


def _allow(inp: ToolPolicyInput, rule: Rule, why: str) -> Decision:
    # Deep copy so a tool that mutates its arguments cannot alter the caller's input.
    return Decision(
        allowed=True,
        reason=f"tool {inp.tool_name!r} {why} ({rule})",
        rule=rule,
        updated_input=copy.deepcopy(dict(inp.input_data)),
    )


def _deny(tool_name: str, rule: Rule, why: str) -> Decision:
    return Decision(allowed=False, reason=f"tool {tool_name!r} {why} ({rule})", rule=rule)
