"""ToolGate, PermissionGate, ConversationGate and the prompt adapters."""

from __future__ import annotations

from typing import Any

import pytest

from services.lib.policy.domain import Msg, Phase, Scope, ToolInfo, TurnContext
from services.lib.policy.interceptors import (
    Action,
    Chain,
    ContextPrompt,
    ConversationGate,
    ConversationPrompt,
    LambdaPrompt,
    PatternGate,
    PermissionGate,
    ToolGate,
)

TOOLS = [ToolInfo("search"), ToolInfo("read_file"), ToolInfo("execute_order"), ToolInfo("admin_panel")]


def ctx(role: str = "", messages: int = 0, tools: list[ToolInfo] | None = None, **fields: Any) -> TurnContext:
    return TurnContext(
        scope=Scope("default", role_id=role),
        messages=[Msg("user", str(i)) for i in range(messages)],
        tools=list(TOOLS if tools is None else tools),
        **fields,
    )


class SafeGate(ToolGate):
    async def filter(self, tools: list[ToolInfo], c: TurnContext) -> list[ToolInfo]:
        return [t for t in tools if t.name in {"search", "read_file"}]


async def test_a_tool_gate_subclass_narrows_the_tools_and_skips_hidden_calls() -> None:
    outcome = await Chain([SafeGate()]).run(Phase.PRE_THINK, ctx())
    assert outcome.tools == ["search", "read_file"]
    assert (await Chain([SafeGate()]).run(Phase.PRE_RUN, ctx())).tools == ["search", "read_file"]
    skipped = await Chain([SafeGate()]).run(Phase.PRE_ACT, ctx(tool_name="admin_panel"))
    assert skipped.action is Action.SKIP and "admin_panel" in skipped.reason
    assert (await Chain([SafeGate()]).run(Phase.PRE_ACT, ctx(tool_name="search"))).action is Action.OK


async def test_a_gate_that_keeps_everything_reports_no_change() -> None:
    outcome = await Chain([PatternGate()]).run(Phase.PRE_THINK, ctx())
    assert outcome.tools is None and outcome.steps == []


async def test_pattern_gate_allow_and_deny_globs() -> None:
    gate = PatternGate(allow=["*"], deny=["admin_*", "execute_*"])
    assert (await Chain([gate]).run(Phase.PRE_THINK, ctx())).tools == ["search", "read_file"]
    gate = PatternGate(allow=["read_*", "search"])
    assert (await Chain([gate]).run(Phase.PRE_THINK, ctx())).tools == ["search", "read_file"]


async def test_pattern_gate_with_a_python_filter_sync_or_async() -> None:
    def only_search(tools: list[ToolInfo], c: TurnContext) -> list[str]:
        return ["search", "invented"]

    async def async_filter(tools: list[ToolInfo], c: TurnContext) -> list[ToolInfo]:
        return tools[:1]

    assert (await Chain([PatternGate(filter_fn=only_search)]).run(Phase.PRE_THINK, ctx())).tools == ["search"]
    assert (await Chain([PatternGate(filter_fn=async_filter)]).run(Phase.PRE_THINK, ctx())).tools == ["search"]


async def test_permission_gate_static_and_by_role() -> None:
    gate = PermissionGate(tools=["search", "read_file"], by_role={"admin": ["*"]})
    assert (await Chain([gate]).run(Phase.PRE_THINK, ctx("guest"))).tools == ["search", "read_file"]
    assert (await Chain([gate]).run(Phase.PRE_THINK, ctx("admin"))).tools is None  # all kept
    assert (await Chain([gate]).run(Phase.PRE_ACT, ctx("guest", tool_name="admin_panel"))).action is Action.SKIP
    assert (await Chain([gate]).run(Phase.PRE_ACT, ctx("admin", tool_name="admin_panel"))).action is Action.OK


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        (0, ["search"]),
        (3, ["search"]),
        (4, ["search", "execute_order"]),
        (8, ["search", "execute_order", "admin_panel"]),
        (20, ["search", "execute_order", "admin_panel"]),
    ],
)
async def test_conversation_gate_unlocks_by_message_count(messages: int, expected: list[str]) -> None:
    gate = ConversationGate(
        {0: ["search"], 4: ["search", "execute_order"], 8: ["search", "execute_order", "admin_panel"]}
    )
    outcome = await Chain([gate]).run(Phase.PRE_THINK, ctx(messages=messages))
    assert outcome.tools == expected


async def test_conversation_gate_uses_message_count_when_messages_are_not_sent() -> None:
    gate = ConversationGate({0: ["search"], 4: ["execute_order"]})
    early = TurnContext(scope=Scope("default"), tool_name="execute_order", message_count=2)
    late = TurnContext(scope=Scope("default"), tool_name="execute_order", message_count=5)
    assert (await Chain([gate]).run(Phase.PRE_ACT, early)).action is Action.SKIP
    assert (await Chain([gate]).run(Phase.PRE_ACT, late)).action is Action.OK


def test_conversation_gate_needs_stage_zero() -> None:
    with pytest.raises(ValueError, match="stage 0"):
        ConversationGate({2: ["x"]})


# --------------------------------------------------------------------------- prompts


async def test_context_prompt_fills_placeholders_from_the_run_context() -> None:
    c = ctx(system_prompt="Greet the user by name.", run_context={"user_name": "Alice", "role": "engineer"})
    outcome = await Chain([ContextPrompt("User: {user_name}\nRole: {role}\nAgent: {agent}")]).run(Phase.PRE_RUN, c)
    assert outcome.prompt == "Greet the user by name.\n\nUser: Alice\nRole: engineer\nAgent: default"


async def test_context_prompt_leaves_unknown_placeholders() -> None:
    outcome = await Chain([ContextPrompt("Plan: {plan}")]).run(Phase.PRE_RUN, ctx(system_prompt="P"))
    assert outcome.prompt == "P\n\nPlan: {plan}"


def test_context_prompt_rejects_a_broken_template() -> None:
    with pytest.raises(ValueError):
        ContextPrompt("unclosed {brace")


@pytest.mark.parametrize(
    ("messages", "stage"),
    [(1, "Start with a friendly greeting."), (5, "Offer deeper explanations."), (9, "Wrap up.")],
)
async def test_conversation_prompt_adds_the_current_stage(messages: int, stage: str) -> None:
    prompt = ConversationPrompt({0: "Start with a friendly greeting.", 4: "Offer deeper explanations.", 8: "Wrap up."})
    outcome = await Chain([prompt]).run(Phase.PRE_THINK, ctx(messages=messages, system_prompt="Base"))
    assert outcome.prompt == f"Base\n\n{stage}"


async def test_conversation_prompt_before_the_first_stage_does_nothing() -> None:
    prompt = ConversationPrompt({3: "later"})
    assert (await Chain([prompt]).run(Phase.PRE_THINK, ctx(messages=1))).prompt is None


async def test_lambda_prompt_sync_and_async() -> None:
    def add_time(prompt: str, c: TurnContext) -> str:
        return f"{prompt}\n[Time: noon]"

    async def shout(prompt: str, c: TurnContext) -> str:
        return prompt.upper()

    outcome = await Chain([LambdaPrompt(add_time), LambdaPrompt(shout)]).run(Phase.PRE_RUN, ctx(system_prompt="hi"))
    assert outcome.prompt == "HI\n[TIME: NOON]"


async def test_lambda_prompt_must_return_text() -> None:
    outcome = await Chain([LambdaPrompt(lambda p, c: 42)]).run(Phase.PRE_RUN, ctx(system_prompt="x"))
    assert outcome.action is Action.STOP and "expected str" in outcome.reason
