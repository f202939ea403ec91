"""Structured output: the turn's final answer as JSON that matches an output schema (seed 004).

The model gets one extra tool, `final_response`, whose parameters are the schema
(a non-object schema is wrapped as {"value": <schema>}) and is told to call it once
with its answer. If it answers in plain text instead, JSON is taken from the text
(the whole text, or a fenced ```json block). An answer that does not match the
schema is sent back once with the validation errors (one repair); a second failure
ends the turn with an output_invalid error.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema
from jsonschema.exceptions import SchemaError

from services.kit.limits import MAX_ARGUMENT_DEPTH, depth_problem, json_text_depth
from services.lib.llm import ToolSchema

RESPOND_TOOL = "final_response"
MAX_REPAIRS = 1
_FENCED = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


class InvalidSchema(ValueError):
    """The output schema itself is not a valid JSON Schema."""


@dataclass(frozen=True)
class OutputSpec:
    schema: Mapping[str, Any]
    wrapped: bool  # the tool takes {"value": ...} because the schema is not an object
    validator: Any

    @classmethod
    def of(cls, schema: Mapping[str, Any]) -> OutputSpec:
        try:
            validator_class = jsonschema.validators.validator_for(schema)
            validator_class.check_schema(dict(schema))
        except SchemaError as exc:
            location = "/".join(str(p) for p in exc.absolute_path)
            raise InvalidSchema(
                f"not a valid JSON Schema{' at ' + location if location else ''}: {exc.message}"
            ) from exc
        wrapped = schema.get("type") != "object"
        return cls(schema, wrapped, validator_class(schema))

    def tool(self) -> ToolSchema:
        parameters: Mapping[str, Any] = self.schema
        if self.wrapped:
            parameters = {"type": "object", "properties": {"value": self.schema}, "required": ["value"]}
        return ToolSchema(
            RESPOND_TOOL,
            "Give your final answer by calling this tool exactly once, with arguments that match its schema. "
            "Call it after any other tools, instead of answering in text.",
            parameters,
        )

    def from_tool_arguments(self, arguments: Mapping[str, Any]) -> Any:
        return arguments.get("value") if self.wrapped else dict(arguments)

    def errors(self, value: Any) -> list[str]:
        """Validation errors, each naming where in the value it is; [] when valid."""
        found = sorted(self.validator.iter_errors(value), key=lambda e: list(e.absolute_path))
        return [f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in found[:10]]


def parse_json_text(text: str) -> tuple[bool, Any, str]:
    """(True, value, "") when the text is JSON or holds a fenced JSON block; (False, None, why) otherwise.

    JSON nested deeper than MAX_ARGUMENT_DEPTH is not parsed: it could not travel as the
    turn's structured output, and `json` cannot parse ~1,000 levels at all.
    """
    why = "the answer is not JSON"
    candidates = [text.strip(), *(m.group(1).strip() for m in _FENCED.finditer(text))]
    for candidate in candidates:
        if not candidate:
            continue
        depth = json_text_depth(candidate)
        if depth > MAX_ARGUMENT_DEPTH:
            why = depth_problem(depth, "the answer is")
            continue
        try:
            return True, json.loads(candidate), ""
        except (json.JSONDecodeError, RecursionError):
            continue
    return False, None, why


def repair_message(errors: list[str]) -> str:
    return (
        "error: the answer does not match the output schema: "
        + "; ".join(errors)
        + f". Call {RESPOND_TOOL} again with a corrected answer."
    )
