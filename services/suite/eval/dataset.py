"""Eval datasets: cases to run through the gateway and the graders that judge each answer.

A dataset is a YAML file (a mapping with `cases`, and optionally `name`, `judge_model` and
`graders` applied to every case) or a JSONL file (one case per line). Either way every
problem names the file, its line and the field (`cases.yaml:14: cases[2].graders[0].pattern:
...`), all of them at once, as the suite's configuration files do (services/kit/yaml_config.py).
The format is documented in docs/eval.md.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import jsonschema
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from services.kit import yaml_config
from services.kit.errors import Violations
from services.kit.yaml_config import ConfigError, ConfigProblem
from services.lib import scope as scopes

CASE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/\-]{0,127}")
NO_GRADER = "give at least one grader, or `expected` (graded as an exact match)"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Exact(_Strict):
    """The answer equals `value` (default: the case's `expected`), both stripped of surrounding whitespace."""

    type: Literal["exact"]
    value: str | None = None
    case_sensitive: bool = True


class Contains(_Strict):
    """The answer contains `value` (default: the case's `expected`)."""

    type: Literal["contains"]
    value: str | None = None
    case_sensitive: bool = True


class Regex(_Strict):
    """The answer matches `pattern` somewhere (re.search); `fullmatch: true` for the whole answer."""

    type: Literal["regex"]
    pattern: str
    fullmatch: bool = False
    ignore_case: bool = False

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, pattern: str) -> str:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        return pattern


class JsonSchema(_Strict):
    """The answer (the turn's structured output when it has one, else its text parsed as JSON) fits `schema`."""

    type: Literal["json_schema"]
    json_schema: dict[str, Any] = Field(alias="schema")

    @field_validator("json_schema")
    @classmethod
    def _valid_schema(cls, schema: dict[str, Any]) -> dict[str, Any]:
        try:
            jsonschema.validators.validator_for(schema).check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise ValueError(f"not a valid JSON schema: {exc.message}") from None
        return schema


class ToolCalled(_Strict):
    """The tool `name` was called in the case (any turn); with `arguments`, by a call whose arguments hold
    these entries (other arguments may be there too)."""

    type: Literal["tool_called"]
    name: str = Field(min_length=1)
    arguments: dict[str, Any] | None = None


class ToolNotCalled(_Strict):
    """The tool `name` was not called in any turn of the case."""

    type: Literal["tool_not_called"]
    name: str = Field(min_length=1)


class MaxCost(_Strict):
    """The case's turns cost at most `usd` in all, and used at most `tokens` (input + output) when given."""

    type: Literal["max_cost"]
    usd: float | None = Field(None, ge=0)
    tokens: int | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _some_ceiling(self) -> MaxCost:
        if self.usd is None and self.tokens is None:
            raise ValueError("give usd, tokens or both")
        return self


class MaxLatency(_Strict):
    """The case's turns took at most `seconds` of wall time in all, as the client saw them; with
    `first_event_seconds`, no turn waited longer than that for its first event."""

    type: Literal["max_latency"]
    seconds: float | None = Field(None, gt=0)
    first_event_seconds: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _some_ceiling(self) -> MaxLatency:
        if self.seconds is None and self.first_event_seconds is None:
            raise ValueError("give seconds, first_event_seconds or both")
        return self


class Rubric(_Strict):
    """A model judges the answer against `rubric` (and the case's `expected`, when given); `model` is a
    model name or alias of the gateway's catalogue (default: the dataset's `judge_model` or --judge-model)."""

    type: Literal["rubric"]
    rubric: str = Field(min_length=1)
    model: str | None = None


Grader = Annotated[
    Exact | Contains | Regex | JsonSchema | ToolCalled | ToolNotCalled | MaxCost | MaxLatency | Rubric,
    Field(discriminator="type"),
]


def grader_name(grader: Grader, index: int) -> str:
    """How reports name a grader: its type, and its position when a case has several of that type."""
    return f"{grader.type}[{index}]"


class Case(_Strict):
    """One case: the user's message(s), where the session runs (scope) and how its answer is judged."""

    id: str = ""
    input: str | list[str]
    scope: dict[str, str] = Field(default_factory=dict)
    expected: str | None = None
    graders: list[Grader] = Field(default_factory=list)

    @field_validator("id")
    @classmethod
    def _id_shape(cls, value: str) -> str:
        if value and not CASE_ID.fullmatch(value):
            raise ValueError(
                "must be 1 to 128 characters of letters, digits and _ . : / -, starting with a letter or digit"
            )
        return value

    @field_validator("input")
    @classmethod
    def _some_input(cls, value: str | list[str]) -> str | list[str]:
        messages = [value] if isinstance(value, str) else value
        if not messages:
            raise ValueError("give at least one message")
        if any(not message.strip() for message in messages):
            raise ValueError("messages must not be empty")
        return value

    @field_validator("scope")
    @classmethod
    def _scope_keys(cls, scope: dict[str, str]) -> dict[str, str]:
        problems = Violations()
        scopes.check(scope, "scope", problems)  # the gateway's own rules, so a bad scope is a dataset error
        if problems.items:
            raise ValueError("; ".join(f"{where}: {what}" for where, what in problems.items))
        return scope

    @property
    def messages(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else list(self.input)


class DatasetFile(_Strict):
    """A YAML dataset."""

    name: str = ""
    judge_model: str | None = None
    graders: list[Grader] = Field(default_factory=list)  # applied to every case, after the case's own
    cases: list[Case] = Field(min_length=1)


class Dataset(_Strict):
    """A validated dataset: every case has an id and its full list of graders."""

    name: str
    path: str
    cases: list[Case]
    judge_model: str | None = None


def load(path: Path) -> Dataset:
    """Read and validate a dataset (`.jsonl`: one case per line; anything else: YAML).
    Raises ConfigError naming file, line and field of every problem."""
    source = str(path)
    text = yaml_config.read_text(path, source)
    if path.suffix.lower() in (".jsonl", ".ndjson"):
        return _load_jsonl(text, source, path.stem)
    return _load_yaml(text, source, path.stem)


def _load_yaml(text: str, source: str, stem: str) -> Dataset:
    document = yaml_config.parse(text, source)
    if document.data is None:
        raise ConfigError([ConfigProblem(source, 0, "", "the dataset is empty: give `cases:`")])
    parsed = document.validate(DatasetFile)
    problems: list[ConfigProblem] = []
    cases = []
    for index, case in enumerate(parsed.cases):
        for where, message in _case_problems(case):
            problems.append(document.problem(("cases", index, *where), message))
        for number, grader in enumerate(parsed.graders):
            if _needs_expected(grader) and case.expected is None:
                where = ("cases", index)
                problems.append(
                    document.problem(where, f"the dataset's graders[{number}] ({grader.type}) needs `expected`")
                )
        cases.append(_completed(case, f"case-{index + 1}", parsed.graders))
        if not cases[-1].graders:
            problems.append(document.problem(("cases", index), NO_GRADER))
    for index, first in _duplicate_ids(cases):
        message = f"duplicate case id {cases[index].id!r} (first at cases[{first}])"
        problems.append(document.problem(("cases", index, "id"), message))
    if problems:
        raise ConfigError(sorted(problems, key=lambda problem: problem.line))
    return Dataset(name=parsed.name or stem, path=source, cases=cases, judge_model=parsed.judge_model)


def _load_jsonl(text: str, source: str, stem: str) -> Dataset:
    problems: list[ConfigProblem] = []
    cases: list[Case] = []
    lines: list[int] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(ConfigProblem(source, number, "", f"not JSON: {exc.msg} (column {exc.colno})"))
            continue
        if not isinstance(value, dict):
            problems.append(ConfigProblem(source, number, "", f"expected a JSON object, got {type(value).__name__}"))
            continue
        try:
            case = Case.model_validate(value)
        except ValidationError as exc:
            problems += _line_problems(exc, line, source, number)
            continue
        for where, message in _case_problems(case):
            problems.append(ConfigProblem(source, number, yaml_config.field_path(where), message))
        lines.append(number)
        cases.append(_completed(case, f"line-{number}", []))
        if not cases[-1].graders:
            problems.append(ConfigProblem(source, number, "graders", NO_GRADER))
    for index, first in _duplicate_ids(cases):
        message = f"duplicate case id {cases[index].id!r} (first on line {lines[first]})"
        problems.append(ConfigProblem(source, lines[index], "id", message))
    if not cases and not problems:
        problems.append(ConfigProblem(source, 0, "", "the dataset has no cases: give one JSON object per line"))
    if problems:
        raise ConfigError(sorted(problems, key=lambda problem: problem.line))
    return Dataset(name=stem, path=source, cases=cases)


def _needs_expected(grader: Grader) -> bool:
    return isinstance(grader, Exact | Contains) and grader.value is None


def _case_problems(case: Case) -> list[tuple[tuple[str | int, ...], str]]:
    """What a case's own graders need that the case does not give: (location within the case, problem)."""
    problems: list[tuple[tuple[str | int, ...], str]] = []
    for index, grader in enumerate(case.graders):
        if _needs_expected(grader) and case.expected is None:
            problems.append((("graders", index, "value"), "give a value, or the case's `expected`"))
    return problems


def _completed(case: Case, default_id: str, shared: list[Grader]) -> Case:
    """The case with its id and every grader that judges it: its own, then the dataset's; `expected`
    alone means an exact match. A case with neither gets none (and is refused)."""
    graders = [*case.graders, *shared] or ([Exact(type="exact")] if case.expected is not None else [])
    return case.model_copy(update={"id": case.id or default_id, "graders": graders})


def _duplicate_ids(cases: list[Case]) -> list[tuple[int, int]]:
    """(index of a case, index of the first case with its id) for every repeated id."""
    seen: dict[str, int] = {}
    found = []
    for index, case in enumerate(cases):
        if case.id in seen:
            found.append((index, seen[case.id]))
        else:
            seen[case.id] = index
    return found


def _line_problems(exc: ValidationError, line: str, source: str, number: int) -> list[ConfigProblem]:
    """A JSONL line's validation problems, their fields named as in a YAML file (a JSON line is YAML: the
    same locator leaves out a grader's `type` tag that pydantic puts in the path)."""
    try:
        return yaml_config.parse(line, source, first_line=number).problems(exc)
    except ConfigError:  # JSON that YAML 1.2 reads otherwise (rare escapes): plain paths
        return [
            ConfigProblem(source, number, yaml_config.field_path(e["loc"]), yaml_config.describe_error(e))
            for e in exc.errors()
        ]
