"""`cogmesh eval`'s parts without a suite: dataset validation, observations of a turn's events, each
grader, the rubric judge's prompt and verdicts, percentiles and the JUnit XML (services/suite/eval)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import struct_pb2

from cogmesh.common.v1 import events_pb2
from services.kit.yaml_config import ConfigError
from services.suite.eval import dataset as datasets
from services.suite.eval import report as reports
from services.suite.eval.dataset import Case
from services.suite.eval.graders import Verdict, check, grade
from services.suite.eval.judge import ModelJudge, judge_prompt, parse_verdict
from services.suite.eval.observe import Observation, ToolCall, Turn, observe
from services.suite.eval.runner import AgentRef, CaseResult
from tests.fakes.models import ScriptedModel, text


def case(**fields: Any) -> Case:
    fields.setdefault("input", "What is 6 * 7?")
    return Case.model_validate(fields)


def grader(spec: dict[str, Any]) -> Any:
    return case(graders=[spec], expected=spec.pop("expected", None)).graders[0]


def seen(answer: str = "6 * 7 = 42.", **fields: Any) -> Observation:
    return Observation(session_id="s1", answer=answer, **fields)


# --------------------------------------------------------------------------- deterministic graders


def test_exact_compares_stripped_text_with_the_value_or_expected() -> None:
    assert check(grader({"type": "exact", "value": "6 * 7 = 42."}), case(), seen("  6 * 7 = 42.\n"))[0]
    with_expected = case(expected="6 * 7 = 42.", graders=[{"type": "exact"}])
    assert check(with_expected.graders[0], with_expected, seen())[0]
    passed, reason = check(with_expected.graders[0], with_expected, seen("42"))
    assert not passed and reason == 'expected exactly "6 * 7 = 42.", got "42"'
    assert check(grader({"type": "exact", "value": "ABC", "case_sensitive": False}), case(), seen("abc"))[0]


def test_contains_and_regex() -> None:
    assert check(grader({"type": "contains", "value": "42"}), case(), seen())[0]
    passed, reason = check(grader({"type": "contains", "value": "43"}), case(), seen())
    assert not passed and reason == 'expected the answer to contain "43", got "6 * 7 = 42."'
    assert check(grader({"type": "contains", "value": "SAID", "case_sensitive": False}), case(), seen("you said"))[0]
    assert check(grader({"type": "regex", "pattern": r"=\s*42\b"}), case(), seen())[0]
    assert not check(grader({"type": "regex", "pattern": r"42", "fullmatch": True}), case(), seen())[0]
    assert check(grader({"type": "regex", "pattern": r"6 \* 7 = 42\.", "fullmatch": True}), case(), seen())[0]
    assert check(grader({"type": "regex", "pattern": "YOU", "ignore_case": True}), case(), seen("you"))[0]


def test_json_schema_reads_structured_output_or_the_answer_as_json() -> None:
    schema = {"type": "object", "required": ["total"], "properties": {"total": {"type": "number"}}}
    spec = grader({"type": "json_schema", "schema": schema})
    assert check(spec, case(), seen('{"total": 42}'))[0]
    assert check(spec, case(), seen("not json", structured_output={"total": 1.5}))[0]
    passed, reason = check(spec, case(), seen('{"total": "many"}'))
    assert not passed and reason == "does not fit the schema at total: 'many' is not of type 'number'"
    passed, reason = check(spec, case(), seen("forty-two"))
    assert not passed and reason.startswith("the answer is not JSON (Expecting value)")


def test_tool_called_with_some_arguments_and_tool_not_called() -> None:
    calls = [ToolCall("calculator", {"expression": "6 * 7", "precision": 2}, True)]
    assert check(grader({"type": "tool_called", "name": "calculator"}), case(), seen(tool_calls=calls))[0]
    with_args = grader({"type": "tool_called", "name": "calculator", "arguments": {"expression": "6 * 7"}})
    assert check(with_args, case(), seen(tool_calls=calls))[0]
    other_args = grader({"type": "tool_called", "name": "calculator", "arguments": {"expression": "7 * 6"}})
    passed, reason = check(other_args, case(), seen(tool_calls=calls))
    assert not passed and 'not with {"expression": "7 * 6"}' in reason
    passed, reason = check(grader({"type": "tool_called", "name": "search"}), case(), seen(tool_calls=calls))
    assert not passed and reason == "search was not called (called: calculator)"
    passed, reason = check(grader({"type": "tool_not_called", "name": "calculator"}), case(), seen(tool_calls=calls))
    assert not passed and reason == "calculator was called 1 time(s)"
    assert check(grader({"type": "tool_not_called", "name": "calculator"}), case(), seen())[0]


def test_cost_and_latency_ceilings() -> None:
    spent = seen(cost_usd=0.02, input_tokens=900, output_tokens=200, latency_s=2.5, first_event_s=0.4)
    assert check(grader({"type": "max_cost", "usd": 0.05, "tokens": 1100}), case(), spent)[0]
    passed, reason = check(grader({"type": "max_cost", "usd": 0.01, "tokens": 1000}), case(), spent)
    assert not passed and reason == "cost $0.020000 is over $0.010000; 1100 tokens are over 1000"
    assert check(grader({"type": "max_latency", "seconds": 3, "first_event_seconds": 0.5}), case(), spent)[0]
    passed, reason = check(grader({"type": "max_latency", "first_event_seconds": 0.1}), case(), spent)
    assert not passed and reason == "waited 0.400s for a first event, over 0.1s"


async def test_a_case_that_errored_fails_every_grader_naming_the_error() -> None:
    errored = case(graders=[{"type": "contains", "value": "42"}, {"type": "max_cost", "usd": 1}])
    verdicts = await grade(errored, Observation(error="CreateSession failed: UNAVAILABLE: down"), None, None)
    assert verdicts == [
        Verdict("contains[0]", False, "not graded: CreateSession failed: UNAVAILABLE: down"),
        Verdict("max_cost[1]", False, "not graded: CreateSession failed: UNAVAILABLE: down"),
    ]


# --------------------------------------------------------------------------- the rubric judge


def test_parse_verdict_takes_a_json_object_or_a_leading_pass_or_fail() -> None:
    assert parse_verdict('Sure. {"pass": true, "reason": "right"}') == (True, "right")
    assert parse_verdict('```json\n{"pass": false}\n```') == (False, "")
    assert parse_verdict("FAIL: the product is wrong") == (False, "the product is wrong")
    assert parse_verdict("Pass - fine") == (True, "fine")
    with pytest.raises(ValueError, match="not a verdict"):
        parse_verdict("I think it is probably fine")


async def test_the_judge_sends_messages_answer_reference_and_rubric() -> None:
    model = ScriptedModel([text('{"pass": ', 'false, "reason": "wrong product"}')])

    async def models(name: str) -> ScriptedModel:
        assert name == "judge-alias"
        return model

    judged = case(input=["Hi.", "What is 6 * 7?"], expected="42")
    assert await ModelJudge(models).verdict("judge-alias", "Right product.", judged, "43") == (False, "wrong product")
    ((messages, tools),) = model.calls
    assert tools == [] and messages == judge_prompt("Right product.", judged, "43")
    prompt = messages[-1].content
    assert "User message 1:\nHi." in prompt and "User message 2:\nWhat is 6 * 7?" in prompt
    assert (
        "Reference answer:\n42" in prompt
        and "Assistant's answer:\n43" in prompt
        and "Rubric:\nRight product." in prompt
    )


async def test_a_rubric_without_a_judge_model_or_with_a_failing_judge_fails_its_grader() -> None:
    judged = case(graders=[{"type": "rubric", "rubric": "Right."}])
    (verdict,) = await grade(judged, seen(), None, None)
    assert not verdict.passed and verdict.reason.startswith("no judge model")

    async def broken(name: str) -> ScriptedModel:
        raise LookupError(f"the gateway's catalogue has no model {name!r}")

    (verdict,) = await grade(judged, seen(), ModelJudge(broken), "nosuch")
    assert verdict == Verdict(
        "rubric[0]", False, "the judge 'nosuch' failed: the gateway's catalogue has no model 'nosuch'"
    )


# --------------------------------------------------------------------------- observations of events


def event(seq: int, **payload: Any) -> events_pb2.RuntimeEvent:
    return events_pb2.RuntimeEvent(session_id="s1", turn_id="t1", seq=seq, **payload)


def test_observe_collects_tool_calls_usage_and_the_last_answer() -> None:
    arguments = struct_pb2.Struct()
    arguments.update({"expression": "6 * 7"})
    first = Turn(
        "Hi.",
        [
            event(1, usage=events_pb2.UsageReport(input_tokens=5, output_tokens=2, cost_usd=0.001)),
            event(2, final=events_pb2.FinalResult(text="Hello.")),
        ],
        wall_s=0.5,
        first_event_s=0.1,
    )
    metrics = events_pb2.TurnMetrics(input_tokens=30, output_tokens=8, cost_usd=0.01)
    second = Turn(
        "What is 6 * 7?",
        [
            event(
                3,
                tool_call_started=events_pb2.ToolCallStarted(
                    name="calculator", arguments=arguments, correlation_id="c1"
                ),
            ),
            event(4, tool_call_finished=events_pb2.ToolCallFinished(name="calculator", correlation_id="c1", ok=True)),
            event(5, assistant_delta=events_pb2.AssistantDelta(text="6 * 7 = 42.")),
            event(6, final=events_pb2.FinalResult(text="6 * 7 = 42.", metrics=metrics)),
        ],
        wall_s=1.0,
        first_event_s=0.3,
    )
    got = observe([first, second], "s1")
    assert (got.answer, got.error, got.session_id) == ("6 * 7 = 42.", "", "s1")
    assert got.tool_calls == [ToolCall("calculator", {"expression": "6 * 7"}, True)]
    assert (got.input_tokens, got.output_tokens) == (35, 10) and got.cost_usd == pytest.approx(0.011)
    assert (got.latency_s, got.first_event_s) == (1.5, 0.3)
    assert [turn["user"] for turn in got.transcript] == ["Hi.", "What is 6 * 7?"]
    assert [e["kind"] for e in got.transcript[1]["events"]] == ["tool_call_started", "tool_call_finished", "final"]


def test_observe_names_a_failed_or_paused_turn() -> None:
    failed = Turn(
        "x", [event(1, error=events_pb2.TurnError(kind=events_pb2.ERROR_KIND_BUDGET_EXCEEDED, message="over"))]
    )
    assert observe([failed]).error == "the turn failed: BUDGET_EXCEEDED: over"
    paused = Turn(
        "x",
        [
            event(1, approval_required=events_pb2.ApprovalRequired(action_name="calculator", interrupt_id="i1")),
            event(2, status=events_pb2.StatusUpdate(state=events_pb2.TURN_STATE_PAUSED, interrupt_id="i1")),
        ],
    )
    assert observe([paused]).error == "the turn paused waiting for approval, which an eval cannot give"
    assert observe([], error="CreateSession failed: X").error == "CreateSession failed: X"


# --------------------------------------------------------------------------- datasets


def test_yaml_dataset_problems_name_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "cases.yaml"
    path.write_text(
        "graders:\n"
        "  - type: contains\n"
        "cases:\n"
        "  - id: a\n"
        "    input: hi\n"
        "    expected: hello\n"
        "  - id: a\n"
        "    input: hi\n"
        "    graders: [{type: exact}]\n"
    )
    with pytest.raises(ConfigError) as raised:
        datasets.load(path)
    assert [str(p) for p in raised.value.problems] == [
        f"{path}:7: cases[1]: the dataset's graders[0] (contains) needs `expected`",
        f"{path}:7: cases[1].id: duplicate case id 'a' (first at cases[0])",
        f"{path}:9: cases[1].graders[0].value: give a value, or the case's `expected`",
    ]


def test_yaml_dataset_shared_graders_and_default_ids(tmp_path: Path) -> None:
    path = tmp_path / "cases.yaml"
    path.write_text(
        "judge_model: mini\n"
        "graders: [{type: max_cost, usd: 0.1}]\n"
        "cases:\n"
        "  - input: hi\n"
        "    expected: hello\n"
        "  - input: [one, two]\n"
        "    graders: [{type: regex, pattern: o}]\n"
    )
    loaded = datasets.load(path)
    assert (loaded.name, loaded.judge_model) == ("cases", "mini")
    assert [c.id for c in loaded.cases] == ["case-1", "case-2"]
    assert [g.type for g in loaded.cases[0].graders] == [
        "max_cost"
    ]  # `expected` alone is an exact match only without graders
    assert [g.type for g in loaded.cases[1].graders] == ["regex", "max_cost"]
    assert loaded.cases[1].messages == ["one", "two"]


def test_a_case_with_expected_and_no_graders_is_an_exact_match(tmp_path: Path) -> None:
    path = tmp_path / "cases.jsonl"
    path.write_text(
        '{"input": "hi", "expected": "hello"}\n'
        "\n"
        '{"id": "x", "input": "yo", "graders": [{"type": "contains", "value": "y"}]}\n'
    )
    loaded = datasets.load(path)
    assert [c.id for c in loaded.cases] == ["line-1", "x"]
    assert [g.type for g in loaded.cases[0].graders] == ["exact"]


def test_jsonl_problems_name_their_line(tmp_path: Path) -> None:
    path = tmp_path / "cases.jsonl"
    path.write_text(
        '{"id": "a", "input": "hi"}\n'
        '{"id": "b", "input": "hi", "graders": [{"type": "json_schema", "schema": {"type": 3}}]}\n'
        "{oops\n"
        '{"id": "c", "input": "hi", "scope": {"End": "u"}, "expected": "x"}\n'
    )
    with pytest.raises(ConfigError) as raised:
        datasets.load(path)
    problems = [str(p) for p in raised.value.problems]
    assert problems[0] == f"{path}:1: graders: give at least one grader, or `expected` (graded as an exact match)"
    assert problems[1].startswith(f"{path}:2: graders[0].schema: not a valid JSON schema:")
    assert problems[2].startswith(f"{path}:3: not JSON:")
    assert problems[3].startswith(f"{path}:4: scope: scope[End]: key must match")


def test_agent_refs() -> None:
    assert AgentRef.parse("default") == AgentRef("default")
    assert str(AgentRef.parse("support@v3")) == "support@v3"
    assert AgentRef.parse("support@prod").ref == "prod"
    for bad in ("", "@v1", "support@", "sup port", "a@b@c"):
        with pytest.raises(ValueError):
            AgentRef.parse(bad)


# --------------------------------------------------------------------------- reports


def test_percentiles_are_nearest_rank() -> None:
    assert reports.percentile([], 50) == 0.0
    assert reports.percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.0
    assert reports.percentile([4.0, 1.0, 3.0, 2.0], 99) == 4.0
    assert reports.percentile([7.0], 99) == 7.0


def test_junit_xml_has_a_testcase_per_case_and_a_failure_naming_graders(tmp_path: Path) -> None:
    good, bad = case(id="good", expected="x"), case(id="bad", expected="x")
    results = {
        "default": [
            CaseResult(good, "default", seen("x", latency_s=0.25), [Verdict("exact[0]", True)]),
            CaseResult(bad, "default", seen("y\x00", latency_s=0.5), [Verdict("exact[0]", False, "expected x")]),
        ],
        "other": [
            CaseResult(
                good,
                "other",
                Observation(error="SendMessage failed: UNAVAILABLE: down"),
                [Verdict("exact[0]", False, "not graded")],
            ),
            CaseResult(bad, "other", seen("x"), [Verdict("exact[0]", True)]),
        ],
    }
    loaded = datasets.Dataset(name="tiny", path="tiny.yaml", cases=[good, bad])
    report = reports.build(loaded, "run1", results)
    assert report["changed"] == [
        {"id": "good", "passed": True, "against_passed": False},
        {"id": "bad", "passed": False, "against_passed": True},
    ]
    path = tmp_path / "junit.xml"
    reports.write_junit(report, path)
    root = ET.parse(path).getroot()
    assert (root.get("tests"), root.get("failures")) == ("4", "2")
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["tiny [default]", "tiny [other]"]
    cases = {(s.get("name"), c.get("name")): c for s in suites for c in s.findall("testcase")}
    failure = cases[("tiny [default]", "bad")].find("failure")
    assert failure is not None and failure.get("message") == "failed: exact[0]" and failure.get("type") == "grader"
    assert failure.text is not None and "exact[0]: expected x" in failure.text and "\x00" not in failure.text
    error = cases[("tiny [other]", "good")].find("failure")
    assert error is not None and error.get("message") == "error: SendMessage failed: UNAVAILABLE: down"
    assert cases[("tiny [default]", "good")].get("time") == "0.250"
