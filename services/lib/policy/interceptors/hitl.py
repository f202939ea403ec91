"""HITLInterceptor: a human approves a tool call before it runs (PRE_ACT).

Its answer is REQUIRE_APPROVAL: the policy allows the call on condition of a human's
yes, and the runtime pauses the turn exactly as for an agent's `interrupt_on` (an
approval_required event carrying `description`, then approve / edit / reject through
ResolveApproval or AnswerInterrupt). A reviewer's rejection, or any answer that is not
an approval, means the call does not run.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence

from services.lib.policy.domain import TurnContext
from services.lib.policy.interceptors.base import Action, Interceptor, InterceptResult, Step

DEFAULT_DESCRIPTION = "{tool} needs a human's approval before it runs"


def needs_approval(step: Step) -> bool:
    """Whether a PRE_ACT step is an approval request."""
    return step.action is Action.REQUIRE_APPROVAL


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
        return InterceptResult.require_approval(self.description.replace("{tool}", ctx.tool_name))
