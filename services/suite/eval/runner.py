"""Run a dataset's cases as turns through the gateway, a few at a time, and grade each.

Every case gets a new session per agent, opened with the case's scope and the labels
`eval_run=<run id>`, `eval_case=<case id>` and `eval_agent=<agent>`, so that a run's sessions can
be found again with ListSessions (`cogmesh sessions list --label eval_run=<run id>`). The case's
messages are sent as consecutive turns of that session; the last turn's answer is graded.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import re
import secrets
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO

import grpc
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from cogmesh.client import GatewayClient, GatewayError
from cogmesh.client.results import TurnResult
from services.suite.eval.dataset import Case, Dataset
from services.suite.eval.graders import Judge, Verdict, grade
from services.suite.eval.observe import Observation, Turn, observe

AGENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*")


@dataclass(frozen=True)
class AgentRef:
    """An agent as `--agent` names it: NAME, or NAME@REF (a version or an alias of it)."""

    name: str
    ref: str = ""

    @classmethod
    def parse(cls, text: str) -> AgentRef:
        name, at, ref = text.partition("@")
        if not AGENT_NAME.fullmatch(name):
            raise ValueError(f"expected NAME or NAME@VERSION, got {text!r}: the name is missing or malformed")
        if at and not AGENT_NAME.fullmatch(ref):
            raise ValueError(f"expected NAME@VERSION or NAME@ALIAS, got {text!r}: nothing usable after '@'")
        return cls(name, ref)

    def __str__(self) -> str:
        return f"{self.name}@{self.ref}" if self.ref else self.name


class AgentUnknown(Exception):
    """The gateway does not know the agent, or (NAME@REF) that version or alias of it: the run stops."""

    def __init__(self, agent: AgentRef, error: GatewayError):
        self.agent, self.error = agent, error
        if error.code != grpc.StatusCode.NOT_FOUND:
            message = f"the gateway refuses agent {str(agent)!r}: {error.message}"
        elif agent.ref:
            message = (
                f"the gateway does not know agent {str(agent)!r}: it has no version or alias {agent.ref!r} of "
                f"{agent.name!r} (or does not support agent versions): {error.message}"
            )
        else:
            message = f"the gateway does not know agent {agent.name!r}: {error.message}"
        super().__init__(message)


@dataclass
class CaseResult:
    case: Case
    agent: str
    seen: Observation
    verdicts: list[Verdict] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.seen.error and all(verdict.passed for verdict in self.verdicts)


@dataclass(frozen=True)
class RunSettings:
    concurrency: int = 4
    turn_timeout_s: float = 300.0
    judge: Judge | None = None
    judge_model: str | None = None  # for rubric graders that name none (--judge-model, else the dataset's)


def new_run_id() -> str:
    return f"{datetime.datetime.now(datetime.UTC):%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


async def run_dataset(
    client: GatewayClient,
    dataset: Dataset,
    agents: list[AgentRef],
    run_id: str,
    settings: RunSettings,
    progress: Callable[[CaseResult], None] = lambda result: None,
) -> dict[str, list[CaseResult]]:
    """Every case for every agent, at most `settings.concurrency` at once; results by agent, in case order.
    Raises AgentUnknown (after the cases in flight end) when the gateway does not know an agent."""
    slots = asyncio.Semaphore(settings.concurrency)
    unknown: list[AgentUnknown] = []

    async def one(agent: AgentRef, case: Case) -> CaseResult | None:
        async with slots:
            if unknown:
                return None  # the run is over: an agent is unknown
            try:
                seen = await run_case(client, agent, case, run_id, settings.turn_timeout_s)
            except AgentUnknown as exc:
                unknown.append(exc)
                return None
            verdicts = await grade(case, seen, settings.judge, settings.judge_model or dataset.judge_model)
            result = CaseResult(case, str(agent), seen, verdicts)
            progress(result)
            return result

    # Case by case, every agent in turn: an agent the gateway does not know stops the run at once.
    done = await asyncio.gather(*(one(agent, case) for case in dataset.cases for agent in agents))
    if unknown:
        raise unknown[0]
    results: dict[str, list[CaseResult]] = {str(agent): [] for agent in agents}
    for result in done:
        assert result is not None
        results[result.agent].append(result)
    return results


async def run_case(
    client: GatewayClient, agent: AgentRef, case: Case, run_id: str, turn_timeout_s: float
) -> Observation:
    """Run a case's turns in a new session; gateway errors end the case with the error named."""
    labels = {"eval_run": run_id, "eval_case": case.id, "eval_agent": str(agent)}
    try:
        session = await client.create_session(agent=str(agent), scope=case.scope, labels=labels)
    except GatewayError as exc:
        if _names_unknown_agent(exc):
            raise AgentUnknown(agent, exc) from exc
        return observe([], error=f"CreateSession failed: {_describe(exc)}")
    loop = asyncio.get_running_loop()
    turns: list[Turn] = []
    error = ""
    for message in case.messages:
        turn = Turn(message)
        turns.append(turn)
        started = loop.time()
        try:
            async for event in client.send_message(session.session_id, message, timeout_s=turn_timeout_s):
                if turn.first_event_s is None:
                    turn.first_event_s = loop.time() - started
                turn.events.append(event)
        except GatewayError as exc:
            error = f"SendMessage failed: {_describe(exc)}"
        turn.wall_s = loop.time() - started
        result = TurnResult(turn.events)
        if result.paused:  # nobody will answer it: give the turn up rather than leave the session waiting
            with contextlib.suppress(GatewayError):
                await client.cancel_turn(session.session_id)
        if error or not result.ok:
            break
    return observe(turns, session.session_id, error)


def _names_unknown_agent(exc: GatewayError) -> bool:
    if exc.code == grpc.StatusCode.NOT_FOUND and exc.reason == "AGENT_NOT_FOUND":
        return True
    # e.g. a subagent, or a NAME@REF a gateway refuses as a malformed agent name
    return exc.code == grpc.StatusCode.INVALID_ARGUMENT and any(field == "agent" for field, _ in exc.violations)


def _describe(exc: GatewayError) -> str:
    reason = f" ({exc.reason})" if exc.reason else ""
    return f"{exc.code.name}{reason}: {exc.message}"


class ProgressDisplay:
    """A progress bar on stderr when it is a terminal; one plain line per finished case otherwise."""

    def __init__(self, total: int, stream: IO[str] | None = None):
        self._stream = stream or sys.stderr
        self._total, self._done = total, 0
        self._bar: Progress | None = None
        self._task = None
        if self._stream.isatty():
            console = Console(file=self._stream, highlight=False)
            self._bar = Progress(
                TextColumn("eval"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
            )
            self._task = self._bar.add_task("cases", total=total)

    def __enter__(self) -> ProgressDisplay:
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def __call__(self, result: CaseResult) -> None:
        self._done += 1
        if self._bar is not None and self._task is not None:
            self._bar.advance(self._task)
            return
        outcome = "pass" if result.passed else "FAIL"
        print(f"eval [{self._done}/{self._total}] {result.agent} {result.case.id}: {outcome}", file=self._stream)
