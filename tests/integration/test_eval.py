"""`cogmesh eval` against a real in-process suite (the built-in local model): reports, JUnit XML,
--against, unknown agent versions, malformed datasets and the rubric judge on a fake OpenAI server.

The command runs as the `cogmesh` executable (exit codes, stdout) or through its package API in this
event loop (services/suite/eval/command.py), parsed by the real CLI parser either way.
"""

from __future__ import annotations

import asyncio
import io
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2
from rich.console import Console

from cogmesh.client import GatewayClient
from cogmesh.gateway.v1 import agents_pb2, agents_pb2_grpc
from services.suite.cli import parse
from services.suite.eval import command
from services.suite.inprocess import Suite
from tests.fakes.providers import FakeOpenAI, Reply

pytestmark = pytest.mark.asyncio(loop_scope="module")

COGMESH = str(Path(sys.executable).parent / "cogmesh")
EXAMPLE = Path(__file__).parents[2] / "services/suite/eval/examples/calculator.yaml"

DATASET = """\
name: arithmetic
cases:
  - id: multiply
    input: What is 17 * 23?
    expected: 17 * 23 = 391.
    graders:
      - type: exact
      - type: tool_called
        name: calculator
        arguments: {expression: 17 * 23}
  - id: wrong-on-purpose
    input: What is 6 * 7?
    graders:
      - type: contains
        value: "43"
      - type: tool_called
        name: calculator
  - id: chat
    input: [Hello., "How are you?"]
    graders:
      - type: tool_not_called
        name: calculator
"""


async def run_cogmesh(*argv: str) -> tuple[int, str, str]:
    """The real executable, in a process of its own, while this loop keeps serving the suite."""
    process = await asyncio.create_subprocess_exec(
        COGMESH, *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def run_eval(suite: Suite, *argv: str, providers_file: Path | None = None) -> tuple[int, str, str]:
    """The eval command in this loop, its arguments parsed by the CLI's parser: (exit code, stdout, stderr)."""
    args = parse(["eval", *argv, "--gateway", suite.gateway_address])
    out, err = io.StringIO(), io.StringIO()
    code = await command.run(
        args,
        GatewayClient(suite.gateway_address),
        Console(file=out, width=200, highlight=False),
        Console(file=err, width=200, highlight=False),
        providers_file=providers_file,
    )
    return code, out.getvalue(), err.getvalue()


def by_id(report: dict[str, Any], agent: str) -> dict[str, dict[str, Any]]:
    return {case["id"]: case for case in report["agents"][agent]["cases"]}


async def test_the_shipped_example_passes_against_the_default_agent(suite: Suite) -> None:
    code, out, err = await run_cogmesh("eval", str(EXAMPLE), "--agent", "default", "--gateway", suite.gateway_address)
    assert code == 0, out + err
    assert "4/4 (100%)" in out


async def test_a_failing_case_is_named_in_the_report_the_junit_xml_and_the_sessions(
    suite: Suite, tmp_path: Path
) -> None:
    dataset = tmp_path / "arithmetic.yaml"
    dataset.write_text(DATASET)
    junit, report_path = tmp_path / "junit.xml", tmp_path / "report.json"
    code, out, err = await run_cogmesh(
        "eval", str(dataset), "--gateway", suite.gateway_address, "--junit", str(junit), "--report", str(report_path)
    )
    assert code == 1, out + err
    assert "failures of default" in out and "wrong-on-purpose" in out

    report = json.loads(report_path.read_text())
    summary = report["agents"]["default"]["summary"]
    assert (summary["cases"], summary["passed"], summary["failed"]) == (3, 2, 1)
    assert summary["graders"]["contains"] == {"passed": 0, "total": 1, "pass_rate": 0.0}
    assert summary["graders"]["tool_called"] == {"passed": 2, "total": 2, "pass_rate": 1.0}
    assert summary["input_tokens"] > 0 and summary["latency_s"]["p99"] >= summary["latency_s"]["p50"] > 0
    cases = by_id(report, "default")
    failed = cases["wrong-on-purpose"]
    assert not failed["passed"] and failed["answer"] == "6 * 7 = 42."
    assert [g["grader"] for g in failed["graders"] if not g["passed"]] == ["contains[0]"]
    assert '"43"' in failed["graders"][0]["reason"]
    kinds = [event["kind"] for turn in failed["transcript"] for event in turn["events"]]
    assert "tool_call_started" in kinds and kinds[-1] == "final"
    assert cases["multiply"]["passed"] and "transcript" not in cases["multiply"]
    assert cases["chat"]["passed"]

    tree = ET.parse(junit)
    root = tree.getroot()
    assert root.tag == "testsuites" and (root.get("tests"), root.get("failures")) == ("3", "1")
    (testsuite,) = root.findall("testsuite")
    assert (testsuite.get("tests"), testsuite.get("failures")) == ("3", "1")
    testcases = {case.get("name"): case for case in testsuite.findall("testcase")}
    assert set(testcases) == {"multiply", "wrong-on-purpose", "chat"}
    assert testcases["multiply"].find("failure") is None
    failure = testcases["wrong-on-purpose"].find("failure")
    assert failure is not None and failure.get("message") == "failed: contains[0]"
    assert failure.text is not None and "6 * 7 = 42." in failure.text

    # Each case ran in a session of its own, labelled so the run can be found again.
    async with GatewayClient(suite.gateway_address) as client:
        page = await client.list_sessions(labels={"eval_run": report["run_id"]})
    labelled = {s.labels["eval_case"]: s for s in page.sessions}
    assert set(labelled) == {"multiply", "wrong-on-purpose", "chat"}
    assert labelled["wrong-on-purpose"].session_id == failed["session_id"]
    assert labelled["chat"].message_count >= 4  # two turns in one session: both messages and both answers


async def test_against_runs_both_agents_and_lists_the_cases_that_changed(suite: Suite) -> None:
    # `planner` has no calculator: the built-in model computes itself, so only tool_called tells them apart.
    code, out, _ = await run_eval(suite, str(EXAMPLE), "--agent", "default", "--against", "planner", "--json")
    report = json.loads(out)
    assert code == 0  # the agent under test passed; the other one only informs
    assert (report["agent"], report["against"]) == ("default", "planner")
    assert report["changed"] == [
        {"id": "multiply", "passed": True, "against_passed": False},
        {"id": "two-turns", "passed": True, "against_passed": False},
    ]
    planner = by_id(report, "planner")
    assert planner["multiply"]["answer"] == "17 * 23 = 391."
    assert "calculator was not called" in planner["multiply"]["graders"][1]["reason"]

    code, out, _ = await run_eval(suite, str(EXAMPLE), "--agent", "planner", "--against", "default")
    assert code == 1
    assert "changed between planner and default: 2" in out
    assert "multiply: FAIL with planner, pass with default" in out


async def test_a_case_that_cannot_finish_fails_with_its_error_named(suite: Suite, tmp_path: Path) -> None:
    dataset = tmp_path / "paused.jsonl"
    line = {"id": "needs-approval", "input": "What is 2 + 2?", "graders": [{"type": "contains", "value": "4"}]}
    dataset.write_text(json.dumps(line) + "\n")
    report_path = tmp_path / "report.json"
    code, _, _ = await run_eval(suite, str(dataset), "--agent", "careful", "--report", str(report_path))
    assert code == 1
    case = by_id(json.loads(report_path.read_text()), "careful")["needs-approval"]
    assert case["error"] == "the turn paused waiting for approval, which an eval cannot give"
    assert case["graders"] == [{"grader": "contains[0]", "passed": False, "reason": f"not graded: {case['error']}"}]


async def test_an_agent_version_the_gateway_does_not_know_is_a_usage_error(suite: Suite) -> None:
    code, _, err = await run_eval(suite, str(EXAMPLE), "--agent", "default@v2")
    assert code == 2
    assert "the gateway refuses agent 'default@v2'" in err and "built-in agent: it has no versions" in err
    code, _, err = await run_eval(suite, str(EXAMPLE), "--agent", "nosuch@3")
    assert code == 2 and "the gateway does not know agent 'nosuch@3'" in err
    code, _, err = await run_eval(suite, str(EXAMPLE), "--against", "nosuch")
    assert code == 2 and "does not know agent 'nosuch'" in err


async def test_a_malformed_dataset_exits_2_naming_file_line_and_field(suite: Suite, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "cases:\n"
        "  - id: one\n"
        "    input: hi\n"
        "    graders:\n"
        "      - type: regex\n"
        "        pattern: '(unclosed'\n"
        "  - id: two\n"
        "    input: hi\n"
        "    graders:\n"
        "      - {type: max_latency}\n"
    )
    code, out, err = await run_cogmesh("eval", str(bad), "--gateway", suite.gateway_address)
    assert code == 2, out + err
    assert f"{bad}:6: cases[0].graders[0].pattern: not a regular expression" in err
    assert f"{bad}:10: cases[1].graders[0]: give seconds, first_event_seconds or both" in err

    lines = tmp_path / "bad.jsonl"
    lines.write_text('{"id": "a", "input": "hi", "expected": "x"}\n{"id": "b", "input": "hi", "scope": 3}\n')
    code, _, err = await run_eval(suite, str(lines))
    assert code == 2
    assert f"{lines}:2: scope: Input should be a valid dictionary" in err


async def test_the_rubric_grader_asks_a_catalogue_model_through_the_providers_file(
    suite: Suite, tmp_path: Path
) -> None:
    dataset = tmp_path / "judged.yaml"
    dataset.write_text(
        "judge_model: mini\n"  # gpt-4o-mini of the shipped catalogue, at provider openai
        "cases:\n"
        "  - id: judged\n"
        "    input: What is 17 * 23?\n"
        "    expected: '391'\n"
        "    graders:\n"
        "      - type: rubric\n"
        "        rubric: The answer gives the right product.\n"
        "      - type: rubric\n"
        "        rubric: The answer is in French.\n"
    )
    async with FakeOpenAI() as openai:
        openai.then(
            Reply(text=['{"pass": true, ', '"reason": "391 is right"}']),
            Reply(text=['{"pass": false, "reason": "it is English"}']),
        )
        providers = tmp_path / "providers.yaml"
        providers.write_text(f"providers:\n  openai: {{base_url: '{openai.url}/v1', api_key_required: false}}\n")
        report_path = tmp_path / "report.json"
        code, _, _ = await run_eval(suite, str(dataset), "--report", str(report_path), providers_file=providers)
        asked = [request.json() for request in openai.model_requests]
    assert code == 1
    graders = by_id(json.loads(report_path.read_text()), "default")["judged"]["graders"]
    verdicts = sorted((g["passed"], g["reason"]) for g in graders)
    assert verdicts == [(False, "it is English"), (True, "391 is right")]
    assert {request["model"] for request in asked} == {"gpt-4o-mini"}
    prompts = " ".join(request["messages"][-1]["content"] for request in asked)
    assert "17 * 23 = 391." in prompts and "The answer is in French." in prompts and "Reference answer:\n391" in prompts


async def test_two_versions_of_a_stored_agent_side_by_side(suite: Suite) -> None:
    """--agent NAME@VERSION --against NAME@ALIAS: each side's sessions run that version."""
    async with grpc.aio.insecure_channel(suite.gateway_address) as channel:
        agents = agents_pb2_grpc.AgentServiceStub(channel)
        with_tool, without = struct_pb2.Struct(), struct_pb2.Struct()
        with_tool.update({"model": "local", "tools": ["calculator"], "system_prompt": "You compute."})
        without.update({"model": "local", "system_prompt": "You compute in your head."})
        await agents.CreateAgent(agents_pb2.CreateAgentRequest(name="evalcalc", definition=with_tool))
        await agents.UpdateAgent(agents_pb2.UpdateAgentRequest(name="evalcalc", definition=without))
        await agents.SetAgentAlias(agents_pb2.SetAgentAliasRequest(name="evalcalc", alias="next", version=2))
    code, out, _ = await run_eval(suite, str(EXAMPLE), "--agent", "evalcalc@1", "--against", "evalcalc@next", "--json")
    report = json.loads(out)
    assert code == 0, report  # version 1 (with the calculator) passes every case
    assert (report["agent"], report["against"]) == ("evalcalc@1", "evalcalc@next")
    assert [c["id"] for c in report["changed"]] == ["multiply", "two-turns"]  # only tool_called tells them apart
