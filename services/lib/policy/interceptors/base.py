"""The interceptor model: phases, results, the base class and the chain that runs them.

An interceptor overrides the phase methods it cares about; the others pass
through. A chain runs its interceptors in order, each seeing what the ones
before it changed; a STOP or a SKIP ends the chain.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from services.kit.logging import log
from services.lib.policy.domain import Msg, Phase, TurnContext

ErrorKind = Literal["budget_exceeded", "rate_limited", "guardrail", "internal"]


class Action(enum.Enum):
    OK = "ok"
    STOP = "stop"
    SKIP = "skip"
    MODIFY_MESSAGES = "modify_messages"
    MODIFY_ARGS = "modify_args"
    MODIFY_TOOLS = "modify_tools"
    USE_MODEL = "use_model"
    MODIFY_PROMPT = "modify_prompt"
    MODIFY_TOOL_RESULT = "modify_tool_result"
    REQUIRE_APPROVAL = "require_approval"


# What each phase may ask for; anything else is a bug in the interceptor and is ignored.
ALLOWED_ACTIONS: dict[Phase, frozenset[Action]] = {
    Phase.PRE_RUN: frozenset(
        {Action.OK, Action.STOP, Action.MODIFY_MESSAGES, Action.MODIFY_TOOLS, Action.USE_MODEL, Action.MODIFY_PROMPT}
    ),
    Phase.PRE_THINK: frozenset(
        {Action.OK, Action.STOP, Action.MODIFY_MESSAGES, Action.MODIFY_TOOLS, Action.USE_MODEL, Action.MODIFY_PROMPT}
    ),
    Phase.POST_THINK: frozenset({Action.OK, Action.STOP}),
    Phase.PRE_ACT: frozenset({Action.OK, Action.STOP, Action.SKIP, Action.MODIFY_ARGS, Action.REQUIRE_APPROVAL}),
    Phase.POST_ACT: frozenset({Action.OK, Action.STOP, Action.MODIFY_TOOL_RESULT}),
    Phase.POST_RUN: frozenset({Action.OK}),
    Phase.ON_ERROR: frozenset({Action.OK, Action.STOP, Action.USE_MODEL}),
}


@dataclass(frozen=True, slots=True)
class InterceptResult:
    """What one interceptor asks for; build it with the class-method factories."""

    action: Action = Action.OK
    messages: tuple[Msg, ...] = ()
    tools: tuple[str, ...] = ()
    args: Mapping[str, Any] | None = None
    model: str = ""
    prompt: str = ""
    tool_result: str = ""
    reason: str = ""
    # STOP only: None ends the turn with `reason` as its answer, a kind ends it with an error.
    error_kind: ErrorKind | None = None
    # Seconds the runtime must wait before going on (a reserved rate-limit slot).
    wait_s: float = 0.0
    detail: str = ""

    @classmethod
    def ok(cls, *, wait_s: float = 0.0, detail: str = "") -> InterceptResult:
        return cls(wait_s=wait_s, detail=detail)

    @classmethod
    def stop(cls, reason: str, error_kind: ErrorKind | None = None) -> InterceptResult:
        return cls(Action.STOP, reason=reason, error_kind=error_kind, detail=reason)

    @classmethod
    def skip(cls, reason: str) -> InterceptResult:
        return cls(Action.SKIP, reason=reason, detail=reason)

    @classmethod
    def require_approval(cls, reason: str) -> InterceptResult:
        """PRE_ACT: the call runs only once a human approves it; `reason` is what the reviewer reads."""
        return cls(Action.REQUIRE_APPROVAL, reason=reason, detail=reason)

    @classmethod
    def modify_messages(cls, messages: Sequence[Msg], detail: str = "") -> InterceptResult:
        return cls(Action.MODIFY_MESSAGES, messages=tuple(messages), detail=detail)

    @classmethod
    def modify_args(cls, args: Mapping[str, Any], detail: str = "") -> InterceptResult:
        return cls(Action.MODIFY_ARGS, args=dict(args), detail=detail)

    @classmethod
    def modify_tools(cls, tool_names: Sequence[str], detail: str = "") -> InterceptResult:
        return cls(Action.MODIFY_TOOLS, tools=tuple(tool_names), detail=detail)

    @classmethod
    def use_model(cls, model: str, detail: str = "") -> InterceptResult:
        return cls(Action.USE_MODEL, model=model, detail=detail)

    @classmethod
    def modify_prompt(cls, prompt: str, detail: str = "") -> InterceptResult:
        return cls(Action.MODIFY_PROMPT, prompt=prompt, detail=detail)

    @classmethod
    def modify_tool_result(cls, result: str, detail: str = "") -> InterceptResult:
        return cls(Action.MODIFY_TOOL_RESULT, tool_result=result, detail=detail)


Handler = Callable[[TurnContext], Awaitable[InterceptResult]]

_METHOD = {
    Phase.PRE_RUN: "pre_run",
    Phase.PRE_THINK: "pre_think",
    Phase.POST_THINK: "post_think",
    Phase.PRE_ACT: "pre_act",
    Phase.POST_ACT: "post_act",
    Phase.POST_RUN: "post_run",
    Phase.ON_ERROR: "on_error",
}


class Interceptor:
    """Base class: override the phase methods you need; the others pass through.

    `on_error` of the config says what a raising interceptor does: "stop" ends the
    turn (a broken guard must not wave calls through), "continue" skips it.
    """

    name: str = ""
    fail: Literal["stop", "continue"] = "stop"

    async def pre_run(self, ctx: TurnContext) -> InterceptResult:
        return InterceptResult.ok()

    async def pre_think(self, ctx: TurnContext) -> InterceptResult:
        return InterceptResult.ok()

    async def post_think(self, ctx: TurnContext) -> InterceptResult:
        return InterceptResult.ok()

    async def pre_act(self, ctx: TurnContext) -> InterceptResult:
        return InterceptResult.ok()

    async def post_act(self, ctx: TurnContext) -> InterceptResult:
        return InterceptResult.ok()

    async def post_run(self, ctx: TurnContext) -> InterceptResult:
        return InterceptResult.ok()

    async def on_error(self, ctx: TurnContext) -> InterceptResult:
        return InterceptResult.ok()

    @property
    def label(self) -> str:
        return self.name or type(self).__name__

    def handler(self, phase: Phase) -> Handler | None:
        """The bound phase method when this class overrides it, else None (nothing to run)."""
        method = _METHOD[phase]
        if getattr(type(self), method) is getattr(Interceptor, method):
            return None
        handler: Handler = getattr(self, method)
        return handler


@dataclass(frozen=True, slots=True)
class Step:
    interceptor: str
    action: Action
    detail: str


@dataclass
class PhaseOutcome:
    """The merged result of one phase's chain, read off the context it mutated."""

    action: Action = Action.OK  # OK, STOP, SKIP or REQUIRE_APPROVAL
    steps: list[Step] = field(default_factory=list)
    messages: list[Msg] | None = None
    tools: list[str] | None = None
    model: str | None = None
    prompt: str | None = None
    args: dict[str, Any] | None = None
    tool_result: str | None = None
    reason: str = ""
    error_kind: ErrorKind | None = None
    wait_s: float = 0.0
    state_changed: bool = False
    # The acting interceptor of a STOP or SKIP.
    decided_by: str = ""


class Chain:
    """Interceptors of one agent and role, in configured order."""

    def __init__(self, interceptors: Sequence[Interceptor]):
        self.interceptors = tuple(interceptors)
        # Per phase, only the interceptors that override it: a phase nobody handles costs nothing.
        self._handlers: dict[Phase, list[tuple[Interceptor, Handler]]] = {}
        for phase in Phase:
            pairs = [(i, h) for i in self.interceptors if (h := i.handler(phase)) is not None]
            self._handlers[phase] = pairs

    def phases(self) -> set[Phase]:
        return {phase for phase, handlers in self._handlers.items() if handlers}

    async def run(self, phase: Phase, ctx: TurnContext) -> PhaseOutcome:
        outcome = PhaseOutcome()
        state_before = _snapshot(ctx.state)
        allowed = ALLOWED_ACTIONS[phase]
        for interceptor, handler in self._handlers[phase]:
            try:
                result = await handler(ctx)
            except Exception as exc:  # noqa: BLE001 - one interceptor's bug must not crash the service
                log.error("interceptor failed", interceptor=interceptor.label, phase=phase.value, exc_info=exc)
                text = f"interceptor {interceptor.label} failed at {phase.value}: {type(exc).__name__}: {exc}"
                if interceptor.fail == "continue":
                    ctx.notify(f"{text}; continuing", interceptor=interceptor.label, phase=phase.value)
                    continue
                result = InterceptResult.stop(text, "internal")
            if result.action not in allowed:
                log.warning("interceptor action not allowed", interceptor=interceptor.label, action=result.action.value)
                ctx.notify(
                    f"interceptor {interceptor.label}: action {result.action.value} is not allowed at "
                    f"{phase.value}; ignored",
                    interceptor=interceptor.label,
                    phase=phase.value,
                )
                continue
            outcome.wait_s = max(outcome.wait_s, result.wait_s)
            if result.action is not Action.OK:
                outcome.steps.append(Step(interceptor.label, result.action, result.detail))
            _apply(result, ctx, outcome)
            if result.action in (Action.STOP, Action.SKIP, Action.REQUIRE_APPROVAL):
                outcome.action = result.action
                outcome.reason = result.reason
                outcome.error_kind = result.error_kind
                outcome.decided_by = interceptor.label
                break
        outcome.state_changed = _snapshot(ctx.state) != state_before
        return outcome


def _apply(result: InterceptResult, ctx: TurnContext, outcome: PhaseOutcome) -> None:
    """Make the change visible to later interceptors and record it in the outcome."""
    match result.action:
        case Action.MODIFY_MESSAGES:
            ctx.messages = list(result.messages)
            outcome.messages = ctx.messages
        case Action.MODIFY_TOOLS:
            # Narrowing only: an interceptor can hide tools, not invent them.
            keep = set(result.tools)
            ctx.tools = [t for t in ctx.tools if t.name in keep]
            outcome.tools = [t.name for t in ctx.tools]
        case Action.MODIFY_ARGS:
            ctx.tool_args = dict(result.args or {})
            outcome.args = ctx.tool_args
        case Action.USE_MODEL:
            ctx.model = result.model
            outcome.model = result.model
        case Action.MODIFY_PROMPT:
            ctx.system_prompt = result.prompt
            outcome.prompt = result.prompt
        case Action.MODIFY_TOOL_RESULT:
            ctx.tool_result = result.tool_result
            outcome.tool_result = result.tool_result
        case _:
            pass


def _snapshot(state: Mapping[str, Any]) -> Any:
    # State values are JSON-like and small; repr is a cheap deep comparison.
    return repr(sorted(state.items())) if state else ""
