"""PolicyService over gRPC: real servers on port 0, a Node HookService, Redis, hot reload."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio
import redis.asyncio as aioredis

from cogmesh.common.v1 import events_pb2, messages_pb2
from cogmesh.policy.v1 import policy_pb2, policy_pb2_grpc
from services.context import main as context_main
from services.kit.protos import dict_to_struct, struct_to_dict
from services.kit.server import RunningServer, start
from services.lib.policy.domain import TurnContext
from services.lib.policy.interceptors import Interceptor, InterceptResult
from services.models import main as models_main
from services.policy import main as policy_main
from services.policy.settings import PolicySettings
from services.suite.settings import SuiteSettings
from tests.integration.conftest import status_details

pytestmark = pytest.mark.asyncio(loop_scope="module")

ROOT = Path(__file__).resolve().parents[2]
NODE_HOOKS = ROOT / "tests" / "node_hooks"
TIMEOUT_S = 10.0

POLICY = """
tools:
  allowed_system_tools: [dangerous_tool, weather, slow_tool, broken_tool, lookup, search]
budget:
  max_tool_calls: 5
  max_mcp_calls: 2
  timeout_per_call_ms: 1500
hooks:
  - event: PreToolUse
    name: node-guard
    remote: {hooks}
    matcher: dangerous_tool|weather|broken_tool
    timeout_ms: 1000
    fail: closed
  - event: PreToolUse
    name: node-slow-open
    remote: {hooks}
    matcher: slow_tool
    timeout_ms: 200
    fail: open
  - event: PostToolUse
    name: node-audit
    remote: {hooks}
  - event: UserPromptSubmit
    name: node-prompt
    remote: {hooks}
  - event: Stop
    name: node-stop
    remote: {hooks}
agents:
  default:
    roles:
      strict:
        hooks:
          - event: PreToolUse
            name: node-slow-closed
            remote: {hooks}
            matcher: slow_tool
            timeout_ms: 200
            fail: closed
"""

INTERCEPTORS = """
interceptors:
  - type: BudgetGuard
    model_calls: 3
    exit_behavior: error
agents:
  default:
    interceptors:
      - type: PIIShield
        patterns: [email, ssn]
      - type: ToolGate
        deny: [admin_*]
      - type: ConversationPrompt
        stages: {0: "Be brief.", 4: "Go deeper."}
      - type: ContextPrompt
        template: "User: {user_name}"
      - type: Failover
        fallbacks: [backup-model]
        max_retries_per_model: 1
      - type: custom
        entry_point: tests.integration.test_policy_service:ResponseGuard
      - type: CircuitBreaker
        failure_threshold: 2
        reset_timeout: 60
        tools: [lookup]
    roles:
      limited:
        - type: RateLimiter
          name: search-limit
          calls_per_window: 2
          window_seconds: 60
          action: block
          per_tool: true
          scope: global
"""

ROUTER = """
agents:
  default:
    default_role: assistant
    roles:
      assistant: {}
      weatherman:
        keywords: [weather, forecast]
        skills: [meteo]
      strict: {}
"""


class ResponseGuard(Interceptor):
    """A custom interceptor from YAML: ends the turn when the model's response leaks a marker."""

    async def post_think(self, ctx: TurnContext) -> InterceptResult:
        if ctx.model_response is not None and "FORBIDDEN" in ctx.model_response.content:
            return InterceptResult.stop("the response was withheld", "guardrail")
        return InterceptResult.ok()


@dataclass
class NodeHooks:
    process: asyncio.subprocess.Process
    address: str
    calls: list[dict[str, Any]] = field(default_factory=list)

    async def wait_for(self, rpc: str, **match: Any) -> dict[str, Any]:
        async with asyncio.timeout(TIMEOUT_S):
            while True:
                for call in self.calls:
                    if call["rpc"] == rpc and all(call.get(k) == v for k, v in match.items()):
                        return call
                await asyncio.sleep(0.02)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def node_hooks() -> AsyncIterator[NodeHooks]:
    node = shutil.which("node")
    if node is None or not (NODE_HOOKS / "node_modules" / "@grpc" / "grpc-js").is_dir():
        pytest.fail("the Node hook server needs node and `npm ci --prefix tests/node_hooks`")
    process = await asyncio.create_subprocess_exec(
        node, str(NODE_HOOKS / "server.js"), "0", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    assert process.stdout is not None
    try:
        line = (await asyncio.wait_for(process.stdout.readline(), TIMEOUT_S)).decode().strip()
        assert line.startswith("LISTENING "), line
        hooks = NodeHooks(process, f"127.0.0.1:{line.split()[1]}")

        async def read() -> None:
            assert process.stdout is not None
            async for raw in process.stdout:
                hooks.calls.append(json.loads(raw))

        reader = asyncio.create_task(read())
        yield hooks
        reader.cancel()
    finally:
        if process.returncode is None:
            process.terminate()
            await asyncio.wait_for(process.wait(), TIMEOUT_S)


def write(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")
    stamp = path.stat().st_mtime_ns + 1_000_000 * (len(text) + 1)
    os.utime(path, ns=(stamp, stamp))


@dataclass
class Policy:
    server: RunningServer
    stub: policy_pb2_grpc.PolicyServiceStub
    directory: Path


@contextlib.asynccontextmanager
async def policy_server(directory: Path, **settings: Any) -> AsyncIterator[Policy]:
    server = await start(
        policy_main.build,
        PolicySettings(policy_dir=directory, policy_reload_s=0.05, call_timeout_s=2, **settings),
        "127.0.0.1:0",
    )
    channel = grpc.aio.insecure_channel(server.address)
    try:
        yield Policy(server, policy_pb2_grpc.PolicyServiceStub(channel), directory)
    finally:
        await channel.close()
        await server.stop(0)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def policy(node_hooks: NodeHooks, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Policy]:
    directory = tmp_path_factory.mktemp("policy")
    write(directory / "policy.yaml", POLICY.format(hooks=node_hooks.address))
    write(directory / "interceptors.yaml", INTERCEPTORS)
    write(directory / "role_router.yaml", ROUTER)
    async with policy_server(directory) as running:
        yield running


def check(
    tool: str, args: dict[str, Any] | None = None, role: str = "", **context: Any
) -> policy_pb2.CheckToolCallRequest:
    return policy_pb2.CheckToolCallRequest(
        tenant_id="t",
        agent="default",
        role_id=role,
        tool_name=tool,
        arguments=dict_to_struct(args or {}),
        session_id="s1",
        turn_id="turn-1",
        tool_call_id="call-1",
        context=policy_pb2.TurnContext(**context) if context else None,
    )


def scope(**fields: Any) -> policy_pb2.Scope:
    return policy_pb2.Scope(**{"tenant_id": "t", "session_id": "s1", "turn_id": "turn-1", "agent": "default", **fields})


def kinds(events: Any) -> list[str]:
    return [e.WhichOneof("payload") or "" for e in events]


def notices(events: Any) -> list[str]:
    return [e.native_notice.text for e in events if e.WhichOneof("payload") == "native_notice"]


# --------------------------------------------------------------------------- tool policy


async def test_default_deny_with_a_status_event_the_client_sees(policy: Policy) -> None:
    denied = await policy.stub.CheckToolCall(check("Bash", {"cmd": "ls"}), timeout=TIMEOUT_S)
    assert denied.verdict == policy_pb2.VERDICT_DENY
    assert (denied.rule, denied.source) == ("always_denied", "tool_policy")
    assert denied.reason == "tool 'Bash' is denied by security policy (always_denied)"
    assert not denied.HasField("updated_arguments")
    [event] = denied.events
    assert event.status.text == denied.reason and event.session_id == "s1" and event.turn_id == "turn-1"

    other = await policy.stub.CheckToolCall(check("shell_exec"), timeout=TIMEOUT_S)
    assert (other.verdict, other.rule) == (policy_pb2.VERDICT_DENY, "default_deny")

    allowed = await policy.stub.CheckToolCall(check("calculator", {"expression": "17 * 23"}), timeout=TIMEOUT_S)
    assert (allowed.verdict, allowed.rule) == (policy_pb2.VERDICT_ALLOW, "allowed_local")
    assert struct_to_dict(allowed.updated_arguments) == {"expression": "17 * 23"}
    assert list(allowed.events) == []
    assert allowed.pre_act.action == policy_pb2.INTERCEPT_ACTION_OK


async def test_the_old_request_shape_still_works(policy: Policy) -> None:
    # What the runtime sends today: no context, no tool_call_id.
    request = policy_pb2.CheckToolCallRequest(
        agent="default", tool_name="calculator", arguments=dict_to_struct({"x": 1})
    )
    reply = await policy.stub.CheckToolCall(request, timeout=TIMEOUT_S)
    assert reply.verdict == policy_pb2.VERDICT_ALLOW


async def test_check_tool_calls_batches_one_step(policy: Policy) -> None:
    first = check("calculator", {"expression": "1"}, tool_calls=3)
    reply = await policy.stub.CheckToolCalls(
        policy_pb2.CheckToolCallsRequest(
            calls=[first, check("Write"), check("weather", {"city": "rome"}), check("calculator")]
        ),
        timeout=TIMEOUT_S,
    )
    # Three calls before the step and a budget of five: the fourth call of the step is over it.
    assert [(d.verdict, d.rule) for d in reply.decisions] == [
        (policy_pb2.VERDICT_ALLOW, "allowed_local"),
        (policy_pb2.VERDICT_DENY, "always_denied"),
        (policy_pb2.VERDICT_ALLOW, "allowed_system"),
        (policy_pb2.VERDICT_DENY, "tool_budget"),
    ]
    assert struct_to_dict(reply.decisions[2].updated_arguments) == {"city": "ROME"}  # the Node hook ran for it
    assert reply.decisions[1].events[0].status.text == reply.decisions[1].reason


async def test_tool_budget(policy: Policy) -> None:
    spent = await policy.stub.CheckToolCall(check("calculator", tool_calls=5), timeout=TIMEOUT_S)
    assert (spent.verdict, spent.rule) == (policy_pb2.VERDICT_DENY, "tool_budget")
    assert "5 tool calls" in spent.events[0].status.text


# --------------------------------------------------------------------------- Node hooks


async def test_a_node_hook_denies_and_rewrites(policy: Policy, node_hooks: NodeHooks) -> None:
    denied = await policy.stub.CheckToolCall(check("dangerous_tool", {"a": 1}), timeout=TIMEOUT_S)
    assert (denied.verdict, denied.rule, denied.source) == (policy_pb2.VERDICT_DENY, "hook_deny", "hook:node-guard")
    assert "node says no to dangerous_tool" in denied.reason
    assert denied.events[-1].status.text == denied.reason
    seen = await node_hooks.wait_for("PreToolUse", tool_name="dangerous_tool")
    assert (seen["session_id"], seen["turn_id"], seen["agent"], seen["tool_call_id"]) == (
        "s1",
        "turn-1",
        "default",
        "call-1",
    )
    assert seen["tool_input"] == {"a": 1}

    rewritten = await policy.stub.CheckToolCall(check("weather", {"city": "paris", "days": 3}), timeout=TIMEOUT_S)
    assert rewritten.verdict == policy_pb2.VERDICT_ALLOW
    assert struct_to_dict(rewritten.updated_arguments) == {"city": "PARIS", "days": 3}
    assert any("rewrote the input of tool 'weather'" in n for n in notices(rewritten.events))


async def test_policy_denials_never_reach_the_hook(policy: Policy, node_hooks: NodeHooks) -> None:
    before = len(node_hooks.calls)
    await policy.stub.CheckToolCall(check("Bash"), timeout=TIMEOUT_S)
    await asyncio.sleep(0.1)
    assert not [c for c in node_hooks.calls[before:] if c.get("tool_name") == "Bash"]


async def test_a_timed_out_hook_fails_open_and_says_so(policy: Policy) -> None:
    reply = await policy.stub.CheckToolCall(check("slow_tool"), timeout=TIMEOUT_S)
    assert reply.verdict == policy_pb2.VERDICT_ALLOW
    [notice] = [e.native_notice for e in reply.events]
    assert (
        notice.text
        == "hook 'node-slow-open' (PreToolUse) failed: timed out after 200 ms; fail-open: the call goes ahead"
    )
    assert struct_to_dict(notice.metadata) == {
        "kind": "hook_failed",
        "hook": "node-slow-open",
        "event": "PreToolUse",
        "fail_mode": "open",
        "error": "timed out after 200 ms",
    }


async def test_a_timed_out_hook_fails_closed_for_the_strict_role(policy: Policy) -> None:
    # The role's registry merges after the global one: the open hook runs, then the closed one.
    reply = await policy.stub.CheckToolCall(check("slow_tool", role="strict"), timeout=TIMEOUT_S)
    assert (reply.verdict, reply.rule, reply.source) == (
        policy_pb2.VERDICT_DENY,
        "hook_failed",
        "hook:node-slow-closed",
    )
    assert kinds(reply.events) == ["native_notice", "native_notice", "status"]
    assert "fail-open" in reply.events[0].native_notice.text
    assert "fail-closed: the call is denied" in reply.events[1].native_notice.text


async def test_a_failing_hook_fails_closed(policy: Policy) -> None:
    reply = await policy.stub.CheckToolCall(check("broken_tool"), timeout=TIMEOUT_S)
    assert (reply.verdict, reply.rule) == (policy_pb2.VERDICT_DENY, "hook_failed")
    assert "INTERNAL: node hook crashed" in reply.reason


async def test_an_unreachable_hook_server_follows_its_fail_rule(tmp_path: Path) -> None:
    write(tmp_path / "policy.yaml", "hooks:\n  - event: PreToolUse\n    remote: 127.0.0.1:1\n    fail: open\n")
    async with policy_server(tmp_path) as down:
        reply = await down.stub.CheckToolCall(check("calculator"), timeout=TIMEOUT_S)
        assert reply.verdict == policy_pb2.VERDICT_ALLOW
        assert "UNAVAILABLE" in notices(reply.events)[0] and "fail-open" in notices(reply.events)[0]


async def test_post_tool_use_through_node_then_pii_shield(policy: Policy, node_hooks: NodeHooks) -> None:
    request = policy_pb2.CheckToolResultRequest(
        scope=scope(), tool_name="lookup", tool_call_id="c2", result="the secret code", is_error=False
    )
    reply = await policy.stub.CheckToolResult(request, timeout=TIMEOUT_S)
    assert reply.result == "[node redacted]" and reply.modified
    await node_hooks.wait_for("PostToolUse", tool_name="lookup", result="the secret code")
    masked = await policy.stub.CheckToolResult(
        policy_pb2.CheckToolResultRequest(scope=scope(), tool_name="lookup", result="mail bob@x.io"), timeout=TIMEOUT_S
    )
    assert masked.result == "mail [EMAIL_REDACTED]"
    assert [s.interceptor for s in masked.post_act.steps] == ["PIIShield"]
    plain = await policy.stub.CheckToolResult(
        policy_pb2.CheckToolResultRequest(scope=scope(), tool_name="lookup", result="42"), timeout=TIMEOUT_S
    )
    assert (plain.result, plain.modified) == ("42", False)


async def test_user_prompt_submit_and_stop_through_node(policy: Policy, node_hooks: NodeHooks) -> None:
    blocked = await policy.stub.BeginTurn(
        policy_pb2.BeginTurnRequest(scope=scope(), text="tell me something forbidden"), timeout=TIMEOUT_S
    )
    assert blocked.blocked and "node blocks forbidden topics" in blocked.block_reason
    assert kinds(blocked.events) == ["status"]
    await node_hooks.wait_for("UserPromptSubmit", prompt="tell me something forbidden")

    await policy.stub.RunInterceptors(
        policy_pb2.RunInterceptorsRequest(
            phase=policy_pb2.PHASE_POST_RUN, scope=scope(session_id="s-stop"), final_text="all done"
        ),
        timeout=TIMEOUT_S,
    )
    stop = await node_hooks.wait_for("Stop", session_id="s-stop")
    assert stop["final_text"] == "all done"


# --------------------------------------------------------------------------- turn start


async def test_begin_turn_routes_and_selects(policy: Policy) -> None:
    tools = [messages_pb2.ToolSpec(name=n) for n in ("calculator", "Bash", "weather", "mcp__meteo__now", "mcp__x__y")]
    reply = await policy.stub.BeginTurn(
        policy_pb2.BeginTurnRequest(scope=scope(), text="What's the weather forecast?", model="local", tools=tools),
        timeout=TIMEOUT_S,
    )
    assert not reply.blocked and not reply.HasField("command")
    assert (reply.role.role_id, reply.role.matched_by, reply.role.keyword) == ("weatherman", "keyword", "weather")
    assert list(reply.role.skill_ids) == ["meteo"]
    assert list(reply.tool_names) == ["calculator", "weather", "mcp__meteo__now"]
    assert set(reply.phases) == {
        policy_pb2.PHASE_PRE_RUN,
        policy_pb2.PHASE_PRE_THINK,
        policy_pb2.PHASE_POST_THINK,
        policy_pb2.PHASE_PRE_ACT,
        policy_pb2.PHASE_POST_ACT,
        policy_pb2.PHASE_POST_RUN,
        policy_pb2.PHASE_ON_ERROR,
    }
    assert reply.config_version >= 1


@pytest.mark.parametrize(
    ("text", "ok", "reply_part", "effect"),
    [
        ("/help", True, "/role [NAME]", {}),
        ("/role weatherman", True, "Role set to weatherman.", {"set_role": "weatherman", "skill_ids": ["meteo"]}),
        ("/role pirate", False, "Available roles: assistant, weatherman, strict", {}),
        ("/model claude-sonnet", True, "Model set to claude-sonnet.", {"set_model": "claude-sonnet"}),
        ("/reset", True, "Conversation history cleared.", {"reset": True}),
        ("/dance", False, "Available commands: /help, /model, /reset, /role", {}),
    ],
)
async def test_slash_commands_are_answered_before_the_model(
    policy: Policy, text: str, ok: bool, reply_part: str, effect: dict[str, Any]
) -> None:
    reply = await policy.stub.BeginTurn(policy_pb2.BeginTurnRequest(scope=scope(), text=text), timeout=TIMEOUT_S)
    assert reply.HasField("command") and not reply.HasField("role")
    assert reply.command.ok is ok and reply.command.command == text.split()[0][1:]
    assert reply_part in reply.command.reply
    got = {
        k: v
        for k, v in {
            "set_role": reply.command.effect.set_role if reply.command.effect.HasField("set_role") else None,
            "skill_ids": list(reply.command.effect.skill_ids) or None,
            "set_model": reply.command.effect.set_model if reply.command.effect.HasField("set_model") else None,
            "reset": reply.command.effect.reset or None,
        }.items()
        if v is not None
    }
    assert got == effect
    handled = await policy.stub.HandleCommand(policy_pb2.HandleCommandRequest(scope=scope(), text=text))
    assert handled.is_command and handled.command == reply.command


async def test_resolve_role_handle_command_and_select_tools_alone(policy: Policy) -> None:
    role = await policy.stub.ResolveRole(
        policy_pb2.ResolveRoleRequest(agent="default", text="hello"), timeout=TIMEOUT_S
    )
    assert (role.role.role_id, role.role.matched_by) == ("assistant", "default")
    pinned = await policy.stub.ResolveRole(
        policy_pb2.ResolveRoleRequest(agent="default", text="forecast?", explicit_role="strict"), timeout=TIMEOUT_S
    )
    assert (pinned.role.role_id, pinned.role.matched_by) == ("strict", "explicit")
    not_command = await policy.stub.HandleCommand(policy_pb2.HandleCommandRequest(scope=scope(), text="/etc/hosts?"))
    assert not not_command.is_command
    selection = await policy.stub.SelectTools(
        policy_pb2.SelectToolsRequest(
            scope=scope(), tools=[messages_pb2.ToolSpec(name=n) for n in ("Write", "search")]
        ),
        timeout=TIMEOUT_S,
    )
    assert list(selection.tool_names) == ["search"]
    assert [(d.name, "always_denied" in d.reason) for d in selection.dropped] == [("Write", True)]


# --------------------------------------------------------------------------- interceptors over the wire


def context(**fields: Any) -> policy_pb2.TurnContext:
    return policy_pb2.TurnContext(**fields)


def message(role: int, content: str) -> messages_pb2.Message:
    return messages_pb2.Message(role=role, content=content)


async def test_pre_run_and_pre_think_modify_prompt_messages_and_tools(policy: Policy) -> None:
    tools = [messages_pb2.ToolSpec(name=n) for n in ("calculator", "admin_reset", "search")]
    pre_run = await policy.stub.RunInterceptors(
        policy_pb2.RunInterceptorsRequest(
            phase=policy_pb2.PHASE_PRE_RUN,
            scope=scope(),
            context=context(system_prompt="You help.", tools=tools, run_context=dict_to_struct({"user_name": "Ada"})),
        ),
        timeout=TIMEOUT_S,
    )
    out = pre_run.outcome
    assert out.action == policy_pb2.INTERCEPT_ACTION_OK
    assert out.system_prompt == "You help.\n\nUser: Ada"
    assert out.tools_modified and list(out.tool_names) == ["calculator", "search"]

    pre_think = await policy.stub.RunInterceptors(
        policy_pb2.RunInterceptorsRequest(
            phase=policy_pb2.PHASE_PRE_THINK,
            scope=scope(),
            context=context(
                system_prompt="You help.",
                messages=[message(messages_pb2.ROLE_USER, "I am bob@example.com, SSN 123-45-6789")],
                tools=tools,
                model_calls=0,
            ),
        ),
        timeout=TIMEOUT_S,
    )
    out = pre_think.outcome
    assert out.messages_modified
    assert out.messages[0].content == "I am [EMAIL_REDACTED], SSN [SSN_REDACTED]"
    assert out.messages[0].role == messages_pb2.ROLE_USER
    assert out.system_prompt == "You help.\n\nBe brief."
    assert [s.interceptor for s in out.steps] == ["PIIShield", "ToolGate", "ConversationPrompt"]
    assert [s.action for s in out.steps] == [
        policy_pb2.INTERCEPT_ACTION_MODIFY_MESSAGES,
        policy_pb2.INTERCEPT_ACTION_MODIFY_TOOLS,
        policy_pb2.INTERCEPT_ACTION_MODIFY_PROMPT,
    ]
    assert any("masked" in n for n in notices(pre_think.events))


async def test_budget_guard_stop_is_an_error_outcome(policy: Policy) -> None:
    reply = await policy.stub.RunInterceptors(
        policy_pb2.RunInterceptorsRequest(
            phase=policy_pb2.PHASE_PRE_THINK, scope=scope(), context=context(model_calls=3)
        ),
        timeout=TIMEOUT_S,
    )
    assert reply.outcome.action == policy_pb2.INTERCEPT_ACTION_STOP
    assert reply.outcome.error_kind == events_pb2.ERROR_KIND_BUDGET_EXCEEDED
    assert "3 of 3 model calls" in reply.outcome.reason


async def test_post_think_runs_a_custom_interceptor_on_the_model_response(policy: Policy) -> None:
    async def post_think(text: str) -> policy_pb2.RunInterceptorsResponse:
        return await policy.stub.RunInterceptors(  # type: ignore[no-any-return]
            policy_pb2.RunInterceptorsRequest(
                phase=policy_pb2.PHASE_POST_THINK,
                scope=scope(),
                model_response=message(messages_pb2.ROLE_ASSISTANT, text),
            ),
            timeout=TIMEOUT_S,
        )

    assert (await post_think("all fine")).outcome.action == policy_pb2.INTERCEPT_ACTION_OK
    stopped = (await post_think("this is FORBIDDEN")).outcome
    assert stopped.action == policy_pb2.INTERCEPT_ACTION_STOP
    assert (stopped.reason, stopped.error_kind) == ("the response was withheld", events_pb2.ERROR_KIND_GUARDRAIL)
    assert [s.interceptor for s in stopped.steps] == ["ResponseGuard"]


async def test_failover_round_trips_its_state(policy: Policy) -> None:
    failed = await policy.stub.RunInterceptors(
        policy_pb2.RunInterceptorsRequest(
            phase=policy_pb2.PHASE_ON_ERROR,
            scope=scope(),
            context=context(model="primary"),
            error=policy_pb2.ModelFailure(kind="rate_limit", message="429"),
        ),
        timeout=TIMEOUT_S,
    )
    assert failed.outcome.model == "backup-model" and failed.outcome.HasField("state")
    assert "retrying with backup-model" in notices(failed.events)[0]
    # The runtime passes the state back: the next PRE_THINK stays on the fallback.
    think = await policy.stub.RunInterceptors(
        policy_pb2.RunInterceptorsRequest(
            phase=policy_pb2.PHASE_PRE_THINK,
            scope=scope(),
            context=context(model="primary", state=failed.outcome.state),
        ),
        timeout=TIMEOUT_S,
    )
    assert think.outcome.model == "backup-model"
    again = await policy.stub.RunInterceptors(
        policy_pb2.RunInterceptorsRequest(
            phase=policy_pb2.PHASE_ON_ERROR,
            scope=scope(),
            context=context(model="backup-model", state=failed.outcome.state),
            error=policy_pb2.ModelFailure(kind="timeout"),
        ),
        timeout=TIMEOUT_S,
    )
    assert not again.outcome.HasField("model")  # no fallback left: the runtime fails the turn


async def test_circuit_breaker_and_rate_limiter_in_check_tool_call(policy: Policy) -> None:
    for _ in range(2):
        await policy.stub.CheckToolResult(
            policy_pb2.CheckToolResultRequest(scope=scope(), tool_name="lookup", result="boom", is_error=True),
            timeout=TIMEOUT_S,
        )
    skipped = await policy.stub.CheckToolCall(check("lookup"), timeout=TIMEOUT_S)
    assert (skipped.verdict, skipped.rule, skipped.source) == (
        policy_pb2.VERDICT_DENY,
        "interceptor_skip",
        "interceptor:CircuitBreaker",
    )
    assert skipped.pre_act.action == policy_pb2.INTERCEPT_ACTION_SKIP
    assert "circuit open for tool 'lookup'" in skipped.events[-1].status.text

    # The "limited" role adds a RateLimiter: two calls of a tool per minute, then the turn stops.
    for _ in range(2):
        allowed = await policy.stub.CheckToolCall(check("search", role="limited"), timeout=TIMEOUT_S)
        assert allowed.verdict == policy_pb2.VERDICT_ALLOW
    assert (await policy.stub.CheckToolCall(check("calculator", role="limited"), timeout=TIMEOUT_S)).verdict == (
        policy_pb2.VERDICT_ALLOW
    )  # per tool
    stopped = await policy.stub.CheckToolCall(check("search", role="limited"), timeout=TIMEOUT_S)
    assert (stopped.verdict, stopped.rule) == (policy_pb2.VERDICT_DENY, "interceptor_stop")
    assert stopped.pre_act.action == policy_pb2.INTERCEPT_ACTION_STOP
    assert stopped.pre_act.error_kind == events_pb2.ERROR_KIND_RATE_LIMITED


async def test_rate_limits_are_shared_by_replicas_through_redis(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    write(
        tmp_path / "interceptors.yaml",
        "interceptors:\n  - type: RateLimiter\n    calls_per_window: 3\n    window_seconds: 60\n    action: block\n",
    )
    settings = {"redis_url": redis_url, "redis_key_prefix": redis_prefix}
    async with policy_server(tmp_path, **settings) as a, policy_server(tmp_path, **settings) as b:
        verdicts = [
            (await replica.stub.CheckToolCall(check("calculator"), timeout=TIMEOUT_S)).verdict
            for replica in (a, b, a, b)
        ]
    assert verdicts == [policy_pb2.VERDICT_ALLOW] * 3 + [policy_pb2.VERDICT_DENY]
    client = aioredis.from_url(redis_url)
    try:
        keys = [k.decode() async for k in client.scan_iter(match=redis_prefix + "*")]
    finally:
        await client.aclose()
    assert keys and all(k.startswith(redis_prefix + "policy:ratelimit:") for k in keys)


# --------------------------------------------------------------------------- hot reload


async def test_hot_reload_and_rejected_files_keep_the_last_good_config(tmp_path: Path) -> None:
    write(tmp_path / "policy.yaml", "tools:\n  extra_denied: []\n")
    async with policy_server(tmp_path) as running:
        stub = running.stub
        assert (await stub.CheckToolCall(check("calculator"), timeout=TIMEOUT_S)).verdict == policy_pb2.VERDICT_ALLOW
        write(tmp_path / "policy.yaml", "tools:\n  extra_denied: [calculator]\n")
        status = await _until_status(stub, lambda s: s.config_version == 2)
        assert list(status.errors) == []
        denied = await stub.CheckToolCall(check("calculator"), timeout=TIMEOUT_S)
        assert denied.reason == "tool 'calculator' is denied by the configured deny-list (always_denied)"

        write(tmp_path / "policy.yaml", "tools:\n  extra_denied: [calculator]\nbudget:\n  max_tool_calls: lots\n")
        status = await _until_status(stub, lambda s: len(s.errors) > 0)
        assert status.config_version == 2
        [error] = status.errors
        assert (error.file, error.line, error.field) == ("policy.yaml", 4, "budget.max_tool_calls")
        assert "valid integer" in error.message
        # The last good configuration still decides.
        assert (await stub.CheckToolCall(check("calculator"), timeout=TIMEOUT_S)).rule == "always_denied"

        write(tmp_path / "policy.yaml", "tools:\n  extra_denied: []\n")
        status = await _until_status(stub, lambda s: s.config_version == 3)
        assert list(status.errors) == []
        assert (await stub.CheckToolCall(check("calculator"), timeout=TIMEOUT_S)).verdict == policy_pb2.VERDICT_ALLOW


async def _until_status(stub: policy_pb2_grpc.PolicyServiceStub, condition: Any) -> policy_pb2.GetPolicyStatusResponse:
    async with asyncio.timeout(TIMEOUT_S):
        while True:
            status = await stub.GetPolicyStatus(policy_pb2.GetPolicyStatusRequest())
            if condition(status):
                return status  # type: ignore[no-any-return]
            await asyncio.sleep(0.02)


async def test_a_bad_file_at_start_refuses_to_start(tmp_path: Path) -> None:
    write(tmp_path / "interceptors.yaml", "interceptors:\n  - type: Nope\n")
    with pytest.raises(SystemExit, match=r"interceptors.yaml:2: interceptors\[0\]: unknown type 'Nope'"):
        async with policy_server(tmp_path):
            pass


# --------------------------------------------------------------------------- ContextCompressor via context


async def test_context_compressor_uses_the_context_service(tmp_path: Path) -> None:
    write(
        tmp_path / "interceptors.yaml",
        "interceptors:\n  - type: ContextCompressor\n    threshold_tokens: 200\n    keep_recent: 2\n",
    )
    settings = SuiteSettings(call_timeout_s=5)
    models = await start(models_main.build, settings, "127.0.0.1:0")
    context_server = await start(
        context_main.build, settings.model_copy(update={"models_addr": models.address}), "127.0.0.1:0"
    )
    try:
        async with policy_server(tmp_path, context_addr=context_server.address, models_addr=models.address) as running:
            history = [
                message(
                    messages_pb2.ROLE_USER if i % 2 == 0 else messages_pb2.ROLE_ASSISTANT, f"turn {i}: " + "word " * 60
                )
                for i in range(8)
            ]
            reply = await running.stub.RunInterceptors(
                policy_pb2.RunInterceptorsRequest(
                    phase=policy_pb2.PHASE_PRE_THINK, scope=scope(), context=context(messages=history, model="local")
                ),
                timeout=TIMEOUT_S,
            )
    finally:
        await context_server.stop(0)
        await models.stop(0)
    out = reply.outcome
    assert out.messages_modified, notices(reply.events)
    assert out.messages[0].role == messages_pb2.ROLE_SYSTEM
    assert out.messages[0].content.startswith("[Summary of the earlier conversation]")
    assert "turn 0" in out.messages[0].content  # the summary covers the folded messages
    assert [m.content[:7] for m in out.messages[-2:]] == ["turn 6:", "turn 7:"]
    assert len(out.messages) < len(history)
    assert "context_compacted" in kinds(reply.events)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("rpc", "request_", "fields"),
    [
        ("CheckToolCall", policy_pb2.CheckToolCallRequest(), {"agent", "tool_name"}),
        (
            "CheckToolCall",
            policy_pb2.CheckToolCallRequest(
                agent="default", tool_name="x" * 300, context=policy_pb2.TurnContext(tool_calls=-1)
            ),
            {"tool_name", "context.tool_calls"},
        ),
        ("CheckToolCalls", policy_pb2.CheckToolCallsRequest(), {"calls"}),
        (
            "CheckToolCalls",
            policy_pb2.CheckToolCallsRequest(
                calls=[
                    policy_pb2.CheckToolCallRequest(agent="default", tool_name="x"),
                    policy_pb2.CheckToolCallRequest(),
                ]
            ),
            {"calls[1].agent", "calls[1].tool_name"},
        ),
        ("CheckToolResult", policy_pb2.CheckToolResultRequest(), {"scope", "tool_name"}),
        ("CheckToolResult", policy_pb2.CheckToolResultRequest(scope=policy_pb2.Scope()), {"scope.agent", "tool_name"}),
        ("RunInterceptors", policy_pb2.RunInterceptorsRequest(), {"phase", "scope"}),
        (
            "RunInterceptors",
            policy_pb2.RunInterceptorsRequest(
                phase=policy_pb2.PHASE_ON_ERROR,
                scope=policy_pb2.Scope(agent="default"),
                error=policy_pb2.ModelFailure(kind="meteor"),
            ),
            {"error.kind"},
        ),
        (
            "RunInterceptors",
            policy_pb2.RunInterceptorsRequest(phase=policy_pb2.PHASE_PRE_ACT, scope=policy_pb2.Scope(agent="default")),
            {"tool_call.name"},
        ),
        (
            "RunInterceptors",
            policy_pb2.RunInterceptorsRequest(phase=99, scope=policy_pb2.Scope(agent="default")),  # type: ignore[arg-type]
            {"phase"},
        ),
        (
            "BeginTurn",
            policy_pb2.BeginTurnRequest(scope=policy_pb2.Scope(), tools=[messages_pb2.ToolSpec(name="")]),
            {"scope.agent"},  # the fields' rules first, a tool's name once they hold (next case)
        ),
        (
            "BeginTurn",
            policy_pb2.BeginTurnRequest(
                scope=policy_pb2.Scope(agent="default"), tools=[messages_pb2.ToolSpec(name="")]
            ),
            {"tools[0].name"},
        ),
        ("ResolveRole", policy_pb2.ResolveRoleRequest(), {"agent"}),
        ("HandleCommand", policy_pb2.HandleCommandRequest(), {"scope"}),
        ("SelectTools", policy_pb2.SelectToolsRequest(scope=policy_pb2.Scope()), {"scope.agent"}),
    ],
)
async def test_bad_input_is_invalid_argument_naming_fields(
    policy: Policy, rpc: str, request_: Any, fields: set[str]
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await getattr(policy.stub, rpc)(request_, timeout=TIMEOUT_S)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    info, violations = status_details(caught.value)
    assert info is not None and info.reason == "INVALID_ARGUMENT"
    assert {field for field, _ in violations} == fields


@pytest.mark.parametrize(
    ("rpc", "request_"),
    [
        ("CheckToolCall", policy_pb2.CheckToolCallRequest(agent="ghost", tool_name="calculator")),
        ("CheckToolResult", policy_pb2.CheckToolResultRequest(scope=policy_pb2.Scope(agent="ghost"), tool_name="x")),
        (
            "RunInterceptors",
            policy_pb2.RunInterceptorsRequest(phase=policy_pb2.PHASE_PRE_RUN, scope=policy_pb2.Scope(agent="ghost")),
        ),
        ("BeginTurn", policy_pb2.BeginTurnRequest(scope=policy_pb2.Scope(agent="ghost"), text="hi")),
        ("ResolveRole", policy_pb2.ResolveRoleRequest(agent="ghost")),
        ("HandleCommand", policy_pb2.HandleCommandRequest(scope=policy_pb2.Scope(agent="ghost"), text="/help")),
        ("SelectTools", policy_pb2.SelectToolsRequest(scope=policy_pb2.Scope(agent="ghost"))),
    ],
)
async def test_unknown_agents_are_not_found(policy: Policy, rpc: str, request_: Any) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await getattr(policy.stub, rpc)(request_, timeout=TIMEOUT_S)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    info, _ = status_details(caught.value)
    assert info is not None and info.reason == "AGENT_NOT_FOUND"
