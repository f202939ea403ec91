from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from services.lib.policy.tool_policy import (
    ALWAYS_DENIED,
    Decision,
    DefaultToolPolicy,
    ToolPolicyInput,
)

# The seed's always-denied list with the snake_case spelling of each tool.
SEED_DENIED = {
    "Bash": "bash",
    "Read": "read",
    "Write": "write",
    "Edit": "edit",
    "MultiEdit": "multi_edit",
    "Glob": "glob",
    "Grep": "grep",
    "LS": "ls",
    "TodoRead": "todo_read",
    "TodoWrite": "todo_write",
    "WebFetch": "web_fetch",
    "WebSearch": "web_search",
}
ALL_SEED_DENIED = sorted(set(SEED_DENIED) | set(SEED_DENIED.values()))

MCP_TOOL = "mcp__finuslugi__get_deposits"


def _input(
    tool_name: str,
    input_data: dict[str, Any] | None = None,
    *,
    skills: set[str] | None = None,
    local: set[str] | None = None,
) -> ToolPolicyInput:
    return ToolPolicyInput(
        tool_name=tool_name,
        input_data=input_data if input_data is not None else {},
        active_skill_ids=frozenset(skills or ()),
        allowed_local_tools=frozenset(local or ()),
    )


def _assert_denied(decision: Decision, rule: str, tool: str) -> None:
    assert decision.allowed is False
    assert decision.rule == rule
    assert decision.updated_input is None
    assert repr(tool) in decision.reason
    assert f"({rule})" in decision.reason


def test_always_denied_is_exactly_the_seed_list_in_both_spellings() -> None:
    assert frozenset(ALL_SEED_DENIED) == ALWAYS_DENIED
    assert len(ALWAYS_DENIED) == 24


# --- step 1: always denied ---------------------------------------------------


@pytest.mark.parametrize("tool", ALL_SEED_DENIED)
def test_always_denied_tools_are_denied(tool: str) -> None:
    _assert_denied(DefaultToolPolicy().decide(_input(tool)), "always_denied", tool)


def test_always_denied_reason_is_readable() -> None:
    decision = DefaultToolPolicy().decide(_input("Bash"))
    assert decision.reason == "tool 'Bash' is denied by security policy (always_denied)"


@pytest.mark.parametrize("tool", ["Bash", "multi_edit", "LS", "web_fetch"])
def test_always_denied_beats_every_allow_list(tool: str) -> None:
    policy = DefaultToolPolicy(allowed_system_tools={tool})
    _assert_denied(policy.decide(_input(tool, local={tool})), "always_denied", tool)


def test_seed_example_allowing_websearch_as_system_tool_has_no_effect() -> None:
    policy = DefaultToolPolicy(allowed_system_tools={"WebSearch"})
    _assert_denied(policy.decide(_input("WebSearch")), "always_denied", "WebSearch")


def test_extra_denied_joins_step_one() -> None:
    policy = DefaultToolPolicy(
        extra_denied={"dangerous_tool", MCP_TOOL},
        allowed_system_tools={"dangerous_tool"},
    )
    _assert_denied(
        policy.decide(_input("dangerous_tool", local={"dangerous_tool"})),
        "always_denied",
        "dangerous_tool",
    )
    # Even an MCP tool whose skill is active.
    _assert_denied(policy.decide(_input(MCP_TOOL, skills={"finuslugi"})), "always_denied", MCP_TOOL)
    # Built-in denials still apply alongside the extras.
    _assert_denied(policy.decide(_input("Bash")), "always_denied", "Bash")


def test_policy_copies_its_configuration() -> None:
    extra: set[str] = set()
    allowed: set[str] = {"calc"}
    policy = DefaultToolPolicy(extra_denied=extra, allowed_system_tools=allowed)
    extra.add("calc")
    allowed.add("other")
    assert policy.decide(_input("calc")).allowed is True
    assert policy.decide(_input("other")).allowed is False


# --- steps 2 and 3: allow-lists ------------------------------------------------


def test_allowed_local_tool() -> None:
    data = {"a": 1, "nested": {"b": [1, 2]}}
    decision = DefaultToolPolicy().decide(_input("calculator", data, local={"calculator"}))
    assert decision.allowed is True
    assert decision.rule == "allowed_local"
    assert decision.reason == "tool 'calculator' is allowed as a local tool (allowed_local)"
    assert decision.updated_input == data


def test_allowed_local_wins_over_allowed_system() -> None:
    policy = DefaultToolPolicy(allowed_system_tools={"calculator"})
    assert policy.decide(_input("calculator", local={"calculator"})).rule == "allowed_local"


def test_allowed_local_mcp_tool_does_not_need_an_active_skill() -> None:
    tool = "mcp__app_tools__calculator"
    decision = DefaultToolPolicy().decide(_input(tool, local={tool}))
    assert (decision.allowed, decision.rule) == (True, "allowed_local")


def test_allowed_system_tool() -> None:
    policy = DefaultToolPolicy(allowed_system_tools={"thinking"})
    decision = policy.decide(_input("thinking", {"x": 1}))
    assert (decision.allowed, decision.rule) == (True, "allowed_system")
    assert "'thinking'" in decision.reason
    assert decision.updated_input == {"x": 1}


def test_allowed_system_wins_over_inactive_mcp_skill() -> None:
    policy = DefaultToolPolicy(allowed_system_tools={MCP_TOOL})
    assert policy.decide(_input(MCP_TOOL)).rule == "allowed_system"


def test_allow_lists_are_per_tool_not_per_call() -> None:
    # Allow-listing a tool for one caller does not leak into a fresh input.
    policy = DefaultToolPolicy()
    assert policy.decide(_input("calculator", local={"calculator"})).allowed is True
    _assert_denied(policy.decide(_input("calculator")), "default_deny", "calculator")


# --- steps 4 and 5: MCP tools ------------------------------------------------


def test_mcp_tool_with_active_skill_is_allowed() -> None:
    decision = DefaultToolPolicy().decide(_input(MCP_TOOL, {"currency": "RUB"}, skills={"finuslugi", "other"}))
    assert (decision.allowed, decision.rule) == (True, "mcp_skill_active")
    assert "'finuslugi'" in decision.reason
    assert decision.updated_input == {"currency": "RUB"}


def test_mcp_server_name_may_contain_single_underscores() -> None:
    decision = DefaultToolPolicy().decide(_input("mcp__app_tools__calculator", skills={"app_tools"}))
    assert decision.rule == "mcp_skill_active"
    assert "'app_tools'" in decision.reason


def test_mcp_tool_name_may_contain_double_underscores() -> None:
    decision = DefaultToolPolicy().decide(_input("mcp__srv__do__it", skills={"srv"}))
    assert decision.rule == "mcp_skill_active"


def test_mcp_tool_with_inactive_skill_is_denied() -> None:
    decision = DefaultToolPolicy().decide(_input(MCP_TOOL, skills={"credit-mcp"}))
    _assert_denied(decision, "mcp_skill_inactive", MCP_TOOL)
    assert "'finuslugi'" in decision.reason


@pytest.mark.parametrize("skill", ["get_deposits", "finuslugi__get_deposits", "FINUSLUGI", "mcp"])
def test_only_the_exact_server_name_activates_the_tool(skill: str) -> None:
    _assert_denied(
        DefaultToolPolicy().decide(_input(MCP_TOOL, skills={skill})),
        "mcp_skill_inactive",
        MCP_TOOL,
    )


@pytest.mark.parametrize("tool", ["mcp__", "mcp__x", "mcp____tool", "mcp__srv__", "mcp__srv_tool"])
def test_malformed_mcp_names_are_denied(tool: str) -> None:
    # Even with every plausible skill active.
    decision = DefaultToolPolicy().decide(_input(tool, skills={"", "x", "srv", "tool", "srv_tool"}))
    _assert_denied(decision, "default_deny", tool)
    assert "malformed" in decision.reason


# --- step 6: default deny ----------------------------------------------------


@pytest.mark.parametrize(
    "tool",
    [
        "calculator",
        "",
        "BASH",
        "Multi_Edit",
        "MCP__finuslugi__get_deposits",
        "mcp_x__y",
    ],
)
def test_everything_else_is_denied(tool: str) -> None:
    decision = DefaultToolPolicy().decide(_input(tool, skills={"finuslugi", "x"}))
    _assert_denied(decision, "default_deny", tool)
    assert "malformed" not in decision.reason


# --- decision values ---------------------------------------------------------


def test_updated_input_is_an_independent_copy() -> None:
    data: dict[str, Any] = {"items": [1, 2], "opts": {"k": "v"}}
    decision = DefaultToolPolicy().decide(_input(MCP_TOOL, data, skills={"finuslugi"}))
    assert decision.updated_input == data
    assert decision.updated_input is not data
    data["items"].append(3)
    data["opts"]["k"] = "changed"
    assert decision.updated_input == {"items": [1, 2], "opts": {"k": "v"}}


def test_input_and_decision_are_frozen() -> None:
    inp = _input("Bash")
    decision = DefaultToolPolicy().decide(inp)
    with pytest.raises(dataclasses.FrozenInstanceError):
        inp.tool_name = "calculator"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        decision.allowed = True  # type: ignore[misc]
