"""HITLInterceptor: a human approves a tool call before it runs (PRE_ACT).

The decision is "this call needs approval". The interceptor outcome model has no
action for that yet (OK, STOP, SKIP and the modifications), so the interceptor
answers with a SKIP whose step detail starts with APPROVAL_REQUIRED and a
native notice carrying kind="approval_required", the tool, its call id, its
arguments and the description a reviewer should read. A runtime that knows the
marker routes the call to its approval step (the one `interrupt_on` uses: an
approval_required event, then approve / edit / reject through ResolveApproval);
one that does not leaves the call unrun and tells the model why, so a call that
needs a human never runs without one.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence

from services.policy.domain import TurnContext
from services.policy.interceptors.base import Action, Interceptor, InterceptResult, Step

APPROVAL_REQUIRED = "approval_required"
DEFAULT_DESCRIPTION = "{tool} needs a human's approval before it runs"


def needs_approval(step: Step) -> bool:
    """Whether a PRE_ACT step is an approval request (the marker a runtime looks for)."""
    return step.detail.startswith(f"{APPROVAL_REQUIRED}:")


class HITLInterceptor(Interceptor):
    """Asks for approval of the calls to the tools matching `tools` (globs, "*" for all)
    and not matching `except_tools`; `description` ({tool} is replaced) says why."""

    def __init__(
        self,
        tools: Sequence[str] = ("*",),
        except_tools: Sequence[str] = (),
        description: str = DEFAULT_DESCRIPTION,
    ):
        self.tools = tuple(tools)
        self.except_tools = tuple(except_tools)
        self.description = description

    def applies_to(self, tool_name: str) -> bool:
        def match(patterns: Sequence[str]) -> bool:
            return any(p == "*" or fnmatch.fnmatchcase(tool_name, p) for p in patterns)

        return match(self.tools) and not match(self.except_tools)

    async def pre_act(self, ctx: TurnContext) -> InterceptResult:
        if not self.applies_to(ctx.tool_name):
            return InterceptResult.ok()
        description = self.description.replace("{tool}", ctx.tool_name)
        ctx.notify(
            description,
            interceptor=self.label,
            kind=APPROVAL_REQUIRED,
            tool_name=ctx.tool_name,
            tool_call_id=ctx.tool_call_id,
            arguments=dict(ctx.tool_args),
        )
        reason = f"{description}; no approval was given"
        return InterceptResult(Action.SKIP, reason=reason, detail=f"{APPROVAL_REQUIRED}: {ctx.tool_name}")
