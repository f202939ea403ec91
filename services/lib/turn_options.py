"""The per-turn options a client may set, and the rules they must follow.

SendMessage (gateway) and StartTurn (runtime, in its RunTurnRequest) carry the same options: `runtime`, `limits`,
`cost_budget`, `output_schema` and `client_tools`. The bounds of single fields (the runtime's name, the
limits, the budget, how many client tools) are rules on both requests' protos, which every service
checks before its servicer runs (services/kit/validation.py); the rest is here. The gateway applies these rules before
it takes the session's lease, so bad options are INVALID_ARGUMENT with field violations
instead of a turn that starts and fails; the runtime applies the same ones to whoever
calls it. Names only another service knows (the runtime engine, the model) are checked
by asking that service. A client tool may not take a name the session's agent lists or one
of the runtime's own tools (`client_tool_clashes`, once the gateway knows the agent); a name
only the agent's patterns reach (`mcp__github__*`) depends on the tool servers up at the
turn, and the runtime refuses that one when it builds the turn.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import jsonschema
from google.protobuf import struct_pb2
from jsonschema.exceptions import SchemaError

from cogmesh.common.v1 import messages_pb2, turns_pb2
from cogmesh.runtime.v1 import runtime_pb2
from services.kit.errors import Violations
from services.kit.protos import struct_to_dict

# The live transcript a turn starts with: at most this many messages after the rolling summary,
# read with the turn's lease grant. Compaction keeps them within the token budget; a longer
# window costs every turn a bigger load, PRE_THINK payload and model call (+6 ms a turn at 200).
HISTORY_MESSAGES = 50
MAX_SCHEMA_BYTES = 64_000
MAX_CLIENT_TOOLS = 64  # the requests' `client_tools` rule (repeated.max_items) refuses more
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what every provider accepts as a function name
# The runtime's own tools, which it may offer whatever the agent lists: delegation's "task",
# structured output's "final_response", archived results' "get_tool_response", handoffs'
# "transfer_to_agent" and "transfer_back", the todo list's "manage_todo_list" (the runtime's
# RESERVED_TOOLS in services/runtime/assembly.py; tests/unit/test_client_tool_clashes.py keeps them equal).
RUNTIME_TOOLS = frozenset(
    {"task", "final_response", "get_tool_response", "transfer_to_agent", "transfer_back", "manage_todo_list"}
)
_CHECKED_SCHEMAS = 256  # valid schemas remembered by content: a client sends the same ones turn after turn


class TurnOptions(Protocol):
    """What SendMessageRequest and RunTurnRequest have in common."""

    runtime: str
    output_schema: struct_pb2.Struct

    # The gateway's public twins (cogmesh.common.v1) or the runtime's own: the same fields.
    @property
    def limits(self) -> runtime_pb2.TurnLimits | turns_pb2.TurnLimits: ...

    @property
    def cost_budget(self) -> runtime_pb2.CostBudget | turns_pb2.CostBudget: ...

    @property
    def client_tools(self) -> Sequence[messages_pb2.ToolSpec]: ...

    def HasField(self, field_name: Any, /) -> bool: ...


class InvalidSchema(ValueError):
    """A schema that is not a valid JSON Schema."""


_validators: OrderedDict[str, Any] = OrderedDict()


def schema_validator(schema: Mapping[str, Any]) -> Any:
    """The jsonschema validator class for `schema`, once the schema itself is checked valid.

    Raises InvalidSchema naming where the schema is wrong. Checking a schema against its
    metaschema takes milliseconds, so valid ones are remembered by content (a pure
    function of it: nothing can go stale).
    """
    try:
        key = json.dumps(schema, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        key = ""  # not plain JSON (e.g. from YAML): check it every time
    if key and (known := _validators.get(key)) is not None:
        _validators.move_to_end(key)
        return known
    try:
        validator_class = jsonschema.validators.validator_for(schema)
        validator_class.check_schema(dict(schema))
    except SchemaError as exc:
        location = "/".join(str(p) for p in exc.absolute_path)
        raise InvalidSchema(f"not a valid JSON Schema{' at ' + location if location else ''}: {exc.message}") from exc
    if key:
        _validators[key] = validator_class
        if len(_validators) > _CHECKED_SCHEMAS:
            _validators.popitem(last=False)
    return validator_class


def check(options: TurnOptions, problems: Violations, prefix: str = "") -> None:
    """Add every problem of the turn's options to `problems`, fields named `<prefix><field>`: those beyond
    the fields' own rules (the runtime's name, limits, budget and how many client tools are on the
    requests' protos, checked before)."""
    _check_client_tools(options.client_tools, problems, prefix)
    if options.HasField("output_schema"):
        size = options.output_schema.ByteSize()
        if size > MAX_SCHEMA_BYTES:
            problems.check(False, f"{prefix}output_schema", f"must be at most {MAX_SCHEMA_BYTES} bytes, got {size}")
        else:
            try:
                schema_validator(struct_to_dict(options.output_schema))
            except InvalidSchema as exc:
                problems.check(False, f"{prefix}output_schema", str(exc))


def _check_client_tools(specs: Sequence[messages_pb2.ToolSpec], problems: Violations, prefix: str) -> None:
    # A name's pattern is checked here, not on ToolSpec: the type also lists the agent's own tools
    # (MCP servers name theirs), which this does not bind.
    seen: set[str] = set()
    for i, spec in enumerate(specs[:MAX_CLIENT_TOOLS]):
        field = f"{prefix}client_tools[{i}]"
        problems.check(
            TOOL_NAME.match(spec.name) is not None, f"{field}.name", "must be 1-64 letters, digits, '_' or '-'"
        )
        problems.check(spec.name not in seen, f"{field}.name", f"{spec.name!r} is declared twice")
        seen.add(spec.name)
        size = spec.parameters.ByteSize()
        problems.check(size <= MAX_SCHEMA_BYTES, f"{field}.parameters", f"must be at most {MAX_SCHEMA_BYTES} bytes")
        if spec.HasField("parameters") and size <= MAX_SCHEMA_BYTES:
            try:
                schema = struct_to_dict(spec.parameters)
                schema_validator(schema)  # any valid JSON Schema...
                problems.check(
                    schema.get("type", "object") == "object", f"{field}.parameters", "must describe a JSON object"
                )  # ...of a JSON object: the model's arguments
            except InvalidSchema as exc:
                problems.check(False, f"{field}.parameters", str(exc))


def client_tool_clashes(
    specs: Sequence[messages_pb2.ToolSpec], agent_tools: Sequence[str], problems: Violations, prefix: str = ""
) -> None:
    """Add a problem for each client tool named like one the agent lists or one of the runtime's own."""
    listed = set(agent_tools)  # patterns (mcp__github__*) never equal a tool name: see the module's docstring
    for i, spec in enumerate(specs[:MAX_CLIENT_TOOLS]):
        field = f"{prefix}client_tools[{i}].name"
        problems.check(spec.name not in listed, field, f"{spec.name!r} is already one of the agent's tools")
        problems.check(spec.name not in RUNTIME_TOOLS, field, f"{spec.name!r} is one of the runtime's own tools")
