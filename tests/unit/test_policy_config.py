"""Policy YAML: validation errors naming file, line and field; hot reload keeping the last good config."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path
from typing import Any

import pytest

from services.lib.policy.config import (
    DEFAULT_POLICY_DIR,
    FILES,
    BudgetGuardSpec,
    ConfigRejected,
    ConfigStore,
    load_config,
)
from services.lib.policy.domain import TurnContext
from services.lib.policy.interceptors import Interceptor, InterceptResult


class Shout(Interceptor):
    """A custom interceptor for the `custom` type."""

    def __init__(self, suffix: str = "!"):
        self.suffix = suffix

    async def pre_run(self, ctx: TurnContext) -> InterceptResult:
        return InterceptResult.modify_prompt(ctx.system_prompt.upper() + self.suffix)


def not_an_interceptor() -> object:
    return object()


def write(directory: Path, name: str, text: str) -> None:
    path = directory / name
    path.write_text(text, encoding="utf-8")
    # Each write gets a distinct mtime so the store sees it even within one clock tick.
    stamp = path.stat().st_mtime_ns + 1_000_000 * (len(text) + 1)
    os.utime(path, ns=(stamp, stamp))


def errors_of(directory: Path) -> list[str]:
    with pytest.raises(ConfigRejected) as caught:
        load_config(directory, 1)
    return [str(e) for e in caught.value.errors]


def test_shipped_defaults_load() -> None:
    config = load_config(DEFAULT_POLICY_DIR, 1)
    assert config.files == FILES
    assert config.policy.budget is not None and config.policy.budget.max_tool_calls == 8
    assert isinstance(config.interceptors.interceptors[0], BudgetGuardSpec)
    assert config.router.agents["default"].default_role == "assistant"


def test_missing_and_empty_files_mean_defaults(tmp_path: Path) -> None:
    write(tmp_path, "policy.yaml", "")
    config = load_config(tmp_path, 1)
    assert config.files == ("policy.yaml",)
    assert config.interceptors.interceptors == [] and config.router.roles == {}


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        (
            "interceptors.yaml",
            "interceptors:\n  - type: BudgetGuard\n    model_calls: 5\n  - type: RateLimiter\n    window_seconds: -1\n",
            "interceptors.yaml:5: interceptors[1].window_seconds: Input should be greater than 0",
        ),
        (
            "interceptors.yaml",
            "interceptors:\n  - type: TokenLimiter\n    message: hi\n",
            "interceptors.yaml:2: interceptors[0].max_tokens: Field required",
        ),
        (
            "interceptors.yaml",
            "interceptors:\n  - type: RateLimiter\n    scope: user\n",
            "interceptors.yaml:3: interceptors[0].scope: must be agent, session, tenant, global or scope:<key>",
        ),
        (
            "interceptors.yaml",
            "interceptors:\n  - type: Nope\n",
            "interceptors.yaml:2: interceptors[0]: unknown type 'Nope'; expected one of: BudgetGuard, PIIShield",
        ),
        (
            "interceptors.yaml",
            "agents:\n  default:\n    roles:\n      coach:\n"
            "        - type: PIIShield\n          patterns: [email, dna]\n",
            "interceptors.yaml:6: agents.default.roles.coach[0].patterns[1]: Input should be",
        ),
        (
            "interceptors.yaml",
            "interceptors:\n  - type: ConversationGate\n    stages: {4: [a]}\n",
            "interceptors.yaml:3: interceptors[0].stages: must include stage 0",
        ),
        (
            "interceptors.yaml",
            "interceptors:\n  - type: ContentFilter\n    blocked_patterns: ['(unclosed']\n",
            "interceptors.yaml:3: interceptors[0].blocked_patterns: pattern 0 ('(unclosed') is not a regular"
            " expression",
        ),
        (
            "interceptors.yaml",
            "interceptors:\n  - type: custom\n"
            "    entry_point: tests.unit.test_policy_config:Shout\n    options: {volume: 11}\n",
            "interceptors.yaml:2: interceptors[0]: tests.unit.test_policy_config:Shout(**options) failed: TypeError",
        ),
        (
            "interceptors.yaml",
            "interceptors:\n  - type: custom\n    entry_point: tests.unit.test_policy_config:not_an_interceptor\n",
            "not an Interceptor",
        ),
        (
            "policy.yaml",
            "tools:\n  extra_denied: [x]\n  allowed_sytem_tools: [y]\n",
            "policy.yaml:3: tools.allowed_sytem_tools: Extra inputs are not permitted",
        ),
        (
            "policy.yaml",
            "hooks:\n  - event: PreToolUse\n    local: tests.unit.nowhere:hook\n",
            "policy.yaml:3: hooks[0].local: cannot import module 'tests.unit.nowhere'",
        ),
        (
            "policy.yaml",
            "hooks:\n  - event: Stop\n    matcher: Bash\n    remote: 127.0.0.1:7000\n",
            "policy.yaml:3: hooks[0].matcher: Stop hooks take no matcher",
        ),
        (
            "policy.yaml",
            "hooks:\n  - event: PreToolUse\n    matcher: '(['\n    remote: 127.0.0.1:7000\n",
            "policy.yaml:3: hooks[0].matcher: not a regular expression",
        ),
        (
            "policy.yaml",
            "hooks:\n  - event: PreToolUse\n    remote: 'not an address'\n",
            "policy.yaml:3: hooks[0].remote: 'not an address' is not a host:port address",
        ),
        (
            "policy.yaml",
            "hooks:\n  - event: PreToolUse\n    timeout_ms: 100\n",
            "policy.yaml:2: hooks[0]: give exactly one of `local`",
        ),
        (
            "policy.yaml",
            "agents:\n  default:\n    budget:\n      max_tool_calls: many\n",
            "policy.yaml:4: agents.default.budget.max_tool_calls: Input should be a valid integer",
        ),
        (
            "role_router.yaml",
            "roles:\n  coach:\n    keywords: hello\n",
            "role_router.yaml:3: roles.coach.keywords: Input should be a valid list",
        ),
        ("role_router.yaml", "roles: [\n", "role_router.yaml:2: YAML syntax error"),
        ("role_router.yaml", "- just\n- a list\n", "role_router.yaml:1: expected a mapping at top level, got list"),
    ],
)
def test_errors_name_file_line_and_field(tmp_path: Path, name: str, text: str, expected: str) -> None:
    write(tmp_path, name, text)
    errors = errors_of(tmp_path)
    assert any(e.startswith(expected) or expected in e for e in errors), errors


def test_every_bad_file_is_reported_at_once(tmp_path: Path) -> None:
    write(tmp_path, "policy.yaml", "budget: {max_tool_calls: -1}\n")
    write(tmp_path, "role_router.yaml", "default_role: [x]\n")
    errors = errors_of(tmp_path)
    assert [e.split(":")[0] for e in errors] == ["policy.yaml", "role_router.yaml"]


def test_a_bad_file_at_start_raises(tmp_path: Path) -> None:
    write(tmp_path, "policy.yaml", "nonsense: true\n")
    with pytest.raises(ConfigRejected, match=r"policy.yaml:1: nonsense: Extra inputs are not permitted"):
        ConfigStore(tmp_path)


def test_reload_takes_good_changes_and_keeps_the_last_good_config(tmp_path: Path) -> None:
    write(tmp_path, "interceptors.yaml", "interceptors:\n  - type: BudgetGuard\n    model_calls: 5\n")
    store = ConfigStore(tmp_path)
    assert store.reload_if_changed() == "unchanged"
    assert store.current.version == 1

    write(tmp_path, "interceptors.yaml", "interceptors:\n  - type: BudgetGuard\n    model_calls: 7\n")
    assert store.reload_if_changed() == "reloaded"
    assert store.current.version == 2
    assert store.current.interceptors.interceptors[0].model_calls == 7  # type: ignore[union-attr]

    write(tmp_path, "interceptors.yaml", "interceptors:\n  - type: BudgetGuard\n    model_calls: -7\n")
    assert store.reload_if_changed() == "rejected"
    assert store.current.version == 2
    assert store.current.interceptors.interceptors[0].model_calls == 7  # type: ignore[union-attr]
    assert [str(e) for e in store.errors] == [
        "interceptors.yaml:3: interceptors[0].model_calls: Input should be greater than or equal to 0"
    ]
    assert store.reload_if_changed() == "unchanged"  # the same bad file is not re-read

    write(tmp_path, "role_router.yaml", "default_role: coach\n")  # a new file while another is broken
    assert store.reload_if_changed() == "rejected"
    assert store.current.router.default_role == ""

    write(tmp_path, "interceptors.yaml", "interceptors: []\n")
    assert store.reload_if_changed() == "reloaded"
    assert store.current.version == 3 and store.errors == []
    assert store.current.router.default_role == "coach"

    (tmp_path / "role_router.yaml").unlink()
    assert store.reload_if_changed() == "reloaded"
    assert store.current.router.default_role == ""


async def test_watch_reloads_in_the_background(tmp_path: Path) -> None:
    write(tmp_path, "policy.yaml", "budget: {max_tool_calls: 3}\n")
    store = ConfigStore(tmp_path)
    task = asyncio.create_task(store.watch(0.01))
    try:
        write(tmp_path, "policy.yaml", "budget: {max_tool_calls: 4}\n")
        await _until(lambda: store.current.version == 2)
        assert store.current.policy.budget is not None and store.current.policy.budget.max_tool_calls == 4
        write(tmp_path, "policy.yaml", "budget: {max_tool_calls: x}\n")
        await _until(lambda: bool(store.errors))
        assert store.current.version == 2
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _until(condition: Any) -> None:
    async with asyncio.timeout(5.0):
        while True:
            if condition():
                return
            await asyncio.sleep(0.01)


def keep_first(tools: list[Any], ctx: TurnContext) -> list[Any]:
    return tools[:1]


def bracket(prompt: str, ctx: TurnContext) -> str:
    return f"[{prompt}]"


EVERY_TYPE = """
interceptors:
  - {type: BudgetGuard, model_calls: 10, tool_calls: 50}
  - {type: PIIShield, patterns: [email, ssn], action: mask}
  - {type: ContentFilter, blocked_words: [password]}
  - {type: TokenLimiter, max_tokens: 8000}
  - {type: ContextCompressor, threshold_tokens: 8000, keep_recent: 4}
  - {type: ToolGate, deny: ["admin_*"], filter: "tests.unit.test_policy_config:keep_first"}
  - {type: PermissionGate, tools: [search], by_role: {admin: ["*"]}}
  - {type: ConversationGate, stages: {0: [search], 4: [search, execute_order]}}
  - {type: RateLimiter, calls_per_window: 10, window_seconds: 60, action: wait, per_tool: true, scope: "scope:end_user"}
  - {type: ThrottleInterceptor, min_delay: 0.5}
  - {type: Failover, fallbacks: [backup], on: [rate_limit, context_length]}
  - {type: CircuitBreaker, failure_threshold: 5, reset_timeout: 30, tools: [database_query]}
  - {type: ContextPrompt, template: "User: {user_name}"}
  - {type: ConversationPrompt, stages: {0: "Be brief.", 8: "Wrap up."}}
  - {type: LambdaPrompt, adapter: "tests.unit.test_policy_config:bracket"}
  - {type: custom, entry_point: "tests.unit.test_policy_config:Shout", options: {suffix: "?"}}
  - {type: budget_guard, name: second-guard, model_calls: 3, on_error: continue}
"""


async def test_every_interceptor_type_builds_from_yaml(tmp_path: Path) -> None:
    from services.lib.agents import AgentDefinition
    from services.lib.policy.assembly import Shared, build_bundle
    from services.lib.policy.domain import Phase, Scope, ToolInfo
    from services.lib.policy.ratelimit import MemoryWindowStore

    write(tmp_path, "interceptors.yaml", EVERY_TYPE)
    config = load_config(tmp_path, 1)
    shared = Shared(MemoryWindowStore(), lambda address, timeout: None, None, {})  # type: ignore[arg-type,return-value]
    bundle = build_bundle(config, AgentDefinition(name="a"), "", shared)
    labels = [i.label for i in bundle.chain.interceptors]
    assert labels == [
        "BudgetGuard", "PIIShield", "ContentFilter", "TokenLimiter", "ContextCompressor", "ToolGate",
        "PermissionGate", "ConversationGate", "RateLimiter", "ThrottleInterceptor", "Failover", "CircuitBreaker",
        "ContextPrompt", "ConversationPrompt", "LambdaPrompt", "Shout", "second-guard",
    ]  # fmt: skip
    assert bundle.chain.interceptors[-1].fail == "continue"
    assert bundle.chain.phases() == set(Phase) - {Phase.POST_THINK, Phase.POST_RUN}
    # The Python entry points were resolved and run: the filter keeps the first tool, the adapters chain.
    ctx = TurnContext(Scope("a"), system_prompt="hi", tools=[ToolInfo("search"), ToolInfo("other")])
    outcome = await bundle.chain.run(Phase.PRE_RUN, ctx)
    assert outcome.tools == ["search"]
    assert outcome.prompt == "[HI\n\nUSER: {USER_NAME}]?"
    # YAML 1.1 would read the `on:` key as a boolean; the loader keeps it a key.
    failover = config.interceptors.interceptors[10]
    assert getattr(failover, "on", None) == ["rate_limit", "context_length"]
