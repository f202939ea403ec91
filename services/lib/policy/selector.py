"""ToolSelector: which tools fit the context window, by group priority and per-group caps."""

from __future__ import annotations

import enum
import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field


class ToolGroup(enum.IntEnum):
    """Lower value = higher priority."""

    ALWAYS = 0  # thinking, todo
    MCP = 1  # the active role's MCP tools
    MEMORY = 2  # memory_*
    PLANNING = 3  # plan_*
    SANDBOX = 4  # bash, read, write, edit
    WEB = 5  # web_fetch, web_search


# How tool names fall into groups unless the configuration says otherwise.
DEFAULT_GROUP_PATTERNS: dict[ToolGroup, tuple[str, ...]] = {
    ToolGroup.ALWAYS: ("thinking", "todo", "todo_*", "Todo*"),
    ToolGroup.MCP: ("mcp__*",),
    ToolGroup.MEMORY: ("memory_*",),
    ToolGroup.PLANNING: ("plan_*",),
    ToolGroup.SANDBOX: ("bash", "read", "write", "edit", "multi_edit", "glob", "grep", "ls", "Bash", "Read", "Write",
                        "Edit", "MultiEdit", "Glob", "Grep", "LS"),
    ToolGroup.WEB: ("web_fetch", "web_search", "WebFetch", "WebSearch"),
}  # fmt: skip


@dataclass(frozen=True)
class ToolBudgetConfig:
    max_tools: int = 30
    group_priority: Sequence[ToolGroup] = tuple(ToolGroup)
    group_limits: Mapping[ToolGroup, int] = field(default_factory=dict)


class ToolSelector:
    def __init__(self, config: ToolBudgetConfig | None = None):
        self.config = config or ToolBudgetConfig()
        self._groups: dict[ToolGroup, list[str]] = {}

    def add_group(self, group: ToolGroup, tools: Iterable[str]) -> None:
        self._groups.setdefault(group, []).extend(tools)

    def select(self) -> list[str]:
        """Up to max_tools names: groups in priority order, each cut to its cap; no duplicates."""
        return self.select_with_reasons()[0]

    def select_with_reasons(self) -> tuple[list[str], dict[str, str]]:
        selected: list[str] = []
        seen: set[str] = set()
        dropped: dict[str, str] = {}
        order = list(self.config.group_priority)
        # Groups missing from group_priority come last, by their own priority.
        order += sorted(g for g in self._groups if g not in order)
        for group in order:
            limit = self.config.group_limits.get(group)
            taken = 0
            for name in self._groups.get(group, ()):
                if name in seen:
                    continue
                seen.add(name)
                if limit is not None and taken >= limit:
                    dropped[name] = f"group {group.name.lower()} is capped at {limit} tool(s)"
                elif len(selected) >= self.config.max_tools:
                    dropped[name] = f"max_tools ({self.config.max_tools}) reached"
                else:
                    selected.append(name)
                    taken += 1
        return selected, dropped


def classify(
    name: str,
    patterns: Mapping[ToolGroup, Sequence[str]] = DEFAULT_GROUP_PATTERNS,
    default: ToolGroup = ToolGroup.ALWAYS,
) -> ToolGroup:
    for group in sorted(patterns):
        if any(fnmatch.fnmatchcase(name, p) for p in patterns[group]):
            return group
    return default
