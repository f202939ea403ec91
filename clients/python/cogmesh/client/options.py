"""Plain Python values to request protos, checked before any RPC.

Wrong types raise TypeError and unknown names ValueError, each naming the argument, so
a mistake never costs a round trip (the gateway still checks values: empty content,
bad limits and the like come back as InvalidArgument naming the field).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from google.protobuf import json_format, struct_pb2
from google.protobuf.message import Message

from cogmesh.client.tools import ClientTool, client_tool
from cogmesh.common.v1 import events_pb2, messages_pb2, turns_pb2

M = TypeVar("M", bound=Message)


def text(name: str, value: object, *, required: bool = False) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name}: expected str, got {type(value).__name__}")
    if required and not value:
        raise ValueError(f"{name}: must not be empty")
    return value


def flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected bool, got {type(value).__name__}")
    return value


def seconds(name: str, value: object, *, optional: bool = False) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name}: expected seconds as a number, got {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{name}: must be positive, got {value}")
    return float(value)


def count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name}: must not be negative, got {value}")
    return value


def enum_value(name: str, value: object, enum: Any, prefix: str) -> int:
    """An enum by its short name ("approve", "ENQUEUE"), its full name or its number."""
    names = [n.removeprefix(prefix).lower() for n in enum.keys() if not n.endswith("_UNSPECIFIED")]  # noqa: SIM118
    if isinstance(value, str):
        short = value.strip().upper().removeprefix(prefix)
        if short.lower() in names:
            return int(enum.Value(prefix + short))
    elif isinstance(value, int) and not isinstance(value, bool):
        if value in enum.values():
            return value
    else:
        raise TypeError(f"{name}: expected one of {', '.join(names)}, got {type(value).__name__}")
    raise ValueError(f"{name}: unknown value {value!r}; expected one of {', '.join(names)}")


def struct(name: str, value: object) -> struct_pb2.Struct:
    """A JSON object from a dict (or a Struct as is)."""
    if isinstance(value, struct_pb2.Struct):
        return value
    if not isinstance(value, Mapping):
        raise TypeError(f"{name}: expected a dict (JSON object), got {type(value).__name__}")
    result = struct_pb2.Struct()
    try:
        result.update(value)
    except (ValueError, TypeError, AttributeError) as exc:
        raise TypeError(f"{name}: not a JSON object: {exc}") from exc
    return result


def message(name: str, value: object, kind: type[M], convert: Callable[[Mapping[str, Any]], None] | None = None) -> M:
    """A request sub-message from itself or from a dict of its fields (enums by short name)."""
    if isinstance(value, kind):
        return value
    if not isinstance(value, Mapping):
        raise TypeError(f"{name}: expected a dict or {kind.__name__}, got {type(value).__name__}")
    fields = {f.name for f in kind.DESCRIPTOR.fields}
    unknown = sorted(set(value) - fields)
    if unknown:
        raise ValueError(f"{name}: unknown field {unknown[0]!r}; expected some of {', '.join(sorted(fields))}")
    if convert is not None:
        convert(value)
    try:
        return json_format.ParseDict(dict(value), kind())
    except json_format.ParseError as exc:
        raise TypeError(f"{name}: {exc}") from exc


def limits(value: object) -> turns_pb2.TurnLimits:
    def check(fields: Mapping[str, Any]) -> None:
        for key, item in fields.items():
            count(f"limits.{key}", item)

    return message("limits", value, turns_pb2.TurnLimits, check)


def cost_budget(value: object) -> turns_pb2.CostBudget:
    if isinstance(value, Mapping) and "action" in value:
        action = enum_value("cost_budget.action", value["action"], turns_pb2.BudgetAction, "BUDGET_ACTION_")
        value = {**value, "action": action}
    return message("cost_budget", value, turns_pb2.CostBudget)


def multitask(value: object) -> int:
    return enum_value("multitask_strategy", value, turns_pb2.MultitaskStrategy, "MULTITASK_STRATEGY_")


def decision(value: object) -> int:
    return enum_value("decision", value, events_pb2.ApprovalDecision, "APPROVAL_DECISION_")


def tools(value: object) -> tuple[list[messages_pb2.ToolSpec], dict[str, ClientTool]]:
    """(specs for the request, the runnable tools by name) from functions, ClientTools or ToolSpecs."""
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise TypeError(f"tools: expected a list of functions, got {type(value).__name__}")
    specs: list[messages_pb2.ToolSpec] = []
    runnable: dict[str, ClientTool] = {}
    for item in value:
        if isinstance(item, messages_pb2.ToolSpec):  # declared only: the caller answers its calls itself
            specs.append(item)
            continue
        tool = client_tool(item)
        specs.append(tool.spec())
        runnable[tool.name] = tool
    names = [s.name for s in specs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"tools: {duplicates[0]!r} is declared twice")
    return specs, runnable
