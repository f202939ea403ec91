"""Tools built into the runtime: no server, no network."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from services.lib.llm import ToolSchema
from services.runtime.calculator import CALCULATOR_SCHEMA, calculator_tool
from services.runtime.tools.base import Tool, ToolError, answered_outside, builtin

CURRENT_TIME_SCHEMA = ToolSchema(
    name="current_time",
    description="The current date and time in UTC, in ISO 8601 format.",
    parameters={"type": "object", "properties": {}, "additionalProperties": False},
)


async def current_time_tool(arguments: Mapping[str, Any]) -> str:
    if arguments:
        raise ToolError(f"current_time takes no arguments, got {', '.join(map(repr, sorted(arguments)))}")
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


# Calling it pauses the turn with a user_input_requested event; the user's answer is its result.
ASK_USER_SCHEMA = ToolSchema(
    name="ask_user",
    description=(
        "Ask the user a question and wait for the answer. Use it when you cannot go on without "
        "information only the user has."
    ),
    parameters={
        "type": "object",
        "properties": {"prompt": {"type": "string", "minLength": 1, "description": "The question to ask."}},
        "required": ["prompt"],
        "additionalProperties": False,
    },
)


def builtin_tools() -> dict[str, Tool]:
    return {
        CALCULATOR_SCHEMA.name: builtin(CALCULATOR_SCHEMA, calculator_tool),
        CURRENT_TIME_SCHEMA.name: builtin(CURRENT_TIME_SCHEMA, current_time_tool),
        ASK_USER_SCHEMA.name: answered_outside(ASK_USER_SCHEMA, "ask_user", "builtin", policy_checked=True),
    }
