"""Client-side tools from plain Python functions.

A function becomes a tool the model may call during a turn: its name is the tool's
name, its docstring's first paragraph the description (an "Args:" section, Google
style, describes the parameters) and its signature the JSON Schema of the arguments:

    def read_file(path: str, max_bytes: int = 4096) -> str:
        '''Read a file on the user's machine.

        Args:
            path: file to read, relative to the working folder.
        '''

`run(..., tools=[read_file])` declares it for the turn; when the model calls it the
turn pauses, the SDK calls the function and sends back what it returned (a string as
is, anything else as JSON; an exception as an error result the model reads).
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format, struct_pb2

from cogmesh.common.v1 import messages_pb2

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]{0,63}$")
_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


@dataclass(frozen=True)
class ClientTool:
    """A tool the caller runs itself: its spec for the model and the function behind it."""

    name: str
    description: str
    parameters: dict[str, Any]
    function: Callable[..., Any]

    def spec(self) -> messages_pb2.ToolSpec:
        parameters = struct_pb2.Struct()
        parameters.update(self.parameters)
        return messages_pb2.ToolSpec(name=self.name, description=self.description, parameters=parameters)

    async def call(self, arguments: Mapping[str, Any]) -> tuple[str, bool]:
        """Run the function; returns (content, is_error). A failure is reported, never raised."""
        arguments = self._coerce(arguments)
        try:
            if inspect.iscoroutinefunction(self.function):
                value = await self.function(**arguments)
            else:  # plain functions may block: keep the event loop free
                value = await asyncio.to_thread(self.function, **arguments)
        except Exception as exc:  # noqa: BLE001 - the model reads what went wrong and may try again
            return f"{type(exc).__name__}: {exc}", True
        if isinstance(value, str):
            return value, False
        try:
            return json.dumps(value), False
        except TypeError:
            return str(value), False

    def _coerce(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """JSON numbers arrive as floats: give integer parameters their ints back."""
        properties = self.parameters.get("properties", {})
        return {
            key: int(value)
            if properties.get(key, {}).get("type") == "integer" and isinstance(value, float) and value.is_integer()
            else value
            for key, value in arguments.items()
        }


def client_tool(function: Callable[..., Any], *, name: str | None = None, description: str | None = None) -> ClientTool:
    """Describe `function` as a client-side tool (see the module docstring)."""
    if isinstance(function, ClientTool):
        return function
    if not callable(function):
        raise TypeError(f"tools: expected a function, got {type(function).__name__}")
    tool_name: str = name or getattr(function, "__name__", "") or ""
    if not _NAME.match(tool_name):
        raise ValueError(f"tools: {tool_name!r} is not a valid tool name (letters, digits, _ and -, up to 64)")
    summary, documented = _parse_docstring(inspect.getdoc(function) or "")
    hints = typing.get_type_hints(function)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in inspect.signature(function).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise TypeError(f"tools: {tool_name}({param.name}): only named parameters can be tool arguments")
        schema = _schema(hints.get(param.name, Any), f"{tool_name}({param.name})")
        if param.name in documented:
            schema["description"] = documented[param.name]
        properties[param.name] = schema
        if param.default is inspect.Parameter.empty:
            required.append(param.name)
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    return ClientTool(tool_name, description if description is not None else summary, parameters, function)


def arguments_of(call: messages_pb2.ToolCall) -> dict[str, Any]:
    return json_format.MessageToDict(call.arguments)


def _schema(annotation: Any, where: str) -> dict[str, Any]:
    """JSON Schema for one parameter's type; unsupported types are refused naming the parameter."""
    if annotation is Any or annotation is inspect.Parameter.empty:
        return {}
    if annotation in _SCALARS:
        return {"type": _SCALARS[annotation]}
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return {"enum": [m.value for m in annotation]}
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        if len(options) == 1:
            return _schema(options[0], where)
        return {"anyOf": [_schema(a, where) for a in options]}
    if origin is typing.Literal:
        return {"enum": list(args)}
    if annotation is list or origin is list:
        return {"type": "array", **({"items": _schema(args[0], where)} if args else {})}
    if annotation is dict or origin is dict:
        return {"type": "object"}
    raise TypeError(f"tools: {where}: cannot describe {annotation!r} as JSON; use str, int, float, bool, list or dict")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """(first paragraph, {parameter: description}) from a Google-style docstring."""
    summary = doc.split("\n\n", 1)[0].strip()
    described: dict[str, str] = {}
    section = re.search(r"^(?:Args|Arguments|Parameters):\s*\n((?:[ \t]+.*\n?)+)", doc, re.MULTILINE)
    if section:
        lines = section.group(1).splitlines()
        indent = len(lines[0]) - len(lines[0].lstrip())
        current = ""
        for line in lines:
            match = re.match(r"^\s+(\w+)(?:\s*\([^)]*\))?:\s*(.*)$", line)
            if match and len(line) - len(line.lstrip()) == indent:
                current = match.group(1)
                described[current] = match.group(2).strip()
            elif current and line.strip():
                described[current] += " " + line.strip()
    return " ".join(summary.split()), described
