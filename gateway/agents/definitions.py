"""An agent definition sent through the API: parsed, checked and named as an agent file would be.

A stored agent has no files: its prompt is inline (`system_prompt`), so `prompts_dir` and
`{file: ...}` prompts are refused. Every problem names its field under `definition.`; a model,
subagent or handoff target that does not exist is named too.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from google.protobuf import struct_pb2
from pydantic import ValidationError

from services.kit.errors import InvalidArgument, Violations
from services.kit.protos import dict_to_struct, struct_to_dict
from services.kit.yaml_config import describe_error, field_path
from services.lib.agents import AgentDefinition, agent_from_json, agent_to_json
from services.lib.models.catalog import UnknownModelError
from services.lib.models.watch import CatalogWatcher
from services.lib.stored_agents import split_ref

__all__ = ["OnOffer", "check_references", "check_tools", "parse", "split_ref", "to_struct"]


def parse(name: str, definition: struct_pb2.Struct) -> AgentDefinition:
    """The definition as the loader would accept it; INVALID_ARGUMENT naming every field at fault."""
    fields: dict[str, Any] = struct_to_dict(definition)
    problems = Violations()
    given = fields.pop("name", name)
    problems.check(given == name, "definition.name", f"must be the agent's name {name!r}, or left out")
    problems.check(
        "prompts_dir" not in fields,
        "definition.prompts_dir",
        "a stored agent has no files: put its prompt in system_prompt",
    )
    problems.check(
        not isinstance(fields.get("system_prompt"), dict),
        "definition.system_prompt",
        "must be the prompt's text (a stored agent has no files to read it from)",
    )
    problems.raise_if_any()
    try:
        parsed = AgentDefinition.model_validate({**_whole_numbers(fields), "name": name})
    except ValidationError as exc:
        raise InvalidArgument(
            [(field_path(("definition", *e["loc"])), describe_error(e)) for e in exc.errors()]
        ) from exc
    try:  # what the runtime will read back must be what was checked here
        agent_from_json(name, agent_to_json(parsed))
    except ValueError as exc:
        raise InvalidArgument([("definition", str(exc))]) from exc
    return parsed


def _whole_numbers(value: Any) -> Any:
    """A Struct holds every number as a double: 3.0 comes back as 3, so integer fields take it."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _whole_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole_numbers(v) for v in value]
    return value


def to_struct(definition: AgentDefinition) -> struct_pb2.Struct:
    """The public form of a definition: the agent file's fields without its name."""
    fields = definition.model_dump(mode="json", exclude_defaults=True)
    fields.pop("name", None)
    return dict_to_struct(fields)


@dataclass(frozen=True)
class OnOffer:
    """The tools a runtime offers (ListTools): their names, and the name prefixes of servers it could not list."""

    names: frozenset[str]
    unlisted_prefixes: tuple[str, ...] = ()

    def knows(self, tool: str) -> bool:
        """Whether the name (or glob) can name a tool: one listed, or one an unlisted server may have."""
        if any(tool.startswith(prefix) for prefix in self.unlisted_prefixes):
            return True
        if any(ch in tool for ch in "*?["):
            return any(fnmatch.fnmatchcase(name, tool) for name in self.names) or any(
                fnmatch.fnmatchcase(prefix, tool) or prefix.startswith(tool.split("*")[0])
                for prefix in self.unlisted_prefixes
            )
        return tool in self.names


def check_tools(definition: AgentDefinition, offer: OnOffer, problems: Violations) -> None:
    own = set(definition.memory.tool_names())  # the agent's memory tools: offered by its definition
    for index, tool in enumerate(definition.tools):
        if tool not in own and not offer.knows(tool):
            what = "matches no tool" if any(ch in tool for ch in "*?[") else "is no tool the runtime offers"
            problems.check(False, f"definition.tools[{index}]", f"{tool!r} {what} (see the runtime's ListTools)")


async def check_references(
    definition: AgentDefinition,
    catalogue: CatalogWatcher | None,
    agent_exists: Callable[[str], Awaitable[bool]],
    on_offer: Callable[[], Awaitable[OnOffer]] | None = None,
) -> None:
    """INVALID_ARGUMENT naming each model, tool, subagent or handoff target that does not exist."""
    problems = Violations()
    if on_offer is not None and definition.tools:
        check_tools(definition, await on_offer(), problems)
    held = catalogue.current_or_none() if catalogue is not None else None
    if definition.model_name and held is not None:
        where = "definition.config.model" if definition.config.model else "definition.model"
        try:
            held.catalog.resolve(definition.model_name, strict=True)
        except UnknownModelError:
            problems.check(False, where, f"model {definition.model_name!r} is not in the catalogue")
    for field, names in (("subagents", definition.subagents), ("handoffs", definition.handoffs)):
        for index, other in enumerate(names):
            if other != definition.name and not await agent_exists(other):
                problems.check(False, f"definition.{field}[{index}]", f"no agent {other!r}")
    problems.raise_if_any()
