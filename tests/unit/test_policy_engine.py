"""PolicyEngine: the layers of a decision in order, per agent and role, from YAML."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import structlog

from services.lib.agents import AgentDefinition, AgentRegistry, UnknownAgentError
from services.lib.policy.assembly import Shared
from services.lib.policy.config import ConfigStore
from services.lib.policy.domain import Msg, Phase, Scope, ToolInfo, TurnContext
from services.lib.policy.engine import PolicyEngine
from services.lib.policy.hooks import HookEvent, HookHandler, HookPayload, HookReply
from services.lib.policy.interceptors.base import Action
from services.lib.policy.interceptors.context import Compaction
from services.lib.policy.ratelimit import MemoryWindowStore

STOPS: list[str] = []


# Local hooks named by the YAML below ("tests.unit.test_policy_engine:<name>").
def deny_rm(tool_input: dict[str, Any], **kwargs: Any) -> dict[str, str] | None:
    if "rm" in str(tool_input.get("expression", "")):
        return {"decision": "deny", "reason": "no rm in expressions"}
    return None


def add_precision(tool_input: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    return {"updated_input": {**tool_input, "precision": 2}}


def tag_result(result: str, **kwargs: Any) -> dict[str, str]:
    return {"result": f"{result} (contact ops@example.com)"}


def refuse_secrets(prompt: str, **kwargs: Any) -> dict[str, str] | None:
    return {"decision": "block", "reason": "secrets stay out"} if "secret" in prompt else None


def on_stop(final_text: str, session_id: str, **kwargs: Any) -> None:
    STOPS.append(f"{session_id}:{final_text}")


POLICY = """
tools:
  allowed_system_tools: [thinking]
budget:
  max_tool_calls: 4
  max_mcp_calls: 2
  timeout_per_call_ms: 1500
hooks:
  - event: PreToolUse
    matcher: calculator
    local: tests.unit.test_policy_engine:deny_rm
  - event: UserPromptSubmit
    local: tests.unit.test_policy_engine:refuse_secrets
  - event: Stop
    local: tests.unit.test_policy_engine:on_stop
commands:
  - name: about
    description: what this is
    reply: cogmesh policy
agents:
  banker:
    tools:
      extra_denied: [wire_money]
    hooks:
      - event: PreToolUse
        matcher: calculator
        local: tests.unit.test_policy_engine:add_precision
      - event: PostToolUse
        local: tests.unit.test_policy_engine:tag_result
    roles:
      credit_advisor:
        tools:
          allowed_system_tools: [credit_score]
        budget: null
"""

INTERCEPTORS = """
interceptors:
  - type: BudgetGuard
    model_calls: 5
agents:
  banker:
    interceptors:
      - type: PIIShield
        patterns: [email]
      - type: RateLimiter
        calls_per_window: 2
        window_seconds: 60
        action: block
        per_tool: true
    roles:
      credit_advisor:
        - type: PermissionGate
          tools: [calculator, credit_score, thinking]
"""

ROUTER = """
default_role: coach
roles:
  coach: {}
agents:
  banker:
    default_role: coach
    roles:
      deposit_advisor:
        keywords: [deposit, savings]
        skills: [finuslugi]
      credit_advisor:
        keywords: [credit, loan]
        skills: [credit-mcp]
"""

AGENTS = AgentRegistry.from_definitions(
    [
        AgentDefinition(name="banker", tools=["calculator", "mcp__finuslugi__get_deposits"], skills=["base"]),
        AgentDefinition(name="plain", tools=["calculator"], default_role="helper"),
    ]
)


class Summarizer:
    async def compact(self, scope: Scope, model: str, messages: Sequence[Msg], summary: str) -> Compaction:
        return Compaction("summary", [], len(messages), 0, 0, 1, 0)


def unreachable(address: str, timeout_s: float) -> HookHandler:
    async def handler(event: HookEvent, payload: HookPayload) -> HookReply | None:
        raise AssertionError("no remote hooks in these tests")

    return handler


def make_engine(directory: Path) -> PolicyEngine:
    (directory / "policy.yaml").write_text(POLICY)
    (directory / "interceptors.yaml").write_text(INTERCEPTORS)
    (directory / "role_router.yaml").write_text(ROUTER)
    return PolicyEngine(AGENTS, ConfigStore(directory), Shared(MemoryWindowStore(), unreachable, Summarizer(), {}))


@pytest.fixture
def engine(tmp_path: Path) -> PolicyEngine:
    return make_engine(tmp_path)


def scope(agent: str = "banker", role: str = "", skills: Sequence[str] = (), session: str = "s1") -> Scope:
    return Scope(agent, "t", session, "turn-1", role, frozenset(skills))


# --------------------------------------------------------------------------- tool calls


async def test_tool_policy_comes_first(engine: PolicyEngine) -> None:
    denied = await engine.check_tool_call(scope(), "Bash", {"cmd": "ls"})
    assert (denied.allowed, denied.rule, denied.source) == (False, "always_denied", "tool_policy")
    assert denied.pre_act is None  # nothing after the policy ran
    assert denied.notices[-1].kind == "status" and denied.notices[-1].text == denied.reason
    assert (await engine.check_tool_call(scope(), "wire_money", {})).rule == "always_denied"  # agent deny-list
    assert (await engine.check_tool_call(scope(agent="plain"), "wire_money", {})).rule == "default_deny"
    assert (await engine.check_tool_call(scope(), "thinking", {})).rule == "allowed_system"  # top level
    assert (await engine.check_tool_call(scope(), "credit_score", {})).rule == "default_deny"
    assert (await engine.check_tool_call(scope(role="credit_advisor"), "credit_score", {})).rule == "allowed_system"
    mcp = "mcp__credit-mcp__score"
    assert (await engine.check_tool_call(scope(), mcp, {})).rule == "mcp_skill_inactive"
    assert (await engine.check_tool_call(scope(skills=["credit-mcp"]), mcp, {})).rule == "mcp_skill_active"


async def test_allowed_calls_go_through_hooks_in_order(engine: PolicyEngine) -> None:
    ok = await engine.check_tool_call(scope(), "calculator", {"expression": "2 + 2"}, tool_call_id="c1")
    assert ok.allowed and ok.rule == "allowed_local"
    assert ok.arguments == {"expression": "2 + 2", "precision": 2} and ok.arguments_modified
    assert any(n.metadata.get("kind") == "hook_rewrote_input" for n in ok.notices)
    denied = await engine.check_tool_call(scope(), "calculator", {"expression": "rm -rf"})
    assert (denied.allowed, denied.rule) == (False, "hook_deny")
    assert denied.source == "hook:tests.unit.test_policy_engine:deny_rm"
    assert "no rm in expressions" in denied.reason
    # The plain agent has only the top-level hook: no rewrite.
    plain = await engine.check_tool_call(scope(agent="plain"), "calculator", {"expression": "1"})
    assert plain.arguments == {"expression": "1"} and not plain.arguments_modified


async def test_tool_budget_denies_past_the_caps_and_sets_mcp_timeouts(engine: PolicyEngine) -> None:
    mcp = "mcp__finuslugi__get_deposits"
    first = await engine.check_tool_call(scope(), mcp, {}, TurnContext(scope(), tool_calls=1, mcp_calls=1))
    assert first.allowed and first.timeout_ms == 1500
    assert (await engine.check_tool_call(scope(), "calculator", {"expression": "1"})).timeout_ms == 0
    capped = await engine.check_tool_call(scope(), mcp, {}, TurnContext(scope(), tool_calls=2, mcp_calls=2))
    assert (capped.allowed, capped.rule, capped.source) == (False, "tool_budget", "tool_budget")
    assert "2 MCP tool calls" in capped.reason
    spent = await engine.check_tool_call(scope(), "calculator", {"expression": "1"}, TurnContext(scope(), tool_calls=4))
    assert spent.rule == "tool_budget"
    # The credit_advisor role switches the budget off with `budget: null`.
    unlimited = await engine.check_tool_call(
        scope(role="credit_advisor"), "calculator", {"expression": "1"}, TurnContext(scope(), tool_calls=40)
    )
    assert unlimited.allowed


async def test_pre_act_interceptors_skip_and_stop(engine: PolicyEngine) -> None:
    gated = await engine.check_tool_call(
        scope(role="credit_advisor", skills=["finuslugi"]), "mcp__finuslugi__get_deposits", {}
    )
    assert (gated.allowed, gated.rule, gated.source) == (False, "interceptor_skip", "interceptor:PermissionGate")
    assert gated.pre_act is not None and gated.pre_act.action is Action.SKIP
    # RateLimiter: two calls per tool per minute, then the turn stops.
    for _ in range(2):
        assert (await engine.check_tool_call(scope(), "thinking", {})).allowed
    stopped = await engine.check_tool_call(scope(), "thinking", {})
    assert (stopped.allowed, stopped.rule) == (False, "interceptor_stop")
    assert stopped.pre_act is not None and stopped.pre_act.action is Action.STOP
    assert stopped.pre_act.error_kind == "rate_limited"
    # BudgetGuard stops at PRE_THINK once five model calls were made.
    run = await engine.run_phase(Phase.PRE_THINK, TurnContext(scope(), model_calls=5))
    assert run.outcome.action is Action.STOP


async def test_decisions_are_logged_as_structured_events(engine: PolicyEngine) -> None:
    with structlog.testing.capture_logs() as logs:
        await engine.check_tool_call(scope(), "Bash", {})
    decision = next(e for e in logs if e["event"] == "policy_decision")
    assert {k: decision[k] for k in ("tool_name", "allowed", "rule", "source", "agent", "session_id")} == {
        "tool_name": "Bash",
        "allowed": False,
        "rule": "always_denied",
        "source": "tool_policy",
        "agent": "banker",
        "session_id": "s1",
    }
    assert "security policy" in decision["reason"]


async def test_unknown_agent_raises(engine: PolicyEngine) -> None:
    with pytest.raises(UnknownAgentError):
        await engine.check_tool_call(scope(agent="ghost"), "calculator", {})


# --------------------------------------------------------------------------- results and phases


async def test_tool_results_pass_post_hooks_then_post_act_interceptors(engine: PolicyEngine) -> None:
    decision = await engine.check_tool_result(TurnContext(scope()), "calculator", "c1", {}, "4", False)
    # The hook adds an address, then PIIShield masks it: hooks run first.
    assert decision.result == "4 (contact [EMAIL_REDACTED])" and decision.modified
    plain = await engine.check_tool_result(TurnContext(scope(agent="plain")), "calculator", "c1", {}, "4", False)
    assert plain.result == "4" and not plain.modified


async def test_post_run_fires_stop_hooks(engine: PolicyEngine) -> None:
    STOPS.clear()
    await engine.run_phase(Phase.POST_RUN, TurnContext(scope(session="s9"), final_text="bye"))
    assert STOPS == ["s9:bye"]


# --------------------------------------------------------------------------- turn start


async def test_begin_turn_routes_roles_with_their_skills(engine: PolicyEngine) -> None:
    tools = [ToolInfo(n) for n in ("calculator", "Bash", "mcp__finuslugi__get_deposits", "mcp__credit-mcp__score")]
    start = await engine.begin_turn(scope(), "I want to open a deposit", "", "local", tools)
    assert start.role is not None
    assert (start.role.role_id, start.role.matched_by, start.role.skill_ids) == (
        "deposit_advisor",
        "keyword",
        ("finuslugi",),
    )
    assert start.tool_names == ["calculator", "mcp__finuslugi__get_deposits"]  # Bash and the inactive skill dropped
    assert {Phase.PRE_ACT, Phase.POST_ACT, Phase.POST_RUN, Phase.PRE_THINK} <= start.phases
    pinned = await engine.begin_turn(scope(), "a loan please", "deposit_advisor", "local", [])
    assert pinned.role is not None and pinned.role.matched_by == "explicit"
    default = await engine.begin_turn(scope(), "hello", "", "local", [])
    assert default.role is not None and (default.role.role_id, default.role.skill_ids) == ("coach", ("base",))


async def test_begin_turn_answers_commands_before_anything_else(engine: PolicyEngine) -> None:
    start = await engine.begin_turn(scope(), "/role credit_advisor", "", "local", [])
    assert start.command is not None and start.command_name == "role"
    assert (start.command.set_role, start.command.skill_ids) == ("credit_advisor", ("credit-mcp",))
    assert start.role is None
    unknown = await engine.begin_turn(scope(), "/nope", "", "local", [])
    assert unknown.command is not None and not unknown.command.ok
    assert "/about" in unknown.command.reply
    about = await engine.begin_turn(scope(), "/about", "", "local", [])
    assert about.command is not None and about.command.reply == "cogmesh policy"
    roles = await engine.handle_command(scope(), "/role")
    assert roles is not None and "coach, deposit_advisor, credit_advisor" in roles[1].reply


async def test_begin_turn_blocked_by_a_prompt_hook(engine: PolicyEngine) -> None:
    start = await engine.begin_turn(scope(), "here is a secret", "", "local", [ToolInfo("calculator")])
    assert start.blocked and "secrets stay out" in start.block_reason
    assert start.tool_names == []
    assert any(n.kind == "status" for n in start.notices)


def test_agent_default_role_applies_without_a_router_entry(engine: PolicyEngine) -> None:
    # "plain" has no router section of its own: the top level applies, whose default is coach.
    assert engine.resolve_role("plain", "hi").role_id == "coach"


async def test_select_tools_reports_why_tools_are_dropped(engine: PolicyEngine) -> None:
    selection = engine.select_tools(scope(), [ToolInfo("Bash"), ToolInfo("calculator"), ToolInfo("unknown")])
    assert selection.selected == ["calculator"]
    assert "always_denied" in selection.dropped["Bash"] and "default_deny" in selection.dropped["unknown"]


# --------------------------------------------------------------------------- hot reload


async def test_a_reload_rebuilds_what_decides(tmp_path: Path) -> None:
    engine = make_engine(tmp_path)
    assert (await engine.check_tool_call(scope(), "calculator", {"expression": "1"})).allowed
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY.replace("extra_denied: [wire_money]", "extra_denied: [wire_money, calculator]"))
    stamp = path.stat().st_mtime_ns + 10_000_000
    os.utime(path, ns=(stamp, stamp))
    assert engine.config.reload_if_changed() == "reloaded"
    assert (await engine.check_tool_call(scope(), "calculator", {"expression": "1"})).rule == "always_denied"
    assert engine.status().version == 2 and engine.status().errors == []


# --------------------------------------------------------------------------- one step, several calls


async def test_check_tool_calls_decides_in_order_and_advances_the_budget(engine: PolicyEngine) -> None:
    from services.lib.policy.engine import ToolCallCheck

    calls = [
        ToolCallCheck(scope(), "calculator", {"expression": "1"}, "c1"),
        ToolCallCheck(scope(), "Bash", {}, "c2"),
        ToolCallCheck(scope(), "calculator", {"expression": "2"}, "c3"),
        ToolCallCheck(scope(), "calculator", {"expression": "3"}, "c4"),
    ]
    step = await engine.check_tool_calls(calls, TurnContext(scope(), tool_calls=2))
    # Two calls made before the step, a budget of four: the denied Bash call does not count.
    assert [(d.allowed, d.rule) for d in step.decisions] == [
        (True, "allowed_local"),
        (False, "always_denied"),
        (True, "allowed_local"),
        (False, "tool_budget"),
    ]


async def test_check_tool_calls_stops_checking_after_a_stop(engine: PolicyEngine) -> None:
    from services.lib.policy.engine import ToolCallCheck

    calls = [ToolCallCheck(scope(session=f"s-{i}"), "thinking", {}, f"c{i}") for i in range(4)]
    step = await engine.check_tool_calls(calls, TurnContext(scope()))
    # The RateLimiter allows two "thinking" calls per minute, then stops the turn.
    assert [d.rule for d in step.decisions] == ["allowed_system", "allowed_system", "interceptor_stop", "turn_stopped"]
    assert "an earlier call of this step stopped the turn" in step.decisions[3].reason


async def test_roles_without_a_section_share_the_agent_bundle(engine: PolicyEngine) -> None:
    first = engine.bundle("banker", "made-up-1")
    assert engine.bundle("banker", "made-up-2") is first
    assert engine.bundle("banker", "credit_advisor") is not first
    # The router's default role (coach) has no section either: the same agent-level bundle.
    assert engine.bundle("banker", "") is first
    assert len(engine._bundles) == 2
