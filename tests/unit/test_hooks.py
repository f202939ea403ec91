"""Hooks: registries and their immutable merge, matchers, local hooks, fail-open/closed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from services.lib.policy.domain import Scope
from services.lib.policy.hooks import (
    Hook,
    HookEvent,
    HookPayload,
    HookRegistry,
    HookReply,
    LocalHook,
    run_post_tool_use,
    run_pre_tool_use,
    run_stop,
    run_user_prompt_submit,
)

SCOPE = Scope("default", "t", "s", "turn-1", "coach")


def payload(tool: str = "Bash", **fields: Any) -> HookPayload:
    return HookPayload(SCOPE, tool, fields.pop("tool_input", {"cmd": "ls"}), **fields)


async def block_bash(tool_name: str, tool_input: dict[str, Any], **kwargs: Any) -> dict[str, str] | None:
    if tool_name == "Bash":
        return {"decision": "deny", "reason": "Bash is not allowed"}
    return None


def test_registering_and_merging_never_change_a_registry() -> None:
    empty = HookRegistry()
    security = empty.on_pre_tool_use(LocalHook(block_bash), matcher="Bash")
    calls: list[str] = []

    def log_tool(tool_name: str, **kwargs: Any) -> None:
        calls.append(tool_name)

    role = HookRegistry().on_post_tool_use(LocalHook(log_tool)).on_stop(LocalHook(log_tool))
    combined = security.merge(role)
    assert (len(empty), len(security), len(role), len(combined)) == (0, 1, 2, 3)
    assert combined is not security and combined is not role
    assert [h.event for h in combined] == [HookEvent.PRE_TOOL_USE, HookEvent.POST_TOOL_USE, HookEvent.STOP]
    assert combined.events() == {HookEvent.PRE_TOOL_USE, HookEvent.POST_TOOL_USE, HookEvent.STOP}


@pytest.mark.parametrize(
    ("matcher", "tool", "matches"),
    [
        ("", "anything", True),
        ("*", "anything", True),
        ("Bash", "Bash", True),
        ("Bash", "BashX", False),  # the whole name must match
        ("Edit|Write", "Write", True),
        ("mcp__.*", "mcp__srv__tool", True),
        ("mcp__.*", "calculator", False),
    ],
)
def test_matchers_are_full_name_regular_expressions(matcher: str, tool: str, matches: bool) -> None:
    hook = Hook(HookEvent.PRE_TOOL_USE, LocalHook(block_bash), "h", matcher)
    assert hook.matches(tool) is matches


def test_only_tool_events_take_a_matcher() -> None:
    with pytest.raises(ValueError, match="take no matcher"):
        Hook(HookEvent.STOP, LocalHook(block_bash), "h", "Bash")


async def test_pre_tool_use_deny_names_the_hook_and_reason() -> None:
    registry = HookRegistry().on_pre_tool_use(LocalHook(block_bash, "sec:block_bash"), matcher="Bash")
    outcome = await run_pre_tool_use(registry, payload("Bash"))
    assert outcome.denied and outcome.rule == "hook_deny" and outcome.hook == "sec:block_bash"
    assert outcome.reason == "tool 'Bash' is denied by hook 'sec:block_bash': Bash is not allowed (hook_deny)"
    assert not (await run_pre_tool_use(registry, payload("calculator"))).denied  # matcher does not match


async def test_pre_tool_use_rewrites_chain_in_order() -> None:
    def add_limit(tool_input: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return {"updated_input": {**tool_input, "limit": 10}}

    async def check_limit(tool_input: dict[str, Any], **kwargs: Any) -> dict[str, Any] | None:
        assert tool_input["limit"] == 10  # sees the previous hook's rewrite
        return {"updated_input": {**tool_input, "safe": True}}

    registry = HookRegistry().on_pre_tool_use(LocalHook(add_limit)).on_pre_tool_use(LocalHook(check_limit))
    outcome = await run_pre_tool_use(registry, payload("search", tool_input={"q": "x"}))
    assert not outcome.denied and outcome.modified
    assert outcome.tool_input == {"q": "x", "limit": 10, "safe": True}
    assert [n.metadata["kind"] for n in outcome.notices] == ["hook_rewrote_input", "hook_rewrote_input"]


async def test_hooks_receive_the_scope() -> None:
    seen: dict[str, Any] = {}

    def record(**kwargs: Any) -> None:
        seen.update(kwargs)

    await run_pre_tool_use(HookRegistry().on_pre_tool_use(LocalHook(record)), payload("x", tool_call_id="c1"))
    assert seen["event"] == "PreToolUse" and seen["tool_call_id"] == "c1"
    assert (seen["session_id"], seen["turn_id"], seen["agent"], seen["role_id"]) == ("s", "turn-1", "default", "coach")


class Slow:
    __name__ = "slow"

    async def __call__(self, event: HookEvent, p: HookPayload) -> HookReply | None:
        await asyncio.sleep(5)
        return None


def raising(**kwargs: Any) -> None:
    raise RuntimeError("hook crashed")


def bad_reply(**kwargs: Any) -> str:
    return "yes"


def misspelt_deny(**kwargs: Any) -> dict[str, str]:
    return {"decision": "Deny", "reason": "a typo must not let the call through"}


@pytest.mark.parametrize(
    ("handler", "cause"),
    [
        (Slow(), "timed out after 50 ms"),
        (LocalHook(raising), "RuntimeError: hook crashed"),
        (LocalHook(bad_reply), "expected a dict"),
        (LocalHook(misspelt_deny), "unknown decision 'Deny'"),
    ],
)
async def test_pre_tool_use_failure_fail_closed_denies(handler: Any, cause: str) -> None:
    registry = HookRegistry().add(Hook(HookEvent.PRE_TOOL_USE, handler, "guard", timeout_s=0.05, fail="closed"))
    outcome = await run_pre_tool_use(registry, payload())
    assert outcome.denied and outcome.rule == "hook_failed"
    assert cause in outcome.reason
    notice = outcome.notices[0]
    assert notice.metadata["fail_mode"] == "closed" and "fail-closed: the call is denied" in notice.text


async def test_pre_tool_use_failure_fail_open_goes_ahead() -> None:
    registry = HookRegistry().add(Hook(HookEvent.PRE_TOOL_USE, Slow(), "slow", timeout_s=0.05, fail="open"))
    outcome = await run_pre_tool_use(registry, payload())
    assert not outcome.denied
    assert "timed out after 50 ms; fail-open: the call goes ahead" in outcome.notices[0].text


async def test_post_tool_use_replaces_and_fail_rules() -> None:
    def redact(result: str, **kwargs: Any) -> dict[str, str]:
        return {"result": result.replace("secret", "***")}

    registry = HookRegistry().on_post_tool_use(LocalHook(redact), matcher="lookup")
    outcome = await run_post_tool_use(registry, payload("lookup", result="the secret is 42"))
    assert outcome.modified and outcome.result == "the *** is 42"
    untouched = await run_post_tool_use(registry, payload("other", result="the secret is 42"))
    assert not untouched.modified and untouched.result == "the secret is 42"

    closed = HookRegistry().add(Hook(HookEvent.POST_TOOL_USE, LocalHook(raising), "audit", fail="closed"))
    withheld = await run_post_tool_use(closed, payload("lookup", result="data"))
    assert withheld.modified and "withheld" in withheld.result and "data" not in withheld.result
    opened = HookRegistry().add(Hook(HookEvent.POST_TOOL_USE, LocalHook(raising), "audit", fail="open"))
    kept = await run_post_tool_use(opened, payload("lookup", result="data"))
    assert kept.result == "data" and "fail-open: the result is kept" in kept.notices[0].text


async def test_user_prompt_submit_blocks() -> None:
    def no_secrets(prompt: str, **kwargs: Any) -> dict[str, str] | None:
        return {"decision": "block", "reason": "no secrets"} if "secret" in prompt else None

    registry = HookRegistry().on_user_prompt(LocalHook(no_secrets))
    blocked = await run_user_prompt_submit(registry, HookPayload(SCOPE, prompt="my secret"))
    assert blocked.blocked and "no secrets" in blocked.reason
    assert blocked.notices[-1].kind == "status"
    assert not (await run_user_prompt_submit(registry, HookPayload(SCOPE, prompt="hello"))).blocked
    closed = HookRegistry().add(Hook(HookEvent.USER_PROMPT_SUBMIT, Slow(), "slow", timeout_s=0.01))
    assert (await run_user_prompt_submit(closed, HookPayload(SCOPE, prompt="hi"))).blocked


async def test_stop_hooks_all_run_and_failures_are_reported() -> None:
    seen: list[str] = []

    async def on_stop(final_text: str, **kwargs: Any) -> None:
        seen.append(final_text)

    registry = HookRegistry().on_stop(LocalHook(on_stop)).on_stop(LocalHook(raising)).on_stop(LocalHook(on_stop))
    notices = await run_stop(registry, HookPayload(SCOPE, final_text="done"))
    assert seen == ["done", "done"]
    assert len(notices) == 1 and "hook crashed" in notices[0].text
