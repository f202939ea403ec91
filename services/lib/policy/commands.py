"""Slash commands, answered before the model sees the message.

A message is a command when it starts with "/" and a command-like word followed
by whitespace or the end ("/etc/passwd is..." is not a command). Built-ins:
/help (/h, /?), /role NAME, /model NAME, /reset. Unknown commands answer with
the list of commands.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from services.lib.policy.domain import Scope

_COMMAND = re.compile(r"^\s*/(?P<name>[A-Za-z][\w-]*|\?)(?:\s+(?P<args>.*))?\s*$", re.DOTALL)
_NAME = re.compile(r"^[\w.:/@+-]{1,128}$")


@dataclass(frozen=True)
class CommandContext:
    scope: Scope
    args: str
    roles: Sequence[str]  # roles the agent's router knows
    current_role: str
    model: str
    commands: Sequence[Command] = ()


@dataclass(frozen=True)
class CommandResult:
    reply: str
    ok: bool = True
    set_role: str | None = None
    skill_ids: tuple[str, ...] = ()
    set_model: str | None = None
    reset: bool = False


Handler = Callable[[CommandContext], CommandResult | Awaitable[CommandResult]]


@dataclass(frozen=True)
class Command:
    name: str
    handler: Handler
    description: str = ""
    aliases: tuple[str, ...] = ()
    usage: str = ""


@dataclass(frozen=True)
class ParsedCommand:
    name: str
    args: str


def parse(text: str) -> ParsedCommand | None:
    match = _COMMAND.match(text)
    if match is None:
        return None
    return ParsedCommand(match.group("name").lower(), (match.group("args") or "").strip())


@dataclass
class CommandRegistry:
    commands: dict[str, Command] = field(default_factory=dict)
    _aliases: dict[str, str] = field(default_factory=dict)

    def register(
        self, name: str, handler: Handler, aliases: Sequence[str] = (), description: str = "", usage: str = ""
    ) -> None:
        name = name.lower()
        for key in (name, *aliases):
            if key.lower() in self._aliases:
                raise ValueError(f"command /{key} is already registered")
        self.commands[name] = Command(name, handler, description, tuple(a.lower() for a in aliases), usage)
        for key in (name, *aliases):
            self._aliases[key.lower()] = name

    def get(self, name: str) -> Command | None:
        target = self._aliases.get(name.lower())
        return None if target is None else self.commands[target]

    def listing(self) -> str:
        return ", ".join(f"/{name}" for name in sorted(self.commands))

    async def dispatch(self, text: str, ctx: CommandContext) -> CommandResult | None:
        """The command's answer, or None when `text` is not a command (it goes to the model)."""
        parsed = parse(text)
        if parsed is None:
            return None
        command = self.get(parsed.name)
        if command is None:
            return CommandResult(f"Unknown command /{parsed.name}. Available commands: {self.listing()}", ok=False)
        full = CommandContext(
            ctx.scope, parsed.args, ctx.roles, ctx.current_role, ctx.model, tuple(self.commands.values())
        )
        result = command.handler(full)
        if inspect.isawaitable(result):
            result = await result
        return result


# --------------------------------------------------------------------------- built-ins


def _help(ctx: CommandContext) -> CommandResult:
    lines = ["Commands:"]
    for command in sorted(ctx.commands, key=lambda c: c.name):
        usage = f"/{command.name}" + (f" {command.usage}" if command.usage else "")
        aliases = f" (also {', '.join('/' + a for a in command.aliases)})" if command.aliases else ""
        lines.append(f"  {usage} - {command.description}{aliases}")
    return CommandResult("\n".join(lines))


def _role(ctx: CommandContext) -> CommandResult:
    known = ", ".join(ctx.roles) or "(none configured)"
    if not ctx.args:
        return CommandResult(f"Current role: {ctx.current_role or '(default)'}. Available roles: {known}")
    name = ctx.args
    if name not in ctx.roles:
        return CommandResult(f"Unknown role {name!r}. Available roles: {known}", ok=False)
    return CommandResult(f"Role set to {name}.", set_role=name)


def _model(ctx: CommandContext) -> CommandResult:
    if not ctx.args:
        return CommandResult(f"Current model: {ctx.model or '(agent default)'}. Use /model NAME to switch.")
    if not _NAME.match(ctx.args):
        return CommandResult(
            f"Invalid model name {ctx.args!r}: use one word of letters, digits and . _ - : / @ +", ok=False
        )
    return CommandResult(f"Model set to {ctx.args}.", set_model=ctx.args)


def _reset(ctx: CommandContext) -> CommandResult:
    if ctx.args:
        return CommandResult("/reset takes no arguments.", ok=False)
    return CommandResult("Conversation history cleared.", reset=True)


def builtin_registry() -> CommandRegistry:
    registry = CommandRegistry()
    registry.register("help", _help, aliases=("h", "?"), description="list the commands")
    registry.register("role", _role, description="show or pin the agent's role", usage="[NAME]")
    registry.register("model", _model, description="show or switch the session's model", usage="[NAME]")
    registry.register("reset", _reset, description="clear the conversation history")
    return registry


def static_reply(text: str) -> Handler:
    """A configured command that answers with fixed text."""

    def handler(ctx: CommandContext) -> CommandResult:
        return CommandResult(text)

    return handler
