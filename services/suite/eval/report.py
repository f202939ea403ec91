"""An eval run's report: per agent the pass rate (overall and per grader type), cost, tokens, latency
percentiles and the failures with their transcripts; with two agents, the cases whose outcome changed.
Written as a table for people, JSON (stdout with --json, or --report PATH) and JUnit XML (--junit PATH).
"""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from services.suite.eval.dataset import Dataset
from services.suite.eval.runner import CaseResult


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (0 for no values): p50 of [1, 2, 3, 4] is 2, p99 is 4."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def agent_summary(results: list[CaseResult]) -> dict[str, Any]:
    graders: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # type -> [passed, total]
    for result in results:
        for verdict in result.verdicts:
            counts = graders[verdict.grader.partition("[")[0]]
            counts[0] += verdict.passed
            counts[1] += 1
    passed = sum(result.passed for result in results)
    latencies = [r.seen.latency_s for r in results if r.seen.session_id]
    first_events = [r.seen.first_event_s for r in results if r.seen.session_id]
    return {
        "cases": len(results),
        "passed": passed,
        "failed": len(results) - passed,
        "errored": sum(bool(r.seen.error) for r in results),
        "pass_rate": passed / len(results) if results else 0.0,
        "graders": {
            name: {"passed": ok, "total": total, "pass_rate": ok / total}
            for name, (ok, total) in sorted(graders.items())
        },
        "cost_usd": sum(r.seen.cost_usd for r in results),
        "input_tokens": sum(r.seen.input_tokens for r in results),
        "output_tokens": sum(r.seen.output_tokens for r in results),
        "latency_s": {"p50": percentile(latencies, 50), "p99": percentile(latencies, 99)},
        "first_event_s": {"p50": percentile(first_events, 50), "p99": percentile(first_events, 99)},
    }


def case_json(result: CaseResult, transcript: bool) -> dict[str, Any]:
    seen = result.seen
    entry: dict[str, Any] = {
        "id": result.case.id,
        "passed": result.passed,
        "session_id": seen.session_id,
        "answer": seen.answer,
        "error": seen.error,
        "graders": [{"grader": v.grader, "passed": v.passed, "reason": v.reason} for v in result.verdicts],
        "tool_calls": [call.name for call in seen.tool_calls],
        "input_tokens": seen.input_tokens,
        "output_tokens": seen.output_tokens,
        "cost_usd": seen.cost_usd,
        "latency_s": seen.latency_s,
        "first_event_s": seen.first_event_s,
    }
    if transcript:
        entry["transcript"] = seen.transcript
    return entry


def changed_cases(baseline: list[CaseResult], other: list[CaseResult]) -> list[dict[str, Any]]:
    """Cases whose pass/fail differs between two agents' runs of the same dataset (in case order)."""
    theirs = {result.case.id: result for result in other}
    return [
        {"id": mine.case.id, "passed": mine.passed, "against_passed": theirs[mine.case.id].passed}
        for mine in baseline
        if mine.case.id in theirs and theirs[mine.case.id].passed != mine.passed
    ]


def build(dataset: Dataset, run_id: str, results: dict[str, list[CaseResult]]) -> dict[str, Any]:
    """The whole report as JSON-ready data; the first agent is the one under test."""
    agents = list(results)
    report: dict[str, Any] = {
        "run_id": run_id,
        "dataset": {"name": dataset.name, "path": dataset.path, "cases": len(dataset.cases)},
        "agent": agents[0],
        "passed": all(result.passed for result in results[agents[0]]),
        "agents": {
            agent: {
                "summary": agent_summary(cases),
                "cases": [case_json(result, transcript=not result.passed) for result in cases],
            }
            for agent, cases in results.items()
        },
    }
    if len(agents) > 1:
        report["against"] = agents[1]
        report["changed"] = changed_cases(results[agents[0]], results[agents[1]])
    return report


def write_json(report: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def junit(report: dict[str, Any]) -> ET.ElementTree[ET.Element]:
    """JUnit XML: a testsuite per agent, a testcase per case; a failed case has one <failure> whose
    message names the failed graders, with every reason (and the transcript) in its text."""
    dataset = report["dataset"]["name"]
    root = ET.Element("testsuites", name=f"cogmesh eval {dataset}")
    total = failures = 0
    elapsed = 0.0
    for agent, data in report["agents"].items():
        cases = data["cases"]
        suite_time = sum(case["latency_s"] for case in cases)
        failed = sum(not case["passed"] for case in cases)
        suite = ET.SubElement(
            root,
            "testsuite",
            name=f"{dataset} [{agent}]",
            tests=str(len(cases)),
            failures=str(failed),
            errors="0",
            skipped="0",
            time=f"{suite_time:.3f}",
        )
        properties = ET.SubElement(suite, "properties")
        ET.SubElement(properties, "property", name="eval_run", value=report["run_id"])
        ET.SubElement(properties, "property", name="agent", value=agent)
        for case in cases:
            element = ET.SubElement(
                suite, "testcase", classname=f"{dataset}.{agent}", name=case["id"], time=f"{case['latency_s']:.3f}"
            )
            if case["passed"]:
                continue
            failed_graders = [g for g in case["graders"] if not g["passed"]]
            if case["error"]:
                message = f"error: {case['error']}"
            else:
                message = "failed: " + ", ".join(g["grader"] for g in failed_graders)
            details = [f"{g['grader']}: {g['reason']}" for g in failed_graders]
            details += [f"session: {case['session_id']}", f"answer: {case['answer']}"]
            details += ["transcript:", json.dumps(case.get("transcript", []), indent=2, ensure_ascii=False)]
            failure = ET.SubElement(
                element, "failure", message=_attribute(message), type="error" if case["error"] else "grader"
            )
            failure.text = _text("\n".join(details))
        total += len(cases)
        failures += failed
        elapsed += suite_time
    root.set("tests", str(total))
    root.set("failures", str(failures))
    root.set("errors", "0")
    root.set("time", f"{elapsed:.3f}")
    ET.indent(root)
    return ET.ElementTree(root)


def write_junit(report: dict[str, Any], path: Path) -> None:
    junit(report).write(path, encoding="utf-8", xml_declaration=True)


def _text(text: str) -> str:
    """XML 1.0 cannot hold most control characters at all: drop them (an answer may carry any)."""
    return "".join(ch for ch in text if ch in "\t\n\r" or ord(ch) >= 0x20)


def _attribute(text: str) -> str:
    flat = " ".join(_text(text).split())
    return flat if len(flat) <= 500 else flat[:500] + "…"


def print_table(report: dict[str, Any], out: Console) -> None:
    """The human report: a summary per agent, the failures of the agent under test, the changed cases."""
    agents = list(report["agents"])
    summary = Table(title=f"eval {report['dataset']['name']} · run {report['run_id']}", title_justify="left")
    summary.add_column("")
    for agent in agents:
        summary.add_column(agent, justify="right")
    sums = [report["agents"][agent]["summary"] for agent in agents]
    summary.add_row("passed", *(f"{s['passed']}/{s['cases']} ({s['pass_rate']:.0%})" for s in sums))
    for grader in sorted({name for s in sums for name in s["graders"]}):
        cells = []
        for s in sums:
            g = s["graders"].get(grader)
            cells.append(f"{g['passed']}/{g['total']} ({g['pass_rate']:.0%})" if g else "-")
        summary.add_row(f"  {grader}", *cells)
    summary.add_row("cost", *(f"${s['cost_usd']:.6f}" for s in sums))
    summary.add_row("tokens in/out", *(f"{s['input_tokens']}/{s['output_tokens']}" for s in sums))
    summary.add_row("latency p50/p99", *(f"{s['latency_s']['p50']:.3f}s/{s['latency_s']['p99']:.3f}s" for s in sums))
    summary.add_row(
        "first event p50/p99", *(f"{s['first_event_s']['p50']:.3f}s/{s['first_event_s']['p99']:.3f}s" for s in sums)
    )
    out.print(summary)
    for agent in agents:
        failed = [case for case in report["agents"][agent]["cases"] if not case["passed"]]
        if not failed:
            continue
        out.print(f"[bold red]failures of {escape(agent)}[/bold red]")
        for case in failed:
            out.print(f"  [bold]{escape(case['id'])}[/bold]  session {escape(case['session_id'] or '-')}")
            if case["error"]:
                out.print(f"    error: {escape(case['error'])}")
            for grader in case["graders"]:
                if not grader["passed"] and not case["error"]:
                    out.print(f"    {escape(grader['grader'])}: {escape(grader['reason'])}")
            for turn in case.get("transcript", []):
                out.print(f"    [dim]user:[/dim] {escape(turn['user'])}")
                for event in turn["events"]:
                    out.print(f"    [dim]{escape(_event_line(event))}[/dim]")
    if "changed" in report:
        changed = report["changed"]
        out.print(f"[bold]changed between {escape(agents[0])} and {escape(agents[1])}: {len(changed)}[/bold]")
        for case in changed:
            before = "pass" if case["passed"] else "FAIL"
            after = "pass" if case["against_passed"] else "FAIL"
            out.print(f"  {escape(case['id'])}: {before} with {escape(agents[0])}, {after} with {escape(agents[1])}")


def _event_line(event: dict[str, Any]) -> str:
    rest = {key: value for key, value in event.items() if key not in ("seq", "kind")}
    return f"{event['kind']} {json.dumps(rest, ensure_ascii=False)}" if rest else str(event["kind"])
