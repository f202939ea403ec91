"""`cogmesh eval DATASET --agent NAME[@REF] [--against OTHER]`: the command's options and its run.

Exit codes: 0 when every case of the agent under test passed, 1 when any failed (or errored),
2 for a usage or dataset error (and, from the CLI, when the gateway cannot be reached).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from cogmesh.client import GatewayClient
from services.kit.config import Settings
from services.kit.yaml_config import ConfigError
from services.suite.eval import dataset as datasets
from services.suite.eval import report as reports
from services.suite.eval.dataset import Rubric
from services.suite.eval.judge import CatalogModels, ModelJudge
from services.suite.eval.runner import AgentRef, AgentUnknown, ProgressDisplay, RunSettings, new_run_id, run_dataset

USAGE_ERROR = 2


def _agent(text: str) -> AgentRef:
    try:
        return AgentRef.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {text}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dataset", type=Path, help="cases to run: a .yaml file, or .jsonl (one case per line)")
    parser.add_argument(
        "--agent", type=_agent, default=AgentRef("default"), metavar="NAME[@REF]", help="the agent under test"
    )
    parser.add_argument(
        "--against", type=_agent, default=None, metavar="NAME[@REF]", help="also run this agent and compare"
    )
    parser.add_argument("--concurrency", type=_positive, default=4, help="cases run at once (default 4)")
    parser.add_argument("--judge-model", default="", help="model (name or alias) for rubric graders naming none")
    parser.add_argument("--junit", type=Path, default=None, metavar="PATH", help="write JUnit XML here")
    parser.add_argument("--report", type=Path, default=None, metavar="PATH", help="write the JSON report here")
    parser.add_argument("--turn-timeout", type=_seconds, default=300.0, help="seconds each turn may take")
    parser.add_argument("--connect-timeout", type=_seconds, default=5.0, help="seconds to wait for the gateway")


async def run(
    args: argparse.Namespace,
    client: GatewayClient,
    out: Console,
    err: Console,
    providers_file: Path | None = None,
) -> int:
    """Run the eval `args` describe through `client` (closed at the end). `providers_file`: where the
    rubric judge finds its provider endpoints (default: COGMESH_PROVIDERS_FILE)."""
    async with client:
        try:
            dataset = datasets.load(args.dataset)
        except ConfigError as exc:
            return _usage_error(args, out, err, "the dataset is invalid", [str(p) for p in exc.problems])
        agents = [args.agent] + ([args.against] if args.against else [])
        if len({str(agent) for agent in agents}) < len(agents):
            return _usage_error(args, out, err, "--against names the agent under test", [])
        judge_model = args.judge_model or dataset.judge_model
        unjudged = [
            f"{case.id}: {grader.type}[{index}]"
            for case in dataset.cases
            for index, grader in enumerate(case.graders)
            if isinstance(grader, Rubric) and not grader.model and not judge_model
        ]
        if unjudged:
            return _usage_error(
                args,
                out,
                err,
                "rubric graders without a model: give --judge-model or the dataset's judge_model",
                unjudged,
            )
        await client.wait_ready(args.connect_timeout)
        models = None
        if any(isinstance(g, Rubric) for case in dataset.cases for g in case.graders):
            models = CatalogModels(client, providers_file or Settings().providers_file)
        settings = RunSettings(
            concurrency=args.concurrency,
            turn_timeout_s=args.turn_timeout,
            judge=ModelJudge(models) if models is not None else None,
            judge_model=judge_model or None,
        )
        run_id = new_run_id()
        if not args.json:
            err.print(f"eval run {run_id}: {len(dataset.cases)} case(s) × {len(agents)} agent(s)", markup=False)
        try:
            with ProgressDisplay(len(dataset.cases) * len(agents), err.file) as progress:
                results = await run_dataset(client, dataset, agents, run_id, settings, progress)
        except AgentUnknown as exc:
            return _usage_error(args, out, err, str(exc), [])
        finally:
            if models is not None:
                await models.close()
    report = reports.build(dataset, run_id, results)
    if args.report is not None:
        reports.write_json(report, args.report)
    if args.junit is not None:
        reports.write_junit(report, args.junit)
    if args.json:
        out.file.write(json.dumps(report, ensure_ascii=False) + "\n")
    else:
        reports.print_table(report, out)
        err.print(f"find the run's sessions: cogmesh sessions list --label eval_run={run_id}", markup=False)
    return 0 if report["passed"] else 1


def _usage_error(args: argparse.Namespace, out: Console, err: Console, message: str, problems: list[str]) -> int:
    if args.json:
        error: dict[str, Any] = {"code": "INVALID_ARGUMENT", "message": message, "problems": problems}
        out.file.write(json.dumps({"error": error}) + "\n")
    else:
        err.print(f"[red]error:[/red] {escape(message)}")
        for problem in problems:
            err.print(f"  {problem}", markup=False, highlight=False)
    return USAGE_ERROR
