"""Slash commands: parsing, built-ins, unknown commands, custom registration."""

from __future__ import annotations

import pytest

from services.lib.policy.commands import CommandContext, CommandResult, builtin_registry, parse, static_reply
from services.lib.policy.domain import Scope

CTX = CommandContext(Scope("default"), "", ("coach", "deposit_advisor"), "coach", "local")


@pytest.mark.parametrize(
    ("text", "name", "args"),
    [
        ("/help", "help", ""),
        ("  /role   deposit_advisor  ", "role", "deposit_advisor"),
        ("/MODEL sonnet", "model", "sonnet"),
        ("/?", "?", ""),
        ("/reset\n", "reset", ""),
    ],
)
def test_parse_commands(text: str, name: str, args: str) -> None:
    parsed = parse(text)
    assert parsed is not None and (parsed.name, parsed.args) == (name, args)


@pytest.mark.parametrize("text", ["hello", "/etc/passwd is a file", "/ leading space", "/123", "what is /help", ""])
def test_other_text_is_not_a_command(text: str) -> None:
    assert parse(text) is None


async def test_help_lists_every_command_with_aliases() -> None:
    registry = builtin_registry()
    result = await registry.dispatch("/help", CTX)
    assert result is not None and result.ok
    for line in ("/help", "/role [NAME]", "/model [NAME]", "/reset", "(also /h, /?)"):
        assert line in result.reply
    assert (await registry.dispatch("/h", CTX)) == result
    assert (await registry.dispatch("/?", CTX)) == result


async def test_role_sets_a_known_role_and_rejects_others() -> None:
    registry = builtin_registry()
    result = await registry.dispatch("/role deposit_advisor", CTX)
    assert result == CommandResult("Role set to deposit_advisor.", set_role="deposit_advisor")
    bad = await registry.dispatch("/role pirate", CTX)
    assert bad is not None and not bad.ok and bad.set_role is None
    assert "Unknown role 'pirate'" in bad.reply and "coach, deposit_advisor" in bad.reply
    show = await registry.dispatch("/role", CTX)
    assert show is not None and "Current role: coach" in show.reply


async def test_model_switches_and_validates_the_name() -> None:
    registry = builtin_registry()
    result = await registry.dispatch("/model claude-sonnet-4-20250514", CTX)
    assert result is not None and result.set_model == "claude-sonnet-4-20250514"
    bad = await registry.dispatch("/model two words", CTX)
    assert bad is not None and not bad.ok and bad.set_model is None
    show = await registry.dispatch("/model", CTX)
    assert show is not None and "Current model: local" in show.reply


async def test_reset_clears_history() -> None:
    registry = builtin_registry()
    assert await registry.dispatch("/reset", CTX) == CommandResult("Conversation history cleared.", reset=True)
    bad = await registry.dispatch("/reset now", CTX)
    assert bad is not None and not bad.ok and not bad.reset


async def test_unknown_command_answers_with_the_list() -> None:
    result = await builtin_registry().dispatch("/dance", CTX)
    assert result is not None and not result.ok
    assert result.reply == "Unknown command /dance. Available commands: /help, /model, /reset, /role"


async def test_custom_commands_and_duplicates() -> None:
    registry = builtin_registry()
    registry.register("about", static_reply("cogmesh"), aliases=["a"], description="about")

    async def echo(ctx: CommandContext) -> CommandResult:
        return CommandResult(ctx.args.upper())

    registry.register("echo", echo)
    assert (await registry.dispatch("/a", CTX)) == CommandResult("cogmesh")
    assert (await registry.dispatch("/echo hi there", CTX)) == CommandResult("HI THERE")
    assert "/about" in (await registry.dispatch("/nope", CTX) or CommandResult("")).reply
    with pytest.raises(ValueError, match="already registered"):
        registry.register("h", static_reply("x"))


async def test_not_a_command_returns_none() -> None:
    assert await builtin_registry().dispatch("hello /help", CTX) is None
