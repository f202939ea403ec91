"""SafeGate and RoleGate: the two gates the interceptor seed builds on ToolGate and
PermissionGate, as built-ins configurable from YAML.

SafeGate offers only the tools named safe (read-only by default); RoleGate gives
the caller's role its tool list, every tool to admin roles. The caller's role comes
from the session's scope (set at CreateSession, and pinned by an API key that must not
choose its own role), else from the turn's run context (set by the application with
each message); never from the model, nor from the agent role the router picked:
PermissionGate's `by_role` covers that one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from services.lib.policy.domain import ToolInfo, TurnContext
from services.lib.policy.interceptors.gates import PermissionGate, ToolGate, _matches

# The seed's example of tools that only read: what SafeGate keeps when not told otherwise.
DEFAULT_SAFE_TOOLS: tuple[str, ...] = ("search", "read_file")


class SafeGate(ToolGate):
    """Keeps only the safe tools (names or globs); hides the rest and skips calls to them."""

    def __init__(self, tools: Sequence[str] = DEFAULT_SAFE_TOOLS):
        self.tools = tuple(tools)

    async def filter(self, tools: list[ToolInfo], ctx: TurnContext) -> list[ToolInfo]:
        return [t for t in tools if _matches(t.name, self.tools)]


class RoleGate(PermissionGate):
    """The caller's role (scope[`role_key`], else run_context[`role_key`]) picks the allowlist:
    an admin role gets every tool, a role in `by_role` its own list, any other role (or none) `tools`."""

    def __init__(
        self,
        tools: Sequence[str] = DEFAULT_SAFE_TOOLS,
        admin_roles: Sequence[str] = ("admin",),
        by_role: Mapping[str, Sequence[str]] | None = None,
        role_key: str = "role",
    ):
        super().__init__(tools, by_role)
        self.admin_roles = frozenset(admin_roles)
        self.role_key = role_key

    def role(self, ctx: TurnContext) -> str:
        # The scope wins: a per-message run context cannot claim more than the session was given.
        if self.role_key in ctx.scope.session_scope:
            return ctx.scope.session_scope[self.role_key]
        value = ctx.run_context.get(self.role_key)
        return value if isinstance(value, str) else ""

    def allowed_tools(self, ctx: TurnContext) -> Sequence[str]:
        role = self.role(ctx)
        if role in self.admin_roles:
            return ("*",)
        return self.by_role.get(role, self.tools)
