"""The loop with the policy and context services behind it (as the protocols the loop sees).

The fakes record what they are asked and answer as the services' contracts say;
the services themselves are tested against the real servers in tests/integration.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cogmesh.common.v1 import events_pb2
from services.lib.llm import ChatMessage, ModelError, ToolCallRequest
from services.runtime.calculator import CALCULATOR_SCHEMA, calculator_tool
from services.runtime.context_link import estimate_tokens
from services.runtime.local_model import LocalModel
from services.runtime.loop import run_turn
from services.runtime.phases import Intercept, Phase, PhaseContext
from services.runtime.tools.base import Tool, ToolContext, builtin
from services.runtime.turn import Compaction, CompactionFailed, ModelChoice, ModelInfo, Turn, Verdict, interrupt_matcher
from tests.fakes.models import ScriptedModel, calls, text

INFO = ModelInfo("m1", "acme")


def notice(text_: str) -> events_pb2.RuntimeEvent:
    return events_pb2.RuntimeEvent(native_notice=events_pb2.NativeNotice(kind="policy", text=text_))


@dataclass
class FakePolicy:
    phases: frozenset[Phase]
    answers: dict[Phase, list[Intercept]] = field(default_factory=dict)
    verdicts: list[Verdict] | None = None
    state: dict[str, Any] | None = None
    seen: list[tuple[Phase, Any]] = field(default_factory=list)
    step_checks: list[list[str]] = field(default_factory=list)

    async def run_phase(self, context: PhaseContext) -> Intercept:
        self.seen.append((context.phase, context))
        queue = self.answers.get(context.phase, [])
        return queue.pop(0) if queue else Intercept(events=[notice(f"{context.phase.value} ran")])

    async def check_calls(
        self, calls_: Sequence[tuple[ToolCallRequest, Mapping[str, Any]]], context: PhaseContext
    ) -> list[Verdict]:
        self.step_checks.append([c.name for c, _ in calls_])
        self.state = {"checked": len(self.step_checks)}
        if self.verdicts is not None:
            return [self.verdicts.pop(0) for _ in calls_]
        return [Verdict(True, "ok", args, events=[notice(f"allowed {c.name}")]) for c, args in calls_]

    async def check_result(self, context: PhaseContext) -> Intercept:
        self.seen.append((Phase.POST_ACT, context))
        return Intercept(tool_result=context.tool_result + " [checked]", events=[notice("result checked")])


async def never(name: str, arguments: Mapping[str, Any]) -> Verdict:
    raise AssertionError("with a policy link the loop asks it, once per step")


def make_turn(model: Any, **overrides: Any) -> Turn:
    values: dict[str, Any] = {
        "turn_id": "t1",
        "system_prompt": "sys",
        "history": [],
        "user_text": "go",
        "model": model,
        "model_info": INFO,
        "tools": {"calculator": builtin(CALCULATOR_SCHEMA, calculator_tool)},
        "check_tool": never,
    }
    return Turn(**(values | overrides))


async def run(turn: Turn) -> list[events_pb2.RuntimeEvent]:
    async def collect() -> list[events_pb2.RuntimeEvent]:
        return [event async for event in run_turn(turn)]

    return await asyncio.wait_for(collect(), 10)


def texts(events: list[events_pb2.RuntimeEvent]) -> list[str]:
    return [e.native_notice.text for e in events if e.HasField("native_notice")]


async def test_one_policy_round_trip_per_step_and_every_answers_events_are_yielded() -> None:
    policy = FakePolicy(frozenset(Phase))
    model = ScriptedModel(
        [calls(("calculator", {"expression": "1+1"}), ("calculator", {"expression": "2+2"})), text("ok")]
    )
    events = await run(make_turn(model, policy=policy))
    assert policy.step_checks == [["calculator", "calculator"]]
    assert texts(events) == [
        "pre_run ran",
        "pre_think ran",
        "post_think ran",
        "allowed calculator",
        "allowed calculator",
        "result checked",
        "result checked",
        "pre_think ran",
        "post_think ran",
        "post_run ran",
    ]
    assert all(e.turn_id == "t1" for e in events)
    results = [m.content for m in model.calls[1][0] if m.role == "tool"]
    assert results == ["2 [checked]", "4 [checked]"]
    pre_think = [ctx for phase, ctx in policy.seen if phase is Phase.PRE_THINK]
    assert pre_think[1].model_calls == 1 and pre_think[1].tool_calls == 2 and pre_think[1].task == "go"


async def test_phases_without_work_cost_nothing() -> None:
    policy = FakePolicy(frozenset({Phase.PRE_ACT}))
    events = await run(
        make_turn(ScriptedModel([calls(("calculator", {"expression": "3*3"})), text("9")]), policy=policy)
    )
    assert policy.seen == [] and policy.step_checks == [["calculator"]]
    assert events[-1].final.text == "9"


async def test_a_denied_call_gives_the_model_the_reason_and_a_stop_ends_with_a_final_answer() -> None:
    policy = FakePolicy(
        frozenset({Phase.PRE_ACT}),
        verdicts=[Verdict(False, "tool 'calculator' is denied by security policy (always_denied)", {})],
    )
    model = ScriptedModel([calls(("calculator", {"expression": "1"})), text("cannot")])
    events = await run(make_turn(model, policy=policy))
    finished = next(e.tool_call_finished for e in events if e.HasField("tool_call_finished"))
    assert finished.result_summary == "error: tool 'calculator' is denied by security policy (always_denied)"
    assert events[-1].final.text == "cannot"

    stop = Verdict(False, "Budget reached: here is what I have.", {}, stop=True, stop_kind=0)
    policy = FakePolicy(frozenset({Phase.PRE_ACT}), verdicts=[stop])
    turn = make_turn(ScriptedModel([calls(("calculator", {"expression": "1"}))]), policy=policy)
    events = await run(turn)
    assert events[-1].final.text == "Budget reached: here is what I have."
    assert [m.role for m in turn.new_messages] == ["user", "assistant", "tool", "assistant"]

    stop = Verdict(False, "rate limited", {}, stop=True, stop_kind=events_pb2.ERROR_KIND_RATE_LIMITED)
    policy = FakePolicy(frozenset({Phase.PRE_ACT}), verdicts=[stop])
    events = await run(make_turn(ScriptedModel([calls(("calculator", {"expression": "1"}))]), policy=policy))
    assert (events[-1].error.kind, events[-1].error.message) == (events_pb2.ERROR_KIND_RATE_LIMITED, "rate limited")


async def test_pre_think_replaces_messages_for_the_rest_of_the_turn_and_waits() -> None:
    masked = [ChatMessage("user", "my email is [EMAIL]")]
    policy = FakePolicy(
        frozenset({Phase.PRE_THINK}),
        answers={Phase.PRE_THINK: [Intercept(messages=masked, replace_messages=True, wait_s=0.05)]},
    )
    model = ScriptedModel([text("noted")])
    turn = make_turn(model, policy=policy, user_text="my email is a@b.c")
    started = asyncio.get_running_loop().time()
    events = await run(turn)
    assert asyncio.get_running_loop().time() - started >= 0.05
    assert [(m.role, m.content) for m in model.calls[0][0]] == [("system", "sys"), ("user", "my email is [EMAIL]")]
    assert events[-1].final.text == "noted"
    assert turn.new_messages[0].content == "my email is a@b.c"  # what the user said is what is stored


async def test_on_error_model_switch_retries_the_call() -> None:
    backup = ScriptedModel([text("from backup")])
    picked: list[str] = []

    async def select(name: str) -> ModelChoice:
        picked.append(name)
        return ModelChoice(ModelInfo("backup-9", "other"), backup)

    policy = FakePolicy(frozenset({Phase.ON_ERROR}), answers={Phase.ON_ERROR: [Intercept(model="backup")]})
    failing = ScriptedModel([ModelError("quota", kind="rate_limited")])
    events = await run(make_turn(failing, policy=policy, select_model=select))
    assert picked == ["backup"]
    on_error = next(ctx for phase, ctx in policy.seen if phase is Phase.ON_ERROR)
    assert on_error.error_kind == "rate_limited"
    assert events[-1].final.text == "from backup" and events[-1].final.model == "backup-9"
    assert list(events[-1].final.metrics.failed_models) == ["m1"]


async def test_policy_state_travels_in_the_snapshot() -> None:
    policy = FakePolicy(frozenset({Phase.PRE_ACT}))
    turn = make_turn(
        ScriptedModel([calls(("calculator", {"expression": "1"}))]),
        policy=policy,
        interrupt_on=interrupt_matcher({"calculator": True}),
    )
    await run(turn)
    assert turn.pause is not None and turn.pause.snapshot["policy_state"] == {"checked": 1}


@dataclass
class FakeCompactor:
    threshold: int
    asked: list[tuple[int, str, int]] = field(default_factory=list)
    fail: bool = False

    def needed(self, transcript: Sequence[ChatMessage], summary: str) -> bool:
        return estimate_tokens(transcript, summary) >= self.threshold

    async def compact(self, transcript: Sequence[ChatMessage], summary: str, covered: int) -> Compaction | None:
        self.asked.append((len(transcript), summary, covered))
        if self.fail:
            raise CompactionFailed("context service: UNAVAILABLE")
        kept = list(transcript[-1:])
        marker = ChatMessage("tool", "SUMMARIZED executionId:'c9' (archived)", tool_call_id="c9", name="calculator")
        return Compaction(
            messages=[ChatMessage("assistant", "", (ToolCallRequest("c9", "calculator", {}),)), marker, *kept],
            summary="they talked about sums",
            covered=covered + len(transcript) - 1,
            event=events_pb2.ContextCompacted(summary_tokens=6, archived_count=1),
            system_prompt="sys + summary",
            archived=True,
        )


async def test_compaction_before_a_model_call_and_the_archive_tool_it_brings() -> None:
    history = [ChatMessage("user", "x" * 400), ChatMessage("assistant", "y" * 400)] * 3
    compactor = FakeCompactor(threshold=500)

    async def fetch(arguments: Mapping[str, Any], context: ToolContext) -> str:
        return "the original result"

    archive = Tool(
        CALCULATOR_SCHEMA.__class__("get_tool_response", "read", {"type": "object"}),
        fetch,
        source="internal",
        policy_checked=False,
    )
    model = ScriptedModel([calls(("get_tool_response", {"execution_id": "c9"})), text("fine")])
    turn = make_turn(model, history=history, compactor=compactor, archive_tool=archive, covered=4)
    events = await run(turn)
    assert compactor.asked == [(7, "", 4)]  # once: the compacted transcript is far below the threshold
    compacted = next(e.context_compacted for e in events if e.HasField("context_compacted"))
    assert (compacted.summary_tokens, compacted.archived_count) == (6, 1)
    first_call = model.calls[0]
    assert first_call[0][0] == ChatMessage("system", "sys + summary") and len(first_call[0]) == 4
    assert "get_tool_response" in first_call[1]
    finished = next(e.tool_call_finished for e in events if e.HasField("tool_call_finished"))
    assert finished.ok and finished.result_summary == "the original result"
    assert (turn.summary, turn.covered) == ("they talked about sums", 10)


async def test_a_failed_compaction_is_a_notice_and_the_turn_goes_on() -> None:
    history = [ChatMessage("user", "x" * 4000)]
    events = await run(
        make_turn(ScriptedModel([text("ok")]), history=history, compactor=FakeCompactor(threshold=10, fail=True))
    )
    assert "could not be compacted" in texts(events)[0] and events[-1].final.text == "ok"


async def test_no_round_trip_while_the_transcript_is_small() -> None:
    compactor = FakeCompactor(threshold=10_000)
    events = await run(make_turn(LocalModel(), compactor=compactor, tools={}, user_text="What is 2 + 2?"))
    assert compactor.asked == [] and events[-1].final.text == "2 + 2 = 4."
