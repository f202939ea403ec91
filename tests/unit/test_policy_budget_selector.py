"""ToolBudget and ToolSelector (groups, priorities, per-group caps)."""

from __future__ import annotations

from services.lib.policy.budget import ToolBudget
from services.lib.policy.selector import DEFAULT_GROUP_PATTERNS, ToolBudgetConfig, ToolGroup, ToolSelector, classify


def test_tool_budget_counts_total_and_mcp_calls() -> None:
    budget = ToolBudget(max_tool_calls=3, max_mcp_calls=2, timeout_per_call_ms=30_000)
    assert budget.can_call(is_mcp=True)
    budget.record_call(is_mcp=True)
    budget.record_call(is_mcp=True)
    assert not budget.can_call(is_mcp=True)
    assert budget.can_call(is_mcp=False)
    budget.record_call()
    assert budget.is_exhausted() and not budget.can_call()
    assert (budget.total_calls, budget.mcp_calls) == (3, 2)
    budget.reset()
    assert budget.can_call(is_mcp=True) and budget.total_calls == 0


def test_tool_budget_rebuilt_from_counts_and_zero_is_unlimited() -> None:
    base = ToolBudget(8, 6)
    assert not base.at(8, 0).can_call()
    assert not base.at(6, 6).can_call(is_mcp=True)
    assert base.at(6, 6).can_call(is_mcp=False)
    assert ToolBudget(0, 0).at(10_000, 10_000).can_call(is_mcp=True)
    assert "8 tool calls" in base.at(8, 0).denial("x")
    assert "6 MCP tool calls" in base.at(6, 6).denial("mcp__a__b")


def test_groups_have_the_seed_priorities() -> None:
    assert [g.name for g in sorted(ToolGroup)] == ["ALWAYS", "MCP", "MEMORY", "PLANNING", "SANDBOX", "WEB"]
    assert [int(g) for g in sorted(ToolGroup)] == [0, 1, 2, 3, 4, 5]


def test_selector_takes_groups_by_priority_with_caps() -> None:
    selector = ToolSelector(
        ToolBudgetConfig(
            max_tools=6,
            group_priority=list(ToolGroup),
            group_limits={ToolGroup.WEB: 1, ToolGroup.MEMORY: 1},
        )
    )
    selector.add_group(ToolGroup.WEB, ["web_fetch", "web_search"])
    selector.add_group(ToolGroup.ALWAYS, ["thinking", "todo"])
    selector.add_group(ToolGroup.MEMORY, ["memory_get", "memory_put"])
    selector.add_group(ToolGroup.MCP, ["mcp__a__x", "mcp__a__y"])
    selected, dropped = selector.select_with_reasons()
    assert selected == ["thinking", "todo", "mcp__a__x", "mcp__a__y", "memory_get", "web_fetch"]
    assert dropped == {
        "memory_put": "group memory is capped at 1 tool(s)",
        "web_search": "group web is capped at 1 tool(s)",
    }


def test_selector_max_tools_cuts_lower_priorities_first() -> None:
    selector = ToolSelector(ToolBudgetConfig(max_tools=3))
    selector.add_group(ToolGroup.SANDBOX, ["bash"])
    selector.add_group(ToolGroup.MCP, ["mcp__a__x", "mcp__a__y"])
    selector.add_group(ToolGroup.ALWAYS, ["thinking"])
    assert selector.select() == ["thinking", "mcp__a__x", "mcp__a__y"]


def test_custom_priority_order_and_duplicates() -> None:
    selector = ToolSelector(ToolBudgetConfig(max_tools=10, group_priority=[ToolGroup.WEB, ToolGroup.ALWAYS]))
    selector.add_group(ToolGroup.ALWAYS, ["thinking", "web_search"])
    selector.add_group(ToolGroup.WEB, ["web_search"])
    selector.add_group(ToolGroup.MEMORY, ["memory_get"])  # not in group_priority: after the listed groups
    assert selector.select() == ["web_search", "thinking", "memory_get"]


def test_classify_by_name() -> None:
    assert classify("thinking") is ToolGroup.ALWAYS
    assert classify("mcp__finuslugi__get_deposits") is ToolGroup.MCP
    assert classify("memory_search") is ToolGroup.MEMORY
    assert classify("plan_create") is ToolGroup.PLANNING
    assert classify("Bash") is ToolGroup.SANDBOX
    assert classify("web_search") is ToolGroup.WEB
    assert classify("calculator") is ToolGroup.ALWAYS
    assert classify("calculator", DEFAULT_GROUP_PATTERNS, ToolGroup.PLANNING) is ToolGroup.PLANNING
