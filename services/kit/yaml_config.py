"""Configuration files in YAML: one parser, one boolean rule, one error shape.

Every configuration file cogmesh reads (agent files, the policy folder, providers, tool
servers, the model catalogue and its added models, API keys) is parsed and validated
here, so the same text means the same thing in each, at startup and on a hot reload:

- Booleans are YAML 1.2's: only ``true`` and ``false`` (also ``True``, ``TRUE``,
  ``False``, ``FALSE``). ``yes``, ``no``, ``on``, ``off``, ``y`` and ``n`` are strings;
  under PyYAML's YAML 1.1 rule the Failover interceptor's ``on:`` key would be True and a
  tool or tenant named ``no`` would be False. A (non-strict) boolean field still accepts
  those words: pydantic reads the strings ``yes``/``no``/``on``/``off`` as booleans.
- A problem names file, line and field: ``agents/foo.yaml:12: tools[2]: Input should be a
  valid string``; a YAML syntax error names its line. A file's problems are reported
  together, in one ``ConfigError`` (a ValueError).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

M = TypeVar("M", bound=BaseModel)
Loc = Sequence[int | str]


@dataclass(frozen=True)
class ConfigProblem:
    """One problem of a configuration file; ``str()`` gives ``file:line: field: message``."""

    file: str
    line: int  # 1-based; 0 when unknown
    field: str  # "tools[2].name"; "" for the file as a whole
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


class ConfigError(ValueError):
    """A configuration file that cannot be read, parsed or validated; ``problems`` holds every problem found."""

    def __init__(self, problems: Iterable[ConfigProblem]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(str(problem) for problem in self.problems))


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans: only true/false."""


_BOOL = "tag:yaml.org,2002:bool"
_Loader.yaml_implicit_resolvers = {
    first: [(tag, regex) for tag, regex in resolvers if tag != _BOOL]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


def field_path(loc: Loc) -> str:
    """("tools", 2, "name") -> "tools[2].name"."""
    path = ""
    for part in loc:
        if isinstance(part, int) or (isinstance(part, str) and part.startswith("[")):
            path += f"[{part}]" if isinstance(part, int) else part
        else:
            path += f".{part}" if path else part
    return path


def describe_error(error: ErrorDetails) -> str:
    """Pydantic's message for one error, without its "Value error, " prefix."""
    return error["msg"].removeprefix("Value error, ")


def _child(node: yaml.Node | None, key: str) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode) and k.value == key:
                child: yaml.Node = v
                return child
    return None


@dataclass(frozen=True)
class YamlDocument:
    """A parsed file: its data, and its nodes to name the line of a field."""

    file: str  # how messages name the file
    data: Any
    root: yaml.Node | None
    first_line: int = 1  # the file's line of the text's first line (a Markdown file's front matter: 2)

    def locate(self, loc: Loc) -> tuple[int, str]:
        """(line, field path) of a pydantic location.

        The line is that of the deepest node that exists (a missing field points at its
        parent). A discriminated union puts the tag (the item's ``type``) into the
        location; it is not a key of the file, so it is left out of the path.
        """
        node = self.root
        line = node.start_mark.line + self.first_line if node is not None else 0
        path: list[int | str] = []
        for part in loc:
            if node is None:
                path.append(part)
                continue
            tag = _child(node, "type")
            if isinstance(part, str) and isinstance(tag, yaml.ScalarNode) and tag.value == part:
                continue
            path.append(part)
            if isinstance(node, yaml.SequenceNode) and isinstance(part, int):
                node = node.value[part] if 0 <= part < len(node.value) else None
            else:
                node = _child(node, str(part))
            if node is not None:
                line = node.start_mark.line + self.first_line
        return line, field_path(path)

    def problem(self, loc: Loc, message: str) -> ConfigProblem:
        """A problem at ``loc`` (``()``: the file), with its line."""
        line, path = self.locate(loc)
        return ConfigProblem(self.file, line, path, message)

    def problems(
        self, exc: ValidationError, at: Loc = (), describe: Callable[[ErrorDetails], str] = describe_error
    ) -> list[ConfigProblem]:
        """Each error of a validation of the value at ``at``, located in this file."""
        return [self.problem((*at, *error["loc"]), describe(error)) for error in exc.errors()]

    def validate(
        self,
        model: type[M],
        data: Any = None,
        *,
        at: Loc = (),
        describe: Callable[[ErrorDetails], str] = describe_error,
    ) -> M:
        """``model`` validated from the document (``data`` None), or from ``data``: the value at ``at``
        with changes (defaults merged in, say). An empty document is an empty mapping. Raises
        ConfigError with every problem."""
        value = data
        if value is None and at == ():
            value = {} if self.data is None else self.data
        if not isinstance(value, dict):
            where = "at top level" if at == () else "here"
            raise ConfigError([self.problem(at, f"expected a mapping {where}, got {type(value).__name__}")])
        try:
            return model.model_validate(value)
        except ValidationError as exc:
            raise ConfigError(self.problems(exc, at, describe)) from exc


def parse(text: str, file: str, *, first_line: int = 1) -> YamlDocument:
    """Parse YAML text (YAML 1.2 booleans); a syntax error raises ConfigError naming its line."""
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
        data = loader.construct_document(root) if root is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + first_line if mark is not None else 0
        problem = " ".join(f"{exc.context or ''} {exc.problem or ''}".split())
        raise ConfigError([ConfigProblem(file, line, "", f"YAML syntax error: {problem}")]) from exc
    except yaml.YAMLError as exc:
        raise ConfigError([ConfigProblem(file, 0, "", f"YAML error: {' '.join(str(exc).split())}")]) from exc
    finally:
        loader.dispose()
    return YamlDocument(file, data, root, first_line)


def _unreadable(file: str, exc: OSError | UnicodeDecodeError) -> ConfigError:
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return ConfigError([ConfigProblem(file, 0, "", f"cannot read: {reason}")])


def read_text(path: Path, file: str | None = None) -> str:
    """The file's text; ConfigError when it cannot be read (a missing file too). ``file``: how to name it."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise _unreadable(file or str(path), exc) from exc


def read_text_if_exists(path: Path, file: str | None = None) -> str | None:
    """The file's text, None when it does not exist; ConfigError when it cannot be read."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise _unreadable(file or str(path), exc) from exc


def load(path: Path, model: type[M], file: str | None = None) -> M:
    """Read, parse and validate one file; ConfigError names file, line and field of every problem."""
    name = file or str(path)
    return parse(read_text(path, name), name).validate(model)


_PATH_PART = re.compile(r"\[(\d+)\]|\.?([^.\[\]]+)")


def loc_of(path: str) -> tuple[int | str, ...]:
    """The location a field path names: "models[2].id" -> ("models", 2, "id") (``field_path`` reversed)."""
    return tuple(int(m.group(1)) if m.group(1) is not None else m.group(2) for m in _PATH_PART.finditer(path))
