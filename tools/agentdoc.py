"""Write the agent definition reference (docs/agents.md) from the pydantic models in services/lib/agents.py.

    python tools/agentdoc.py          # regenerate docs/agents.md
    python tools/agentdoc.py --check  # exit 1 when docs/agents.md is stale

Every field of AgentDefinition and of the models it nests comes from the schema the
services validate agent files with: its type, constraints and default from the
annotation and Field(...), its description from Field(description=...). A field
without a description is an error, so a new field cannot reach the page undocumented.
The examples are the shipped agents (services/defaults/agents) and the definition
that only names itself, dumped with every default.
"""

from __future__ import annotations

import json
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any

import yaml
from annotated_types import Ge, Gt, Le, MaxLen, MinLen
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: the repository's packages are importable
    sys.path.insert(0, str(ROOT))

from services.lib import agents  # noqa: E402
from tools import generated_doc  # noqa: E402

OUTPUT = ROOT / "docs" / "agents.md"
# Shipped agents shown whole: one YAML file, one Markdown file.
EXAMPLES = ("careful.yaml", "arithmetic.md")


def anchor(model: type[BaseModel], path: str) -> str:
    return "agent" if model is agents.AgentDefinition else path.replace(".<key>", "").replace(".", "-")


def prose(text: str) -> str:
    """A docstring as Markdown: reST ``code`` becomes `code`, each paragraph one line."""
    text = re.sub(r"``([^`]+)``", r"`\1`", text)
    return "\n\n".join(
        " ".join(line.strip() for line in part.splitlines()) for part in re.split(r"\n\s*\n", text.strip())
    )


def nested_models(model: type[BaseModel], path: str = "") -> list[tuple[str, type[BaseModel]]]:
    """(dotted path, model) of model and every model its fields hold, depth first."""
    found = [(path, model)]
    for name, field in model.model_fields.items():
        inner = field.annotation
        if typing.get_origin(inner) is dict:  # a map of models: `approvals.<tool>`
            inner, name = typing.get_args(inner)[1], f"{name}.<key>"
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            found.extend(nested_models(inner, f"{path}.{name}" if path else name))
    return found


def type_name(annotation: Any, sections: dict[type[BaseModel], str]) -> str:
    """A field's type in words a YAML author reads."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_name(args[0], sections)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_name(arg, sections) for arg in args if arg is not type(None))
    if origin is typing.Literal:
        return " \\| ".join(f'`"{value}"`' for value in args)
    if origin is list:
        return f"list of {type_name(args[0], sections)}"
    if origin is dict:
        value = "any JSON value" if args[1] is Any else type_name(args[1], sections)
        return f"mapping of {type_name(args[0], sections)} to {value}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"[{annotation.__name__}](#{sections[annotation]})"
    names = {str: "string", int: "integer", float: "number", bool: "boolean", Path: "path"}
    if annotation in names:
        return names[annotation]
    raise SystemExit(f"agentdoc: no wording for the type {annotation!r}; add it to type_name")


def constraints(field: FieldInfo) -> list[str]:
    """The field's bounds and pattern, as the validator applies them."""
    words = []
    for item in field.metadata:
        if isinstance(item, Ge):
            words.append(f"≥ {item.ge}")
        elif isinstance(item, Gt):
            words.append(f"> {item.gt}")
        elif isinstance(item, Le):
            words.append(f"≤ {item.le}")
        elif isinstance(item, MinLen):
            words.append(f"at least {item.min_length} item{'s' * (item.min_length != 1)}")
        elif isinstance(item, MaxLen):
            words.append(f"at most {item.max_length} item{'s' * (item.max_length != 1)}")
        elif getattr(item, "pattern", None):
            words.append(f"matches `{item.pattern}`")
    return words


def default_of(field: FieldInfo, sections: dict[type[BaseModel], str]) -> str:
    if field.is_required():
        return "required"
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
        if isinstance(value, BaseModel):
            return f"[its defaults](#{sections[type(value)]})"
    else:
        value = field.default
    if value is None:
        return "unset"
    if value is PydanticUndefined:
        raise SystemExit("agentdoc: a field with neither a default nor a factory is required")
    return f"`{json.dumps(value)}`"  # JSON is YAML's flow style: what the file would say


def table(model: type[BaseModel], path: str, sections: dict[type[BaseModel], str]) -> str:
    rows = ["| field | type | default | description |", "|---|---|---|---|"]
    for name, field in model.model_fields.items():
        if not field.description:
            where = f"{model.__name__}.{name}"
            raise SystemExit(f"agentdoc: {where} has no description; give it Field(description=...)")
        kind = ", ".join([type_name(field.annotation, sections), *constraints(field)])
        description = field.description.replace("|", "\\|")
        rows.append(f"| `{name}` | {kind} | {default_of(field, sections)} | {description} |")
    return "\n".join(rows)


def shipped(name: str) -> str:
    """A shipped agent file as a fenced block; it must load, or the example would teach a broken file."""
    path = agents.DEFAULT_AGENTS_DIR / name
    registry = agents.AgentRegistry.load_dir(agents.DEFAULT_AGENTS_DIR)
    problems = [str(error) for error in registry.errors if error.path == path]
    if problems:
        raise SystemExit(f"agentdoc: the example {name} does not load: {problems}")
    language = "yaml" if path.suffix in (".yaml", ".yml") else "markdown"
    return f"`services/defaults/agents/{name}`:\n\n```{language}\n{path.read_text().rstrip()}\n```"


def render() -> str:
    models = nested_models(agents.AgentDefinition)
    sections = {model: anchor(model, path) for path, model in models}
    defaults = agents.AgentDefinition(name="example").model_dump(mode="json")
    out = [
        "# Agent definitions",
        "",
        "<!-- Generated by tools/agentdoc.py from services/lib/agents.py; edit the models there, not this page. -->",
        "",
        "An agent is one file in the agents folder: `COGMESH_AGENTS_DIR`, by default",
        "`services/defaults/agents`, the same folder for every service that reads agents.",
        "",
        "- `<name>.yaml` (or `.yml`): a mapping of the fields below.",
        "- `<name>.md`: the fields as YAML front matter between `---` lines, then a Markdown body",
        "  that becomes `system_prompt`; the name is the file's unless the front matter gives one.",
        "  A `README.md` documents the folder and is skipped.",
        "",
        "The models service reads the folder and reloads it when a file in it changes, without a",
        "restart; every other service gets the agents from its catalogue snapshot",
        "([architecture.md](architecture.md#how-configuration-propagates)). A file",
        "that does not validate is left out and logged with its file, line and field (`foo.yaml:3: tools[0]: ...`),",
        "and the other agents go on serving; unknown fields are errors, so a typo such as",
        "`temprature` is reported instead of ignored. The gateway's `ListAgents` lists the",
        "agents that are not `hidden`.",
        "",
        "## Examples",
        "",
        shipped(EXAMPLES[0]),
        "",
        "A Markdown file: the front matter holds the fields and the body is the system prompt;",
        "the name is the file's (`arithmetic`).",
        "",
        shipped(EXAMPLES[1]),
        "",
        "Every field, as the definition `name: example` holds it with nothing else set:",
        "",
        f"```yaml\n{yaml.safe_dump(defaults, sort_keys=False).rstrip()}\n```",
    ]
    for path, model in models:
        title = "Fields" if not path else f"`{path}`: {model.__name__}"
        out += ["", f'<a id="{sections[model]}"></a>', f"## {title}", "", prose(model.__doc__ or ""), ""]
        out.append(table(model, path, sections))
    return "\n".join(out) + "\n"


def main() -> int:
    return generated_doc.main(__doc__, OUTPUT, render, "tools/agentdoc.py")


if __name__ == "__main__":
    sys.exit(main())
