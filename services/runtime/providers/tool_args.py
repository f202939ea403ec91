"""Parsing a model's tool-call arguments, which arrive as JSON text in fragments."""

from __future__ import annotations

import json
from typing import Any

MAX_ARGUMENT_CHARS = 1_000_000


def parse_arguments(text: str) -> tuple[dict[str, Any], str]:
    """(arguments, "") for a JSON object; ({}, why) for anything else, said so the model can fix it."""
    if not text.strip():
        return {}, ""
    if len(text) > MAX_ARGUMENT_CHARS:
        return {}, f"the arguments are too large ({len(text)} characters, the limit is {MAX_ARGUMENT_CHARS})"
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return {}, f"the arguments are not valid JSON ({exc.msg} at character {exc.pos})"
    if not isinstance(value, dict):
        return {}, f"the arguments must be a JSON object, not {type(value).__name__}"
    return value, ""
