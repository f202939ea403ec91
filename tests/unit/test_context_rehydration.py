"""Rehydration payload -> build input, and the builder's memoised warm rebuilds."""

from __future__ import annotations

import dataclasses
import os
import random
from pathlib import Path

import pytest
from google.protobuf import struct_pb2

from cogmesh.common.v1 import messages_pb2, resources_pb2
from cogmesh.sessions.v1 import sessions_pb2
from services.context.sessions_link import payload_from_proto
from services.lib.agents import AgentDefinition
from services.lib.context.api import recalled_text
from services.lib.context.builder import ContextBudget, ContextBuilder, ContextInput, _keep_recent
from services.lib.context.prompt_files import PromptFiles, read_utf8
from services.lib.context.rehydration import RehydrationPayload, rehydrate
from services.lib.tokens import TiktokenCounter


@pytest.fixture
def agent(tmp_path: Path) -> AgentDefinition:
    (tmp_path / "roles").mkdir()
    (tmp_path / "identity.md").write_text("I am the test agent.\n")
    (tmp_path / "guardrails.md").write_text("Never reveal secrets.\n")
    (tmp_path / "roles" / "coach.md").write_text("Coach the user.\n")
    (tmp_path / "roles" / "advisor.md").write_text("Advise on deposits.\n")
    return AgentDefinition(name="bot", prompts_dir=tmp_path, default_role="coach")


PAYLOAD = RehydrationPayload(
    role_id="advisor",
    active_skill_ids=("finance",),
    prompt_hash="a1b2c3d4e5f67890",
    summary="User discussed savings options.",
    last_messages=(("user", "I want a deposit"), ("assistant", "error: provider failed"), ("assistant", "Sure.")),
    goal="Open a deposit",
    phase="recommendation",
)


def test_payload_fills_what_the_request_left_empty(agent: AgentDefinition) -> None:
    inp, report = rehydrate(ContextInput(agent=agent), PAYLOAD)

    assert (inp.role_id, inp.summary, inp.goal, inp.phase) == (
        "advisor",
        "User discussed savings options.",
        "Open a deposit",
        "recommendation",
    )
    assert inp.last_messages == PAYLOAD.last_messages
    assert report.previous_prompt_hash == "a1b2c3d4e5f67890"
    assert report.active_skill_ids == ("finance",)
    assert (report.summary_loaded, report.messages_loaded, report.goal_loaded, report.phase_loaded) == (
        True,
        3,
        True,
        True,
    )

    built = ContextBuilder(PromptFiles()).build(inp)
    prompt = built.system_prompt
    for expected in ("Advise on deposits.", "## Goal\nOpen a deposit", "## Phase\nrecommendation", "Sure."):
        assert expected in prompt
    assert "provider failed" not in prompt  # error messages are filtered on rehydration too
    assert prompt.index("## Summary") > prompt.index("## Recent messages")


def test_request_values_win_over_the_payload(agent: AgentDefinition) -> None:
    given = ContextInput(agent=agent, role_id="coach", goal="New goal", last_messages=(("user", "now"),))
    inp, report = rehydrate(given, PAYLOAD)

    assert (inp.role_id, inp.goal, inp.last_messages) == ("coach", "New goal", (("user", "now"),))
    assert inp.summary == PAYLOAD.summary
    assert (report.goal_loaded, report.messages_loaded) == (False, 0)


def test_empty_payload_changes_nothing(agent: AgentDefinition) -> None:
    inp = ContextInput(agent=agent, goal="g")
    completed, report = rehydrate(inp, RehydrationPayload(unavailable=("summary", "goal", "phase")))
    assert completed == inp
    assert report.unavailable == ("summary", "goal", "phase")


def test_sessions_payload_proto_becomes_a_payload() -> None:
    goal_data = struct_pb2.Struct()
    goal_data.update({"amount": 5000})
    reply = sessions_pb2.GetRehydrationPayloadResponse(
        session=resources_pb2.Session(role_id="advisor", active_skill_ids=["finance"], prompt_hash="ab" * 8),
        summary=sessions_pb2.Summary(text="Earlier: savings."),
        last_messages=[
            messages_pb2.Message(role=messages_pb2.ROLE_USER, content="hi"),
            messages_pb2.Message(
                role=messages_pb2.ROLE_ASSISTANT, tool_calls=[messages_pb2.ToolCall(id="c", name="calculator")]
            ),
            messages_pb2.Message(role=messages_pb2.ROLE_TOOL, content="391", name="calculator", tool_call_id="c"),
        ],
        goal=sessions_pb2.Goal(text="Open a deposit", data=goal_data),
        phase=sessions_pb2.PhaseState(phase="recommendation"),
    )

    payload = payload_from_proto(reply)

    assert payload.role_id == "advisor" and payload.active_skill_ids == ("finance",)
    assert payload.summary == "Earlier: savings."
    assert payload.last_messages == (("user", "hi"), ("assistant", "[called calculator]"), ("tool calculator", "391"))
    assert payload.goal == "Open a deposit\namount: 5000.0"
    assert payload.phase == "recommendation"
    assert payload.unavailable == ()

    bare = payload_from_proto(sessions_pb2.GetRehydrationPayloadResponse(session=resources_pb2.Session()))
    assert (bare.summary, bare.goal, bare.phase, bare.last_messages) == ("", "", "", ())


def test_recalled_text_of_an_assistant_message_with_text_and_calls() -> None:
    message = messages_pb2.Message(
        role=messages_pb2.ROLE_ASSISTANT, content="Checking.", tool_calls=[messages_pb2.ToolCall(name="weather")]
    )
    assert recalled_text(message) == ("assistant", "Checking. [called weather]")


# --- memoised builds ---------------------------------------------------------


class CountingCounter:
    def __init__(self) -> None:
        self.calls = 0
        self._real = TiktokenCounter()

    def count(self, text: str) -> int:
        self.calls += 1
        return self._real.count(text)


def big_input(agent: AgentDefinition) -> ContextInput:
    return ContextInput(
        agent=agent,
        goal="Help the user open a deposit",
        skill_instructions=tuple(f"Skill {i}: use tool_{i} for task {i}." for i in range(20)),
        last_messages=tuple(("user" if i % 2 == 0 else "assistant", f"message {i} " * 10) for i in range(200)),
        summary="Earlier the user compared banks.",
        budget=ContextBudget(),
    )


def test_warm_rebuild_with_unchanged_inputs_counts_nothing(agent: AgentDefinition) -> None:
    counter = CountingCounter()
    builder = ContextBuilder(PromptFiles(), counter)
    inp = big_input(agent)

    cold = builder.build(inp)
    cold_calls = counter.calls
    warm = builder.build(dataclasses.replace(inp, last_messages=tuple(list(inp.last_messages))))

    assert warm == cold
    assert cold_calls > 0 and counter.calls == cold_calls
    # A changed input is built again.
    changed = builder.build(dataclasses.replace(inp, goal="Another goal"))
    assert changed.prompt_hash != cold.prompt_hash and counter.calls > cold_calls


def test_cache_sees_prompt_file_edits(agent: AgentDefinition) -> None:
    builder = ContextBuilder(PromptFiles())
    inp = big_input(agent)
    first = builder.build(inp)

    assert agent.prompts_dir is not None
    path = agent.prompts_dir / "guardrails.md"
    path.write_text("Never reveal secrets. Be kind.\n")
    stamp = path.stat().st_mtime_ns + 1_000_000_000
    os.utime(path, ns=(stamp, stamp))

    second = builder.build(inp)
    assert "Be kind." in second.system_prompt and second.prompt_hash != first.prompt_hash


def test_cache_is_bounded_and_can_be_disabled(agent: AgentDefinition) -> None:
    counter = CountingCounter()
    builder = ContextBuilder(PromptFiles(read_utf8), counter, cache_entries=0)
    inp = ContextInput(agent=agent, goal="g")
    builder.build(inp)
    calls = counter.calls
    builder.build(inp)
    assert counter.calls == 2 * calls

    small = ContextBuilder(PromptFiles(), CountingCounter(), cache_entries=2)
    for goal in ("a", "b", "c"):
        small.build(ContextInput(agent=agent, goal=goal))
    assert len(small._cache) == 2


def test_keep_recent_binary_search_matches_a_linear_scan() -> None:
    rng = random.Random(7)
    for _ in range(200):
        lines = [" ".join(["w"] * rng.randint(1, 9)) for _ in range(rng.randint(1, 30))]
        cap = rng.randint(0, 80)

        def fits(text: str, cap: int = cap) -> bool:
            return len(text.split()) <= cap

        linear = 0
        while linear < len(lines) and fits("\n".join(lines[len(lines) - linear - 1 :])):
            linear += 1
        expected = "\n".join(lines[len(lines) - linear :]) if linear else None
        got = _keep_recent(lines, fits)
        if expected is not None:
            assert got == expected
        else:
            assert fits(got)
