from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from services.lib.agents import AgentDefinition
from services.lib.context.builder import (
    TRUNCATION_MARKER,
    BuiltContext,
    ContextBudget,
    ContextBuilder,
    ContextInput,
    truncate,
)
from services.lib.context.prompt_files import PromptFiles, read_utf8
from services.lib.tokens import CharRatioCounter


class WordCounter:
    """One token per whitespace-separated word: keeps budget arithmetic readable.

    Section costs under this counter: "## Goal\\n<body>" is 2 + words(body);
    "## Recent messages", "## User profile" and "## Role: <id>" headings are 3.
    """

    def count(self, text: str) -> int:
        return len(text.split())


class CountingReader:
    def __init__(self) -> None:
        self.paths: list[Path] = []

    def __call__(self, path: Path) -> str:
        self.paths.append(path)
        return read_utf8(path)


def write(path: Path, text: str) -> None:
    """Write and move mtime forward explicitly: a rewrite within the same
    filesystem timestamp tick must still count as a change in these tests."""
    existed = path.exists()
    old_mtime = path.stat().st_mtime_ns if existed else 0
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    if existed:
        new_mtime = old_mtime + 1_000_000_000
        os.utime(path, ns=(new_mtime, new_mtime))


@pytest.fixture
def prompts(tmp_path: Path) -> Path:
    directory = tmp_path / "agent"
    write(directory / "identity.md", "I am bot.\n")  # P0 identity: 2 + 3 words
    write(directory / "guardrails.md", "No secrets.\n")  # P0 guardrails: 2 + 2
    write(directory / "roles" / "assistant.md", "Assist well.\n")  # P0.5: 3 + 2
    write(directory / "roles" / "critic.md", "Criticize.\n")
    return directory


FIXED_WORDS = 5 + 4 + 5  # identity + guardrails + assistant role sections


@pytest.fixture
def agent(prompts: Path) -> AgentDefinition:
    return AgentDefinition(name="bot", prompts_dir=prompts, default_role="assistant")


def words(prefix: str, n: int) -> str:
    return " ".join(f"{prefix}{i}" for i in range(1, n + 1))


def budget(**overrides: int) -> ContextBudget:
    # Reservation off unless a test is about it, so that the available budget
    # is total_tokens minus the real fixed packs.
    return ContextBudget(**{"guardrails_reserved": 0, **overrides})


def build(agent: AgentDefinition, **fields: Any) -> BuiltContext:
    builder = ContextBuilder(PromptFiles(), WordCounter())
    return builder.build(ContextInput(agent=agent, **fields))


def section(prompt: str, heading: str) -> str:
    """Body of the ``## heading`` section, or "" when the section is absent."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=\n\n## |\Z)", prompt, re.M | re.S)
    return match.group(1) if match else ""


def actions(built: BuiltContext) -> dict[str, str]:
    return {pack.name: pack.action for pack in built.packs}


# --- prompt files -----------------------------------------------------------


def test_prompt_files_read_and_list_roles(prompts: Path, tmp_path: Path) -> None:
    files = PromptFiles()

    assert files.identity(prompts) == "I am bot.\n"
    assert files.guardrails(prompts) == "No secrets.\n"
    assert files.role(prompts, "critic") == "Criticize.\n"
    assert files.role(prompts, "nobody") == ""
    assert files.roles(prompts) == ["assistant", "critic"]

    empty = tmp_path / "empty"
    empty.mkdir()
    assert files.identity(empty) == ""
    assert files.guardrails(empty) == ""
    assert files.roles(empty) == []


@pytest.mark.parametrize("role_id", ["../identity", "a/b", "a\\b", "..", ""])
def test_prompt_files_reject_unsafe_role_ids(prompts: Path, role_id: str) -> None:
    with pytest.raises(ValueError, match="role_id"):
        PromptFiles().role(prompts, role_id)


def test_prompt_files_unchanged_files_are_not_read_again(prompts: Path) -> None:
    reader = CountingReader()
    files = PromptFiles(reader)

    for _ in range(3):
        files.identity(prompts)
        files.role(prompts, "critic")

    assert reader.paths == [prompts / "identity.md", prompts / "roles" / "critic.md"]


def test_prompt_files_hot_reload_on_mtime_change(prompts: Path) -> None:
    reader = CountingReader()
    files = PromptFiles(reader)
    assert files.identity(prompts) == "I am bot.\n"

    # Same size, so only the mtime tells the cache the file changed.
    write(prompts / "identity.md", "I am BOT.\n")

    assert files.identity(prompts) == "I am BOT.\n"
    assert len(reader.paths) == 2


def test_prompt_files_reload_on_size_change_with_same_mtime(prompts: Path) -> None:
    files = PromptFiles()
    path = prompts / "guardrails.md"
    stamp = path.stat().st_mtime_ns
    assert files.guardrails(prompts) == "No secrets.\n"

    path.write_text("No secrets, ever.\n", encoding="utf-8")
    os.utime(path, ns=(stamp, stamp))

    assert files.guardrails(prompts) == "No secrets, ever.\n"


def test_prompt_files_deleted_file_reads_empty(prompts: Path) -> None:
    files = PromptFiles()
    assert files.role(prompts, "critic")

    (prompts / "roles" / "critic.md").unlink()

    assert files.role(prompts, "critic") == ""
    assert files.roles(prompts) == ["assistant"]


# --- builder: layout --------------------------------------------------------


def test_packs_appear_in_priority_order(agent: AgentDefinition) -> None:
    built = build(
        agent,
        goal="reach goal",
        phase="planning",
        skill_instructions=["use calc", "be brief"],
        last_messages=[("user", "hi"), ("assistant", "hello")],
        memory={"pet": "cat"},
        user_profile={"name": "Ann"},
        summary="talked before",
        budget=budget(),
    )

    headings = re.findall(r"^## (.+)$", built.system_prompt, re.M)
    assert headings == [
        "Identity",
        "Guardrails",
        "Role: assistant",
        "Goal",
        "Phase",
        "Skills",
        "Recent messages",
        "Memory",
        "User profile",
        "Summary",
    ]
    assert [(p.name, p.priority) for p in built.packs] == [
        ("identity", "P0"),
        ("guardrails", "P0"),
        ("role", "P0.5"),
        ("goal", "P1"),
        ("phase", "P1.5"),
        ("skills", "P2"),
        ("messages", "P2.5"),
        ("memory", "P3"),
        ("profile", "P4"),
        ("summary", "P5"),
    ]
    assert set(actions(built).values()) == {"kept"}
    assert built.truncated_packs == ()
    assert section(built.system_prompt, "Skills") == "use calc\n\nbe brief"
    assert section(built.system_prompt, "Recent messages") == "user: hi\nassistant: hello"
    assert section(built.system_prompt, "Memory") == "- pet: cat"


def test_empty_packs_are_omitted_not_reported(agent: AgentDefinition) -> None:
    built = build(agent, goal="just a goal", budget=budget())

    assert [p.name for p in built.packs] == ["identity", "guardrails", "role", "goal"]
    assert built.truncated_packs == ()
    assert "## Phase" not in built.system_prompt


def test_inline_system_prompt_joins_identity(agent: AgentDefinition) -> None:
    inline = agent.model_copy(update={"system_prompt": "Speak French."})

    built = build(inline, budget=budget())

    assert section(built.system_prompt, "Identity") == "I am bot.\n\nSpeak French."


def test_agent_without_prompts_dir_uses_inline_prompt_only() -> None:
    agent = AgentDefinition(name="inline", system_prompt="Only inline.")

    built = build(agent, role_id="critic", budget=budget())

    assert built.system_prompt == "## Identity\nOnly inline."


def test_role_defaults_to_agent_role_and_can_be_overridden(agent: AgentDefinition) -> None:
    assert "## Role: assistant\nAssist well." in build(agent).system_prompt

    built = build(agent, role_id="critic")

    assert "## Role: critic\nCriticize." in built.system_prompt
    assert "Assist well." not in built.system_prompt


def test_builder_rejects_unsafe_role_id(agent: AgentDefinition) -> None:
    with pytest.raises(ValueError, match="role_id"):
        build(agent, role_id="../guardrails")


def test_error_messages_are_filtered(agent: AgentDefinition) -> None:
    built = build(
        agent,
        last_messages=[
            ("user", "add 2 and 2"),
            ("error", "tool crashed"),
            ("assistant", "Error: calculator unavailable"),
            ("assistant", "it is 4"),
        ],
        budget=budget(),
    )

    assert section(built.system_prompt, "Recent messages") == ("user: add 2 and 2\nassistant: it is 4")
    assert actions(built)["messages"] == "kept"


# --- builder: caps ----------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "cap_field", "name", "heading"),
    [
        ("goal", "goal_max", "goal", "Goal"),
        ("skill_instructions", "tools_max", "skills", "Skills"),
        ("summary", "summary_max", "summary", "Summary"),
    ],
)
def test_text_packs_are_truncated_to_their_cap(
    agent: AgentDefinition, field: str, cap_field: str, name: str, heading: str
) -> None:
    text = words("w", 50)
    value: object = [text] if field == "skill_instructions" else text

    built = build(agent, **{field: value, "budget": budget(**{cap_field: 10})})

    body = section(built.system_prompt, heading)
    assert body == words("w", 9) + TRUNCATION_MARKER
    assert WordCounter().count(body) <= 10
    assert actions(built)[name] == "truncated"
    assert built.truncated_packs == (name,)


@pytest.mark.parametrize(
    ("field", "cap_field", "name", "heading"),
    [
        ("memory", "memory_max", "memory", "Memory"),
        ("user_profile", "profile_max", "profile", "User profile"),
    ],
)
def test_mapping_packs_are_truncated_to_their_cap(
    agent: AgentDefinition, field: str, cap_field: str, name: str, heading: str
) -> None:
    facts = {"b": "two", "a": "one", "c": "three"}  # each line "- k: v" is 3 words

    built = build(agent, **{field: facts, "budget": budget(**{cap_field: 7})})

    assert section(built.system_prompt, heading) == "- a: one\n- b: two …"
    assert actions(built)[name] == "truncated"


def test_messages_keep_the_most_recent_within_cap(agent: AgentDefinition) -> None:
    history = [("user", f"question {i}") for i in range(1, 5)]  # 3 words each

    built = build(agent, last_messages=history, budget=budget(messages_max=7))

    assert section(built.system_prompt, "Recent messages") == ("user: question 3\nuser: question 4")
    assert actions(built)["messages"] == "truncated"


def test_single_long_newest_message_is_cut(agent: AgentDefinition) -> None:
    history = [("user", "old"), ("assistant", words("w", 20))]

    built = build(agent, last_messages=history, budget=budget(messages_max=4))

    assert section(built.system_prompt, "Recent messages") == "assistant: w1 w2 …"


def test_zero_cap_drops_pack(agent: AgentDefinition) -> None:
    built = build(agent, goal="some goal", budget=budget(goal_max=0))

    assert actions(built)["goal"] == "dropped"
    assert built.truncated_packs == ("goal",)
    assert "## Goal" not in built.system_prompt


def test_caps_with_default_counter_respect_token_estimate(
    agent: AgentDefinition,
) -> None:
    goal = " ".join(["lorem", "ipsum", "dolor", "sit", "amet"] * 200)
    builder = ContextBuilder(PromptFiles())

    built = builder.build(ContextInput(agent=agent, goal=goal, budget=ContextBudget(goal_max=25)))

    body = section(built.system_prompt, "Goal")
    assert CharRatioCounter().count(body) <= 25
    kept = body.removesuffix(TRUNCATION_MARKER)
    assert body.endswith(TRUNCATION_MARKER)
    assert goal.startswith(kept) and goal[len(kept)] == " "  # cut on a word boundary
    assert built.tokens_used == CharRatioCounter().count(built.system_prompt)
    assert built.tool_budget == 8000 - built.tokens_used


# --- builder: overflow ------------------------------------------------------


def test_summary_is_dropped_first_not_truncated(agent: AgentDefinition) -> None:
    # goal 2+5, profile 3+3, summary 2+5 words: one token short of fitting all.
    total = FIXED_WORDS + 7 + 6 + 7 - 1

    built = build(
        agent,
        goal=words("g", 5),
        user_profile={"name": "Ann"},
        summary=words("s", 5),
        budget=budget(total_tokens=total),
    )

    assert actions(built) == {
        "identity": "kept",
        "guardrails": "kept",
        "role": "kept",
        "goal": "kept",
        "profile": "kept",
        "summary": "dropped",
    }
    assert built.truncated_packs == ("summary",)
    assert "## Summary" not in built.system_prompt
    assert built.packs[-1].tokens == 0


def test_summary_kept_when_everything_fits(agent: AgentDefinition) -> None:
    total = FIXED_WORDS + 7 + 6 + 7

    built = build(
        agent,
        goal=words("g", 5),
        user_profile={"name": "Ann"},
        summary=words("s", 5),
        budget=budget(total_tokens=total),
    )

    assert built.truncated_packs == ()
    assert built.tokens_used == total
    assert built.tool_budget == 0


def test_overflow_truncates_lower_priority_packs_first(agent: AgentDefinition) -> None:
    # After the summary goes: goal 7 + skills 4 fit; memory (2 + 9 = 11) gets
    # what is left (6); the profile gets nothing.
    total = FIXED_WORDS + 7 + 4 + 6

    built = build(
        agent,
        goal=words("g", 5),
        skill_instructions=["use calc"],
        memory={"a": "x", "b": "y", "c": "z"},
        user_profile={"name": "Ann"},
        summary="short summary",
        budget=budget(total_tokens=total),
    )

    assert actions(built) == {
        "identity": "kept",
        "guardrails": "kept",
        "role": "kept",
        "goal": "kept",
        "skills": "kept",
        "memory": "truncated",
        "profile": "dropped",
        "summary": "dropped",
    }
    assert section(built.system_prompt, "Memory") == "- a: x …"
    assert built.truncated_packs == ("memory", "profile", "summary")
    assert built.tokens_used <= total


def test_phase_is_dropped_whole_when_it_does_not_fit(agent: AgentDefinition) -> None:
    # goal 2+5 = 7, phase 2+10 = 12, skills 2+2 = 4; room for goal + skills + 3.
    built = build(
        agent,
        goal=words("g", 5),
        phase=words("p", 10),
        skill_instructions=["use calc"],
        budget=budget(total_tokens=FIXED_WORDS + 7 + 4 + 3),
    )

    assert actions(built)["phase"] == "dropped"
    assert actions(built)["skills"] == "kept"
    assert built.truncated_packs == ("phase",)
    assert "p1" not in built.system_prompt


def test_phase_dropped_when_no_budget_left(agent: AgentDefinition) -> None:
    built = build(agent, phase="planning", budget=budget(total_tokens=FIXED_WORDS))

    assert actions(built)["phase"] == "dropped"
    assert built.tool_budget == 0


def test_fixed_packs_survive_an_exhausted_budget(agent: AgentDefinition) -> None:
    built = build(
        agent,
        goal="goal",
        last_messages=[("user", "hi")],
        summary="summary",
        budget=budget(total_tokens=3),
    )

    assert actions(built) == {
        "identity": "kept",
        "guardrails": "kept",
        "role": "kept",
        "goal": "dropped",
        "messages": "dropped",
        "summary": "dropped",
    }
    assert built.system_prompt.startswith("## Identity\nI am bot.")
    assert built.tokens_used == FIXED_WORDS
    assert built.tool_budget == 0


def test_guardrails_reservation_limits_other_packs(agent: AgentDefinition) -> None:
    # P0 is 9 words but 20 are reserved, so of 34 tokens the goal section only
    # gets 34 - 20 - 5 (role) = 9: heading 2 + body 7.
    reserved = ContextBudget(total_tokens=FIXED_WORDS + 20, guardrails_reserved=20)

    built = build(agent, goal=words("g", 20), budget=reserved)

    assert section(built.system_prompt, "Goal") == words("g", 6) + TRUNCATION_MARKER
    # The unused part of the reservation is left for tools: 34 - (14 + 9).
    assert built.tool_budget == 11


# --- builder: hash and determinism --------------------------------------------


def test_hash_is_stable_and_tracks_prompt_files(agent: AgentDefinition, prompts: Path) -> None:
    reader = CountingReader()
    builder = ContextBuilder(PromptFiles(reader), WordCounter())
    inp = ContextInput(agent=agent, goal="g", memory={"x": "1", "y": "2"})

    first = builder.build(inp)
    reads_after_first = len(reader.paths)
    second = builder.build(inp)
    reordered = builder.build(dataclasses.replace(inp, memory={"y": "2", "x": "1"}))

    assert re.fullmatch(r"[0-9a-f]{16}", first.prompt_hash)
    assert first == second == reordered
    assert reads_after_first == 3
    assert len(reader.paths) == 3  # unchanged files: stat only, no reads
    assert ContextBuilder(PromptFiles(), WordCounter()).build(inp) == first

    write(prompts / "guardrails.md", "No secrets. No harm.\n")
    changed = builder.build(inp)

    assert reader.paths[3:] == [prompts / "guardrails.md"]
    assert "No harm." in changed.system_prompt
    assert changed.prompt_hash != first.prompt_hash


# --- budget validation and truncation helper -----------------------------------


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(ContextBudget)])
def test_negative_budget_field_is_rejected(name: str) -> None:
    with pytest.raises(ValueError, match=rf"ContextBudget\.{name} must be >= 0"):
        ContextBudget(**{name: -1})


def test_budget_defaults_match_spec() -> None:
    assert dataclasses.astuple(ContextBudget()) == (8000, 1500, 1000, 2000, 2000, 1500, 1000, 1000, 500)


def test_truncate_prefers_word_boundary_and_cuts_long_words() -> None:
    def at_most(n: int) -> Callable[[str], bool]:
        return lambda text: len(text) <= n

    assert truncate("alpha beta gamma", at_most(20)) == "alpha beta gamma"
    assert truncate("alpha beta gamma", at_most(14)) == "alpha beta …"
    assert truncate("alphabetagamma", at_most(7)) == "alpha …"
    assert truncate("alpha", at_most(1)) == ""
