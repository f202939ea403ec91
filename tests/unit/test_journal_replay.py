"""A turn's journal (services/runtime/journal.py): its encoding, `replay`, and going on from stored journals.

The stored-journal tests are in the spirit of Temporal's replayer: the journals of real
turns, recorded through `run_turn` the way TurnLog records them (each state a delta of
the one before), are kept as JSON under tests/unit/journals/. Today's code must go on
from every state of each, as a replica taking the turn over would (`ResumePoint(state,
takeover=True)`, or with the answer when the journal's last word is one), and reach the
same end without running again a tool call whose result was recorded. A change to the
state's format or to the loop that breaks turns journaled by an older runtime fails here.

The same checks run on journals recorded now. To record stored ones again (after a
deliberate change of what a turn records), run, with no names for all of them:
    .venv/bin/python -m tests.unit.test_journal_replay [scenario ...]
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format

from cogmesh.common.v1 import events_pb2
from cogmesh.runtime.v1 import runtime_pb2
from cogmesh.sessions.v1 import sessions_pb2
from services.lib import journal_kinds
from services.lib.agents import AgentDefinition
from services.lib.llm import ChatMessage, ModelChunk, ToolSchema
from services.runtime.calculator import CALCULATOR_SCHEMA, calculator_tool
from services.runtime.delegation import task_tool
from services.runtime.journal import ANSWER, REQUEST, TAKEOVER, Replay, decode_state, encode_state, replay
from services.runtime.loop import run_turn
from services.runtime.runner import answer_from, answer_json
from services.runtime.structured import RESPOND_TOOL, OutputSpec
from services.runtime.tools.base import Tool, ToolContext
from services.runtime.turn import (
    Compaction,
    Decision,
    ModelInfo,
    ResumePoint,
    Turn,
    Verdict,
    interrupt_matcher,
)
from tests.fakes.models import calls, text

JOURNALS = Path(__file__).parent / "journals"
INFO = ModelInfo("scripted-1", "acme", 1.0, 2.0)
TURN_ID = "t1"


# --------------------------------------------------------------------------- encoding


def message(role: str, content: str) -> dict[str, Any]:
    return {"role": role, "content": content}


def loop_state(messages: list[dict[str, Any]], new: list[dict[str, Any]], **more: Any) -> dict[str, Any]:
    return {"v": 1, "phase": "think", "iteration": 1, "messages": messages, "new_messages": new} | more


def test_states_round_trip_as_the_lists_grow_and_shrink() -> None:
    system, user = message("system", "be brief"), message("user", "q")
    states = [
        loop_state([system, user], [user]),
        loop_state([system, user, message("assistant", "a")], [user, message("assistant", "a")], iteration=2),
        loop_state([system, message("user", "summary"), user], [user, message("assistant", "a")]),  # compaction
        loop_state([system], [user, message("assistant", "a")], phase="act"),  # shrinks to its first item
        loop_state([], [], phase="act"),  # and to nothing
        loop_state([message("system", "another prompt"), user], [user]),  # the first item changed
    ]
    previous: dict[str, Any] | None = None
    for state in states:
        payload = encode_state(state, previous)
        assert decode_state(payload, previous) == state
        assert encode_state(state, previous) == payload, "deterministic: a retried write is the same write"
        previous = state

    grown = json.loads(encode_state(states[1], states[0]))
    assert grown["messages"] == {"keep": 2, "add": [message("assistant", "a")]}, "only what follows what it keeps"
    assert grown["iteration"] == 2, "everything else is stored whole"
    compacted = json.loads(encode_state(states[2], states[1]))
    assert compacted["messages"] == {"keep": 1, "add": [message("user", "summary"), user]}
    assert json.loads(encode_state(states[4], states[3]))["messages"] == {"keep": 0, "add": []}
    assert json.loads(encode_state(states[0], None))["messages"] == [system, user], "the first state is whole"


def test_a_delta_without_the_state_it_continues_is_refused() -> None:
    first = loop_state([message("user", "q")], [])
    second = loop_state([message("user", "q"), message("assistant", "a")], [])
    with pytest.raises(ValueError, match="previous state that is missing"):
        decode_state(encode_state(second, first), None)
    with pytest.raises(ValueError, match="not a JSON object"):
        decode_state(b"[1, 2]", None)


# --------------------------------------------------------------------------- replay()


# How an entry reaches replay(): as this version writes it (the enum and the name), as a record
# from before the enum (only its name: a sessions service of the previous version), or with the
# enum alone (a writer that no longer sets the deprecated name).
WRITTEN = {
    "now": lambda kind, state, seq: journal_kinds.entry(kind, state, seq=seq),
    "before the enum": lambda kind, state, seq: sessions_pb2.JournalEntry(
        kind=journal_kinds.kind_name(kind), state=state, seq=seq
    ),
    "enum only": lambda kind, state, seq: sessions_pb2.JournalEntry(entry_kind=kind, state=state, seq=seq),
}


@pytest.mark.parametrize("written", sorted(WRITTEN))
def test_replay_of_request_states_answers_and_takeovers(written: str) -> None:
    entry = WRITTEN[written]
    request = runtime_pb2.RunTurnRequest(tenant_id="acme", session_id="s1", turn_id=TURN_ID, content="hi")
    s1 = loop_state([message("user", "hi")], [])
    s2 = loop_state([message("user", "hi"), message("assistant", "a")], [], waiting="approval")
    s3 = loop_state([message("user", "hi"), message("assistant", "a"), message("tool", "4")], [])
    approve = answer_json(Decision("approve", decided_by="ops"), False, 1_700_000_000.0)
    entries = [
        entry(REQUEST, request.SerializeToString(), 1),
        entry(journal_kinds.START, encode_state(s1, None), 3),
        entry(journal_kinds.PAUSE, encode_state(s2, s1), 7),
        entry(ANSWER, approve, 7),
        entry(TAKEOVER, b'{"holder": "10.0.0.2:50052", "from_seq": 7}', 9),
    ]
    waiting = replay(entries)
    assert waiting.request == request
    assert (waiting.state, waiting.seq, waiting.takeovers, waiting.stalled) == (s2, 9, 1, 1)
    assert waiting.answer is not None and answer_from(waiting.answer) == (Decision("approve", decided_by="ops"), False)

    going_on = replay([*entries, entry(journal_kinds.TOOL, encode_state(s3, s2), 8), entry(TAKEOVER, b"{}", 8)])
    assert going_on.state == s3
    assert going_on.answer is None, "a step recorded after the answer has the answer in its state"
    assert (going_on.seq, going_on.takeovers) == (9, 2), "seq is the highest recorded, not the last"
    assert going_on.stalled == 1, "a step recorded between two takeovers: only the last one is at this step"
    stuck = replay([*entries, entry(TAKEOVER, b"{}", 9), entry(TAKEOVER, b"{}", 9)])
    assert (stuck.takeovers, stuck.stalled) == (3, 3), "three runtimes stopped with nothing recorded in between"
    answered = replay([*entries, entry(ANSWER, approve, 10)])
    assert (answered.takeovers, answered.stalled) == (1, 0), "an answer recorded since is progress"

    assert replay([]) == Replay(None, None, None, 0, 0)
    only_request = replay([entry(REQUEST, request.SerializeToString(), 1)])
    assert (only_request.request, only_request.state, only_request.answer) == (request, None, None)


# --------------------------------------------------------------------------- turns to record


Step = list[ModelChunk]


@dataclass
class TranscriptModel:
    """A scripted model that picks its step from the conversation it is given, not from how often it
    was called: a turn restored from any recorded state is given the same next step as the run that
    recorded it. Scripts are keyed by the user message of the (sub)agent's task."""

    scripts: Mapping[str, Sequence[Step]]
    name: str = "transcript"

    async def stream(self, messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> AsyncIterator[ModelChunk]:
        task = next(i for i, m in enumerate(messages) if m.role == "user" and m.content in self.scripts)
        done = sum(1 for m in messages[task:] if m.role == "assistant")
        for chunk in self.scripts[messages[task].content][done]:
            yield chunk


@dataclass
class Ran:
    """The calculator calls a run made: (idempotency key, expression), in order."""

    calls: list[tuple[str, str]] = field(default_factory=list)

    def calculator(self) -> Tool:
        async def run(arguments: Mapping[str, Any], context: ToolContext) -> str:
            self.calls.append((context.idempotency_key, str(arguments["expression"])))
            return await calculator_tool(arguments)

        return Tool(CALCULATOR_SCHEMA, run)

    @property
    def expressions(self) -> list[str]:
        return [expression for _, expression in self.calls]


async def allow(name: str, arguments: Mapping[str, Any]) -> Verdict:
    return Verdict(True, "ok", arguments)


class SummarizingCompactor:
    """Summarizes everything before the turn's own message once the transcript is long."""

    def needed(self, transcript: Sequence[ChatMessage], summary: str) -> bool:
        return len(transcript) > 4

    async def compact(self, transcript: Sequence[ChatMessage], summary: str, covered: int) -> Compaction | None:
        return Compaction(
            messages=list(transcript[-1:]),
            summary=f"{len(transcript) - 1} earlier messages about the weather",
            covered=covered + len(transcript) - 1,
            event=events_pb2.ContextCompacted(summary_tokens=9),
            system_prompt="be brief; earlier: the weather",
        )


ANSWER_SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
HELPER = AgentDefinition(name="helper", mode="subagent", description="does arithmetic")


@dataclass(frozen=True)
class Scenario:
    name: str
    about: str
    user_text: str
    scripts: Mapping[str, Sequence[Step]]
    counts: tuple[int, int]  # (model calls, tool calls) the turn makes: its final's metrics must say so
    approve: bool = False  # the calculator needs a human's approval
    answer: Decision | None = None  # the answer the paused turn gets
    output: Mapping[str, Any] | None = None
    history: Sequence[ChatMessage] = ()
    compactor: bool = False
    delegation: bool = False
    approve_in_subagent: bool = False  # the subagent's calculator needs a human's approval

    def turn(self, ran: Ran, resume: ResumePoint | None = None, journal: Any = None) -> Turn:
        """The turn as a replica builds it (afresh, from its request), going on from `resume`."""
        model = TranscriptModel(self.scripts)
        tools: dict[str, Tool] = {"calculator": ran.calculator()}
        if self.delegation:
            tools["task"] = task_tool([HELPER])

        async def delegate(agent: str, task: str, parent: Turn, resume: ResumePoint | None) -> Turn:
            return Turn(  # like TurnBuilder.subagent: the delegating turn's id, trackers and cancel
                turn_id=parent.turn_id,
                system_prompt="you do arithmetic",
                history=[],
                user_text=task,
                model=model,
                model_info=INFO,
                tools={"calculator": ran.calculator()},
                check_tool=allow,
                interrupt_on=interrupt_matcher({"calculator": self.approve_in_subagent}),
                agent=agent,
                depth=parent.depth + 1,
                cost=parent.cost,
                session_cost=parent.session_cost,
                cancel=parent.cancel,
                resume=resume,
            )

        return Turn(
            turn_id=TURN_ID,
            system_prompt="be brief",
            history=list(self.history),
            user_text=self.user_text,
            model=model,
            model_info=INFO,
            tools=tools,
            check_tool=allow,
            agent="main",
            interrupt_on=interrupt_matcher({"calculator": self.approve}),
            output=OutputSpec.of(self.output) if self.output is not None else None,
            compactor=SummarizingCompactor() if self.compactor else None,
            delegate=delegate if self.delegation else None,
            resume=resume,
            journal=journal,
        )


SCENARIOS = {
    s.name: s
    for s in (
        Scenario(
            "parallel_tools",
            "two calculator calls at once, then one more, then the answer",
            "add things",
            {
                "add things": [
                    calls(("calculator", {"expression": "1 + 1"}), ("calculator", {"expression": "2 + 2"})),
                    calls(("calculator", {"expression": "3 + 3"})),
                    text("2, 4 and 6"),
                ]
            },
            (3, 3),
        ),
        Scenario(
            "approval",
            "the calculator call waits for a human's approval (the turn pauses), then runs once approved",
            "What is 17 * 23?",
            {"What is 17 * 23?": [calls(("calculator", {"expression": "17 * 23"})), text("17 * 23 = 391.")]},
            (2, 1),
            approve=True,
            answer=Decision("approve", decided_by="reviewer"),
        ),
        Scenario(
            "delegation",
            "the task goes to a subagent, which makes two calculator calls of its own",
            "ask the helper",
            {
                "ask the helper": [
                    calls(("task", {"agent": "helper", "task": "What is 6 * 7, plus 8?"})),
                    text("The helper says 50."),
                ],
                "What is 6 * 7, plus 8?": [
                    calls(("calculator", {"expression": "6 * 7"})),
                    calls(("calculator", {"expression": "42 + 8"})),
                    text("6 * 7 + 8 = 50."),
                ],
            },
            (5, 3),
            delegation=True,
        ),
        Scenario(
            "subagent_approval",
            "a subagent's calculator call waits for a human's approval: the whole turn pauses, then goes on inside it",
            "ask the helper to multiply",
            {
                "ask the helper to multiply": [
                    calls(("task", {"agent": "helper", "task": "What is 9 * 9?"})),
                    text("The helper says 81."),
                ],
                "What is 9 * 9?": [calls(("calculator", {"expression": "9 * 9"})), text("9 * 9 = 81.")],
            },
            (4, 2),
            answer=Decision("approve", decided_by="reviewer"),
            delegation=True,
            approve_in_subagent=True,
        ),
        Scenario(
            "structured_repair",
            "a tool call, then structured output that fails its schema and is repaired",
            "give me the answer as JSON",
            {
                "give me the answer as JSON": [
                    calls(("calculator", {"expression": "40 + 2"})),
                    calls((RESPOND_TOOL, {"answer": "forty-two"})),
                    calls((RESPOND_TOOL, {"answer": 42})),
                ]
            },
            (3, 1),  # the structured-output tool is the loop's own, not counted
            output=ANSWER_SCHEMA,
        ),
        Scenario(
            "compaction",
            "a long conversation is compacted before the first model call, then a tool call",
            "What is 5 * 5?",
            {"What is 5 * 5?": [calls(("calculator", {"expression": "5 * 5"})), text("5 * 5 = 25.")]},
            (2, 1),
            history=[
                ChatMessage(role, f"{role} {i} about the weather") for i in range(3) for role in ("user", "assistant")
            ],
            compactor=True,
        ),
    )
}


# --------------------------------------------------------------------------- recording


class RecordingJournal:
    """Records like TurnLog: each state a delta of the previous one; with it, the calls made so far."""

    def __init__(self, ran: Ran) -> None:
        self.ran = ran
        self.entries: list[dict[str, Any]] = []
        self._state: dict[str, Any] | None = None

    # Kinds are kept by name, as the stores keep them (and as the stored journals, recorded
    # before JournalEntryKind, have them).
    async def record(self, kind: journal_kinds.Kind, state: dict[str, Any]) -> None:
        payload = encode_state(state, self._state)
        self._state = state
        name = journal_kinds.kind_name(kind)
        self.entries.append({"kind": name, "state": json.loads(payload), "ran": self.ran.expressions})

    def record_raw(self, kind: journal_kinds.Kind, payload: bytes) -> None:
        name = journal_kinds.kind_name(kind)
        self.entries.append({"kind": name, "raw": payload.decode(), "ran": self.ran.expressions})


async def collect(turn: Turn) -> list[events_pb2.RuntimeEvent]:
    async def go() -> list[events_pb2.RuntimeEvent]:
        return [event async for event in run_turn(turn)]

    return await asyncio.wait_for(go(), 30)


def ending(turn: Turn, events: list[events_pb2.RuntimeEvent]) -> dict[str, Any]:
    """How a turn ended, as compared between runs."""
    last = events[-1]
    assert last.HasField("final"), f"the turn did not end with a final: {last}"
    return {
        "text": last.final.text,
        "structured": json_format.MessageToDict(last.final.structured_output)
        if last.final.HasField("structured_output")
        else None,
        "model_calls": last.final.metrics.model_calls,
        "tool_calls": last.final.metrics.tool_calls,
        "messages": [[m.role, m.content] for m in turn.new_messages],
    }


async def record(scenario: Scenario) -> dict[str, Any]:
    """Run the scenario's turn through, recording its journal (a pause, then its answer, included)."""
    ran = Ran()
    journal = RecordingJournal(ran)
    turn = scenario.turn(ran, journal=journal)
    events = await collect(turn)
    if turn.pause is not None:
        assert scenario.answer is not None, f"{scenario.name} paused without an answer to go on with"
        journal.record_raw(ANSWER, answer_json(scenario.answer, False, 0.0))
        turn = scenario.turn(ran, ResumePoint(turn.pause.snapshot, scenario.answer), journal)
        events = await collect(turn)
    return {
        "scenario": scenario.name,
        "about": scenario.about,
        "entries": journal.entries,
        "end": ending(turn, events),
        "ran": ran.calls,
    }


def stored(name: str) -> dict[str, Any]:
    path = JOURNALS / f"{name}.json"
    assert path.exists(), f"{path} is missing: record it with .venv/bin/python -m tests.unit.test_journal_replay {name}"
    data: dict[str, Any] = json.loads(path.read_text())
    return data


# --------------------------------------------------------------------------- going on from each recorded state


def as_entries(recorded: Sequence[Mapping[str, Any]]) -> list[sessions_pb2.JournalEntry]:
    """The journal as a sessions service of the previous version returns it, kinds by name only
    (the states' bytes as TurnLog encoded them): records from before JournalEntryKind replay."""
    out = []
    for seq, item in enumerate(recorded, start=1):
        if "raw" in item:
            payload = item["raw"].encode()
        else:
            payload = json.dumps(item["state"], sort_keys=True, separators=(",", ":")).encode()
        out.append(sessions_pb2.JournalEntry(kind=item["kind"], state=payload, seq=seq))
    return out


def recorded_results(state: Mapping[str, Any]) -> set[str]:
    """Calculator expressions whose results `state` holds: in its transcripts, its step's finished
    calls, and the same inside a subagent still at work."""
    found: set[str] = set()
    for transcript in (state.get("messages", []), state.get("new_messages", [])):
        asked: dict[str, Mapping[str, Any]] = {}
        for m in transcript:
            asked |= {c["id"]: c for c in m.get("calls", ())}
            if m["role"] == "tool" and m.get("name") == "calculator":
                found.add(str(asked[m["tool_call_id"]]["arguments"]["expression"]))
    for item in state.get("items", []):
        if item["name"] == "calculator" and item["state"] == "done":
            found.add(str(item["arguments"]["expression"]))
        if item.get("child"):
            found |= recorded_results(item["child"])
    return found


async def go_on_from(scenario: Scenario, point: ResumePoint) -> tuple[dict[str, Any], Ran]:
    """Continue the turn as a replica would from `point`; a turn that pauses again gets the recorded answer."""
    ran = Ran()
    turn = scenario.turn(ran, point)
    events = await collect(turn)
    if turn.pause is not None:
        assert scenario.answer is not None, f"{scenario.name} paused, but its journal never did"
        assert events[-2].HasField("approval_required"), events[-2]
        turn = scenario.turn(ran, ResumePoint(turn.pause.snapshot, scenario.answer))
        events = await collect(turn)
    return ending(turn, events), ran


async def check_every_state(scenario: Scenario, journal: Mapping[str, Any]) -> None:
    entries = as_entries(journal["entries"])
    everything = {expression for _, expression in journal["ran"]}
    key_of = {expression: key for key, expression in journal["ran"]}
    recorded: set[str] = set()  # results recorded so far: once recorded, never lost
    checked = 0
    for index, item in enumerate(journal["entries"]):
        if journal_kinds.kind_named(item["kind"]) in (REQUEST, TAKEOVER):
            continue
        where = replay(entries[: index + 1])
        assert where.state is not None
        recorded |= recorded_results(where.state)
        decision, abandon = answer_from(where.answer)
        point = ResumePoint(where.state, decision, abandon, takeover=where.answer is None)  # as TurnRunner does
        end, ran = await go_on_from(scenario, point)
        context = f"{scenario.name}: going on from entry {index} ({item['kind']})"
        assert end == journal["end"], context
        again = ran.expressions
        assert not set(again) & recorded, f"{context} ran recorded calls again: {again}"
        assert len(again) == len(set(again)), f"{context} ran a call twice: {again}"
        assert set(item["ran"]) | set(again) == everything, f"{context} skipped a call: ran {again}"
        for key, expression in ran.calls:
            assert key == key_of[expression], f"{context}: a call run again has a new idempotency key"
        checked += 1
    assert checked >= 4, f"{scenario.name}: only {checked} states recorded"


@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_a_turn_counts_each_model_and_tool_call_once(name: str) -> None:
    scenario = SCENARIOS[name]
    end = (await record(scenario))["end"]
    assert (end["model_calls"], end["tool_calls"]) == scenario.counts


@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_going_on_from_every_state_of_a_stored_journal_ends_alike(name: str) -> None:
    journal = stored(name)
    await check_every_state(SCENARIOS[name], journal)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_going_on_from_every_state_of_a_journal_recorded_now_ends_alike(name: str) -> None:
    journal = await record(SCENARIOS[name])
    assert journal["end"] == stored(name)["end"], "today's turn ends as the stored one did"
    await check_every_state(SCENARIOS[name], journal)


async def test_the_stored_journals_hold_the_steps_they_are_about() -> None:
    kinds = {name: [item["kind"] for item in stored(name)["entries"]] for name in SCENARIOS}
    assert "pause" in kinds["approval"] and "answer" in kinds["approval"]
    assert kinds["approval"].index("pause") < kinds["approval"].index("answer")
    known = {journal_kinds.kind_name(k) for k in sessions_pb2.JournalEntryKind.values() if k}
    assert {kind for names in kinds.values() for kind in names} <= known, "every stored name is a kind"
    assert "delegation" in kinds["delegation"]
    assert "compaction" in kinds["compaction"]
    repaired = [item["state"] for item in stored("structured_repair")["entries"] if "state" in item]
    assert any(state.get("repairs") for state in repaired), "a repair is recorded"
    waiting_inside_child = [
        s for s in stored("delegation")["entries"] if "state" in s and any(i.get("child") for i in s["state"]["items"])
    ]
    assert waiting_inside_child, "states recorded while the subagent was at work"


async def test_every_tool_call_of_a_turn_has_its_own_idempotency_key() -> None:
    scenario = Scenario(
        "two_tasks",
        "two subagent tasks, each with a calculator call",
        "ask twice",
        {
            "ask twice": [
                calls(
                    ("task", {"agent": "helper", "task": "What is 2 * 3?"}),
                    ("task", {"agent": "helper", "task": "What is 4 * 5?"}),
                ),
                text("6 and 20"),
            ],
            "What is 2 * 3?": [calls(("calculator", {"expression": "2 * 3"})), text("6")],
            "What is 4 * 5?": [calls(("calculator", {"expression": "4 * 5"})), text("20")],
        },
        (6, 4),
        delegation=True,
    )
    ran = Ran()
    events = await collect(scenario.turn(ran))
    assert events[-1].final.text == "6 and 20" and sorted(ran.expressions) == ["2 * 3", "4 * 5"]
    keys = [key for key, _ in ran.calls]
    assert len(set(keys)) == len(keys), f"keys repeat: {ran.calls}"


# --------------------------------------------------------------------------- recording the stored journals


async def write_journals(names: Sequence[str]) -> None:
    JOURNALS.mkdir(exist_ok=True)
    for name in names:
        journal = await record(SCENARIOS[name])
        entries = ",\n".join(f"  {json.dumps(item, sort_keys=True)}" for item in journal["entries"])
        layout = json.dumps(journal | {"entries": "ENTRIES"}, sort_keys=True, indent=1)
        (JOURNALS / f"{name}.json").write_text(layout.replace('"ENTRIES"', f"[\n{entries}\n ]") + "\n")
        print(f"{name}: {len(journal['entries'])} entries")


if __name__ == "__main__":
    asyncio.run(write_journals(sys.argv[1:] or sorted(SCENARIOS)))
