"""Hooks: user code at four lifecycle points of a turn.

PreToolUse may deny a tool call or rewrite its input, PostToolUse may replace a
result, UserPromptSubmit may refuse a user message, Stop learns that a turn ended.
PreToolUse and PostToolUse hooks take a tool-name matcher (a regular expression
matched against the whole name; empty or "*" matches every tool).

A hook is a local Python function or a remote HookService; either way it has a
timeout and a fail rule. A hook that fails or times out is skipped under
fail "open" and counts against the call under fail "closed" (a PreToolUse denial,
a withheld result, a refused message); both leave a notice for the event stream.

Registries are immutable: registering or merging returns a new registry, so the
global, per-agent and per-role registries combine without changing each other.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from services.kit.logging import log
from services.lib.policy.domain import Notice, Scope

FailMode = Literal["open", "closed"]


class HookEvent(enum.Enum):
    PRE_TOOL_USE = "PreToolUse"
    POST_TOOL_USE = "PostToolUse"
    STOP = "Stop"
    USER_PROMPT_SUBMIT = "UserPromptSubmit"


TOOL_EVENTS = frozenset({HookEvent.PRE_TOOL_USE, HookEvent.POST_TOOL_USE})


@dataclass(frozen=True, slots=True)
class HookPayload:
    scope: Scope
    tool_name: str = ""
    tool_input: Mapping[str, Any] = field(default_factory=dict)
    tool_call_id: str = ""
    result: str = ""
    is_error: bool = False
    prompt: str = ""
    final_text: str = ""


@dataclass(frozen=True, slots=True)
class HookReply:
    """A hook's answer, whatever its transport."""

    deny: bool = False  # PreToolUse: deny; UserPromptSubmit: refuse the message
    reason: str = ""
    updated_input: Mapping[str, Any] | None = None  # PreToolUse
    updated_result: str | None = None  # PostToolUse


class HookError(Exception):
    """A hook could not answer (unreachable, crashed, bad reply); the fail rule applies."""


class HookHandler(Protocol):
    async def __call__(self, event: HookEvent, payload: HookPayload) -> HookReply | None: ...


@dataclass(frozen=True)
class Hook:
    event: HookEvent
    handler: HookHandler
    name: str
    matcher: str = ""
    timeout_s: float = 1.0
    fail: FailMode = "closed"
    _regex: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.matcher and self.event not in TOOL_EVENTS:
            raise ValueError(f"{self.event.value} hooks take no matcher")
        if self.matcher and self.matcher != "*":
            object.__setattr__(self, "_regex", re.compile(self.matcher))

    def matches(self, tool_name: str) -> bool:
        return self._regex is None or self._regex.fullmatch(tool_name) is not None


class HookRegistry:
    """An immutable, ordered collection of hooks."""

    def __init__(self, hooks: Iterable[Hook] = ()):
        self._hooks: tuple[Hook, ...] = tuple(hooks)

    def __len__(self) -> int:
        return len(self._hooks)

    def __iter__(self) -> Any:
        return iter(self._hooks)

    def add(self, hook: Hook) -> HookRegistry:
        return HookRegistry((*self._hooks, hook))

    def on_pre_tool_use(self, handler: HookHandler, matcher: str = "", **options: Any) -> HookRegistry:
        return self.add(Hook(HookEvent.PRE_TOOL_USE, handler, _name(handler, options), matcher, **options))

    def on_post_tool_use(self, handler: HookHandler, matcher: str = "", **options: Any) -> HookRegistry:
        return self.add(Hook(HookEvent.POST_TOOL_USE, handler, _name(handler, options), matcher, **options))

    def on_stop(self, handler: HookHandler, **options: Any) -> HookRegistry:
        return self.add(Hook(HookEvent.STOP, handler, _name(handler, options), **options))

    def on_user_prompt(self, handler: HookHandler, **options: Any) -> HookRegistry:
        return self.add(Hook(HookEvent.USER_PROMPT_SUBMIT, handler, _name(handler, options), **options))

    def merge(self, other: HookRegistry) -> HookRegistry:
        """A new registry: this one's hooks, then the other's; neither changes."""
        return HookRegistry((*self._hooks, *other._hooks))

    def hooks(self, event: HookEvent, tool_name: str | None = None) -> list[Hook]:
        return [h for h in self._hooks if h.event is event and (tool_name is None or h.matches(tool_name))]

    def events(self) -> set[HookEvent]:
        return {h.event for h in self._hooks}


def _name(handler: HookHandler, options: dict[str, Any]) -> str:
    name: str = options.pop("name", "") or getattr(handler, "__name__", "") or type(handler).__name__
    return name


# --------------------------------------------------------------------------- local hooks


class LocalHook:
    """A Python function `fn(**kwargs) -> dict | None`, sync or async, as a hook handler.

    It receives event, tool_name, tool_input, tool_call_id, result, is_error, prompt,
    final_text and the scope fields. It answers None to let things be, or a dict:
    {"decision": "deny", "reason": ...} (PreToolUse) / {"decision": "block", "reason": ...}
    (UserPromptSubmit), {"updated_input": {...}} (PreToolUse), {"result": "..."} (PostToolUse).
    """

    def __init__(self, fn: Callable[..., Any], entry_point: str = ""):
        self.fn = fn
        self.__name__ = entry_point or getattr(fn, "__name__", "local_hook")

    async def __call__(self, event: HookEvent, payload: HookPayload) -> HookReply | None:
        s = payload.scope
        answer = self.fn(
            event=event.value,
            tool_name=payload.tool_name,
            tool_input=dict(payload.tool_input),
            tool_call_id=payload.tool_call_id,
            result=payload.result,
            is_error=payload.is_error,
            prompt=payload.prompt,
            final_text=payload.final_text,
            tenant_id=s.tenant_id,
            session_id=s.session_id,
            turn_id=s.turn_id,
            agent=s.agent,
            role_id=s.role_id,
        )
        if inspect.isawaitable(answer):
            answer = await answer
        return parse_reply(event, answer)


KNOWN_DECISIONS = frozenset({None, "allow", "deny", "block"})


def parse_reply(event: HookEvent, answer: Any) -> HookReply | None:
    if answer is None:
        return None
    if not isinstance(answer, Mapping):
        raise HookError(f"hook returned {type(answer).__name__}; expected a dict or None")
    decision = answer.get("decision")
    if decision not in KNOWN_DECISIONS:
        # A typo such as "Deny" must not read as "let it through": the hook failed (its fail mode decides).
        raise HookError(f"unknown decision {decision!r}; expected one of {sorted(d for d in KNOWN_DECISIONS if d)}")
    reason = str(answer.get("reason", ""))
    if event is HookEvent.PRE_TOOL_USE:
        if decision in ("deny", "block"):
            return HookReply(deny=True, reason=reason)
        updated = answer.get("updated_input")
        if updated is not None and not isinstance(updated, Mapping):
            raise HookError("updated_input must be a dict")
        return HookReply(updated_input=updated)
    if event is HookEvent.POST_TOOL_USE:
        result = answer.get("result", answer.get("updated_result"))
        return HookReply(updated_result=None if result is None else str(result))
    if event is HookEvent.USER_PROMPT_SUBMIT:
        return HookReply(deny=decision in ("deny", "block"), reason=reason)
    return None


# --------------------------------------------------------------------------- running hooks


@dataclass
class PreToolOutcome:
    tool_input: dict[str, Any]
    denied: bool = False
    reason: str = ""
    rule: str = ""  # "hook_deny" or "hook_failed"
    hook: str = ""
    modified: bool = False
    notices: list[Notice] = field(default_factory=list)


@dataclass
class PostToolOutcome:
    result: str
    modified: bool = False
    notices: list[Notice] = field(default_factory=list)


@dataclass
class PromptOutcome:
    blocked: bool = False
    reason: str = ""
    notices: list[Notice] = field(default_factory=list)


async def _call(hook: Hook, payload: HookPayload) -> HookReply | None:
    """The hook's reply; raises HookError with a readable cause when it cannot answer."""
    call: Awaitable[HookReply | None] = hook.handler(hook.event, payload)
    try:
        return await asyncio.wait_for(call, hook.timeout_s)
    except TimeoutError:
        raise HookError(f"timed out after {hook.timeout_s * 1000:.0f} ms") from None
    except HookError:
        raise
    except Exception as exc:
        raise HookError(f"{type(exc).__name__}: {exc}") from exc


def _failure(hook: Hook, error: HookError, consequence: str) -> Notice:
    log.warning("hook failed", hook=hook.name, hook_event=hook.event.value, fail_mode=hook.fail, error=str(error))
    return Notice(
        "notice",
        f"hook {hook.name!r} ({hook.event.value}) failed: {error}; fail-{hook.fail}: {consequence}",
        {
            "kind": "hook_failed",
            "hook": hook.name,
            "event": hook.event.value,
            "fail_mode": hook.fail,
            "error": str(error),
        },
    )


async def run_pre_tool_use(registry: HookRegistry, payload: HookPayload) -> PreToolOutcome:
    """Hooks run in order, each seeing the input the previous ones produced; the first denial ends it."""
    outcome = PreToolOutcome(tool_input=dict(payload.tool_input))
    for hook in registry.hooks(HookEvent.PRE_TOOL_USE, payload.tool_name):
        current = HookPayload(payload.scope, payload.tool_name, outcome.tool_input, payload.tool_call_id)
        try:
            reply = await _call(hook, current)
        except HookError as exc:
            if hook.fail == "open":
                outcome.notices.append(_failure(hook, exc, "the call goes ahead"))
                continue
            outcome.notices.append(_failure(hook, exc, "the call is denied"))
            outcome.denied, outcome.rule, outcome.hook = True, "hook_failed", hook.name
            outcome.reason = f"tool {payload.tool_name!r} is denied: hook {hook.name!r} failed ({exc}) (hook_failed)"
            return outcome
        if reply is None:
            continue
        if reply.deny:
            outcome.denied, outcome.rule, outcome.hook = True, "hook_deny", hook.name
            why = reply.reason or "no reason given"
            outcome.reason = f"tool {payload.tool_name!r} is denied by hook {hook.name!r}: {why} (hook_deny)"
            return outcome
        if reply.updated_input is not None and dict(reply.updated_input) != outcome.tool_input:
            outcome.tool_input = dict(reply.updated_input)
            outcome.modified = True
            outcome.notices.append(
                Notice(
                    "notice",
                    f"hook {hook.name!r} rewrote the input of tool {payload.tool_name!r}",
                    {"kind": "hook_rewrote_input", "hook": hook.name, "tool_name": payload.tool_name},
                )
            )
    return outcome


async def run_post_tool_use(registry: HookRegistry, payload: HookPayload) -> PostToolOutcome:
    outcome = PostToolOutcome(result=payload.result)
    for hook in registry.hooks(HookEvent.POST_TOOL_USE, payload.tool_name):
        current = HookPayload(
            payload.scope, payload.tool_name, payload.tool_input, payload.tool_call_id, outcome.result, payload.is_error
        )
        try:
            reply = await _call(hook, current)
        except HookError as exc:
            if hook.fail == "open":
                outcome.notices.append(_failure(hook, exc, "the result is kept"))
                continue
            outcome.notices.append(_failure(hook, exc, "the result is withheld"))
            outcome.result = f"error: the result of tool {payload.tool_name!r} was withheld: hook {hook.name!r} failed"
            outcome.modified = True
            return outcome
        if reply is not None and reply.updated_result is not None and reply.updated_result != outcome.result:
            outcome.result = reply.updated_result
            outcome.modified = True
            outcome.notices.append(
                Notice(
                    "notice",
                    f"hook {hook.name!r} replaced the result of tool {payload.tool_name!r}",
                    {"kind": "hook_replaced_result", "hook": hook.name, "tool_name": payload.tool_name},
                )
            )
    return outcome


async def run_user_prompt_submit(registry: HookRegistry, payload: HookPayload) -> PromptOutcome:
    outcome = PromptOutcome()
    for hook in registry.hooks(HookEvent.USER_PROMPT_SUBMIT):
        try:
            reply = await _call(hook, payload)
        except HookError as exc:
            if hook.fail == "open":
                outcome.notices.append(_failure(hook, exc, "the message goes ahead"))
                continue
            outcome.notices.append(_failure(hook, exc, "the message is refused"))
            outcome.blocked = True
            outcome.reason = f"the message was refused: hook {hook.name!r} failed ({exc})"
            break
        if reply is not None and reply.deny:
            outcome.blocked = True
            outcome.reason = f"the message was refused by hook {hook.name!r}: {reply.reason or 'no reason given'}"
            break
    if outcome.blocked:
        outcome.notices.append(Notice("status", outcome.reason, {"kind": "prompt_blocked"}))
    return outcome


async def run_stop(registry: HookRegistry, payload: HookPayload) -> list[Notice]:
    notices: list[Notice] = []
    for hook in registry.hooks(HookEvent.STOP):
        try:
            await _call(hook, payload)
        except HookError as exc:
            # Nothing left to deny when the turn has ended: either rule only reports.
            notices.append(_failure(hook, exc, "nothing to undo, the turn has ended"))
    return notices
