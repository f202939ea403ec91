"""Graders: each turns a case's observation into a verdict (passed, and why not).

Deterministic graders are plain functions of the case and the observation; the rubric grader
asks a model through a `Judge` (judge.py). JSON schemas are checked by `jsonschema`, the
validator the suite already uses for tool arguments and structured output.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Protocol

import jsonschema

from services.suite.eval.dataset import (
    Case,
    Contains,
    Exact,
    Grader,
    JsonSchema,
    MaxCost,
    MaxLatency,
    Regex,
    Rubric,
    ToolCalled,
    ToolNotCalled,
)
from services.suite.eval.observe import Observation

SHOWN = 200  # characters of an answer quoted in a reason


@dataclass(frozen=True)
class Verdict:
    grader: str  # "contains[1]": type and position among the case's graders
    passed: bool
    reason: str = ""  # why it failed (or what a judge said)


class Judge(Protocol):
    async def verdict(self, model: str, rubric: str, case: Case, answer: str) -> tuple[bool, str]:
        """Whether `answer` meets `rubric`, and the judge's reason."""
        ...


async def grade(case: Case, seen: Observation, judge: Judge | None, judge_model: str | None) -> list[Verdict]:
    """Every grader's verdict on a case; a case that errored fails each of them, naming the error."""
    verdicts = []
    for index, grader in enumerate(case.graders):
        name = f"{grader.type}[{index}]"
        if seen.error:
            verdicts.append(Verdict(name, False, f"not graded: {seen.error}"))
        elif isinstance(grader, Rubric):
            verdicts.append(await _rubric(name, grader, case, seen, judge, judge_model))
        else:
            passed, reason = check(grader, case, seen)
            verdicts.append(Verdict(name, passed, "" if passed else reason))
    return verdicts


def check(grader: Grader, case: Case, seen: Observation) -> tuple[bool, str]:
    """A deterministic grader's verdict: (passed, why it failed)."""
    answer = seen.answer
    if isinstance(grader, Exact):
        want = grader.value if grader.value is not None else case.expected or ""
        got, wanted = answer.strip(), want.strip()
        if not grader.case_sensitive:
            got, wanted = got.casefold(), wanted.casefold()
        return got == wanted, f"expected exactly {_quote(want)}, got {_quote(answer)}"
    if isinstance(grader, Contains):
        want = grader.value if grader.value is not None else case.expected or ""
        hay, needle = (answer, want) if grader.case_sensitive else (answer.casefold(), want.casefold())
        return needle in hay, f"expected the answer to contain {_quote(want)}, got {_quote(answer)}"
    if isinstance(grader, Regex):
        flags = re.IGNORECASE if grader.ignore_case else 0
        match = (re.fullmatch if grader.fullmatch else re.search)(grader.pattern, answer, flags)
        how = "to match" if grader.fullmatch else "to contain a match of"
        return match is not None, f"expected the answer {how} /{grader.pattern}/, got {_quote(answer)}"
    if isinstance(grader, JsonSchema):
        return _json_schema(grader, seen)
    if isinstance(grader, ToolCalled):
        return _tool_called(grader, seen)
    if isinstance(grader, ToolNotCalled):
        calls = [call for call in seen.tool_calls if call.name == grader.name]
        return not calls, f"{grader.name} was called {len(calls)} time(s)"
    if isinstance(grader, MaxCost):
        problems = []
        if grader.usd is not None and seen.cost_usd > grader.usd:
            problems.append(f"cost ${seen.cost_usd:.6f} is over ${grader.usd:.6f}")
        if grader.tokens is not None and seen.tokens > grader.tokens:
            problems.append(f"{seen.tokens} tokens are over {grader.tokens}")
        return not problems, "; ".join(problems)
    if isinstance(grader, MaxLatency):
        problems = []
        if grader.seconds is not None and seen.latency_s > grader.seconds:
            problems.append(f"took {seen.latency_s:.3f}s, over {grader.seconds:g}s")
        if grader.first_event_seconds is not None and seen.first_event_s > grader.first_event_seconds:
            problems.append(f"waited {seen.first_event_s:.3f}s for a first event, over {grader.first_event_seconds:g}s")
        return not problems, "; ".join(problems)
    raise TypeError(f"{grader.type} is not a deterministic grader")


def _json_schema(grader: JsonSchema, seen: Observation) -> tuple[bool, str]:
    value: Any = seen.structured_output
    if value is None:
        try:
            value = json.loads(seen.answer)
        except json.JSONDecodeError as exc:
            return False, f"the answer is not JSON ({exc.msg}): {_quote(seen.answer)}"
    validator = jsonschema.validators.validator_for(grader.json_schema)(grader.json_schema)
    problems = sorted(validator.iter_errors(value), key=lambda error: list(error.absolute_path))
    if not problems:
        return True, ""
    first = problems[0]
    where = "/".join(str(part) for part in first.absolute_path) or "(the answer)"
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return False, f"does not fit the schema at {where}: {first.message}{more}"


def _tool_called(grader: ToolCalled, seen: Observation) -> tuple[bool, str]:
    calls = [call for call in seen.tool_calls if call.name == grader.name]
    if not calls:
        called = sorted({call.name for call in seen.tool_calls})
        return False, f"{grader.name} was not called (called: {', '.join(called) or 'no tool'})"
    if grader.arguments is None:
        return True, ""
    wanted = grader.arguments
    if any(
        all(key in call.arguments and call.arguments[key] == value for key, value in wanted.items()) for call in calls
    ):
        return True, ""
    tried = "; ".join(json.dumps(call.arguments, sort_keys=True) for call in calls)
    return False, f"{grader.name} was called, but not with {json.dumps(wanted, sort_keys=True)} (called with {tried})"


async def _rubric(
    name: str, grader: Rubric, case: Case, seen: Observation, judge: Judge | None, default_model: str | None
) -> Verdict:
    model = grader.model or default_model
    if judge is None or not model:
        return Verdict(name, False, "no judge model: give the grader a model, the dataset judge_model or --judge-model")
    try:
        passed, reason = await judge.verdict(model, grader.rubric, case, seen.answer)
    except Exception as exc:  # noqa: BLE001 - a judge that fails fails its grader, not the run
        return Verdict(name, False, f"the judge {model!r} failed: {exc}")
    return Verdict(name, passed, reason)


def _quote(text: str) -> str:
    flat = " ".join(text.split())
    return json.dumps(flat if len(flat) <= SHOWN else flat[:SHOWN] + "…", ensure_ascii=False)
