"""Parsing a model's tool-call arguments, which arrive as JSON text in fragments."""

from __future__ import annotations

import json
from typing import Any

from services.kit.limits import MAX_ARGUMENT_DEPTH, depth_problem, json_text_depth

MAX_ARGUMENT_CHARS = 1_000_000


def parse_arguments(text: str) -> tuple[dict[str, Any], str]:
    """(arguments, "") for a JSON object; ({}, why) for anything else, said so the model can fix it.

    Arguments nested deeper than MAX_ARGUMENT_DEPTH are refused before they are parsed:
    they could not travel in the suite's messages, and `json` cannot parse ~1,000 levels.
    """
    if not text.strip():
        return {}, ""
    if len(text) > MAX_ARGUMENT_CHARS:
        return {}, f"the arguments are too large ({len(text)} characters, the limit is {MAX_ARGUMENT_CHARS})"
    depth = json_text_depth(text)
    if depth > MAX_ARGUMENT_DEPTH:
        return {}, depth_problem(depth)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return {}, f"the arguments are not valid JSON ({exc.msg} at character {exc.pos})"
    except RecursionError:  # not expected after the scan above, but it must never end the turn
        return {}, f"the arguments are nested too deep to parse; at most {MAX_ARGUMENT_DEPTH} levels are allowed"
    if not isinstance(value, dict):
        return {}, f"the arguments must be a JSON object, not {type(value).__name__}"
    return value, ""
