"""The memory tools' namespace template, arguments and schemas, and the recalled memories pack."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from services.kit.clients import Clients
from services.kit.config import Settings
from services.lib.agents import AgentDefinition, AgentRegistry
from services.lib.context.builder import RECALLED_HEADING, ContextBudget, ContextBuilder, ContextInput
from services.lib.context.prompt_files import PromptFiles
from services.runtime.steps.state import validate
from services.runtime.tools.base import ToolContext, ToolError, ToolUnavailable
from services.runtime.tools.memory_tools import (
    MissingScope,
    derived_key,
    namespace_for,
    recall,
    tools_for_agent,
)


class WordCounter:
    def count(self, text: str) -> int:
        return len(text.split())


def agent(**memory: Any) -> AgentDefinition:
    return AgentDefinition(name="keeper", tools=["save_memory", "search_memories"], memory=memory)


# --------------------------------------------------------------------------- namespace template


def test_the_default_namespace_is_the_end_user_s_memories() -> None:
    keeper = agent()
    assert keeper.memory.namespace == ["{end_user}", "memories"]
    assert keeper.memory.scope_keys == ["end_user"]
    assert namespace_for(keeper.memory, {"end_user": "u_42", "project": "p"}) == ["end_user=u_42", "memories"]


def test_placeholders_take_scope_values_and_other_labels_stay_literal() -> None:
    keeper = agent(namespace=["{project}", "shared", "{end_user}"])
    assert namespace_for(keeper.memory, {"end_user": "u_1", "project": "apollo"}) == [
        "project=apollo",
        "shared",
        "end_user=u_1",
    ]
    assert namespace_for(agent(namespace=["team-notes"]).memory, {}) == ["team-notes"]


def test_a_session_without_the_scope_key_is_told_which_one() -> None:
    with pytest.raises(MissingScope, match=r"the session has no scope 'end_user'.*agent 'keeper'") as caught:
        namespace_for(agent().memory, {"project": "apollo"}, "keeper")
    assert caught.value.key == "end_user"
    with pytest.raises(MissingScope):
        namespace_for(agent().memory, {"end_user": ""})


def test_bad_templates_are_rejected_at_load_naming_file_and_field(tmp_path: Path) -> None:
    cases = {
        "slash.yaml": ("namespace: ['{end_user}', 'a/b']", "memory.namespace[1]: "),
        "key.yaml": ("namespace: ['{End-User}']", "memory.namespace[0]: "),
        "partial.yaml": ("namespace: ['user-{end_user}']", "memory.namespace[0]: "),
        "empty_label.yaml": ("namespace: ['']", "memory.namespace[0]: "),
        "no_labels.yaml": ("namespace: []", "memory.namespace: "),
        "too_many.yaml": (f"namespace: {['x'] * 9}", "memory.namespace: "),
        "same_tools.yaml": ("save_tool: remember\n  search_tool: remember", "memory: "),
        "bad_tool.yaml": ("save_tool: 'save memory'", "memory.save_tool: "),
        "mcp_tool.yaml": ("search_tool: mcp__x__y", "memory: "),
        "typo.yaml": ("namspace: [x]", "memory.namspace: "),
        "pack.yaml": ("context: {enabled: true, limit: 50}", "memory.context.limit: "),
    }
    for file, (memory, _) in cases.items():
        (tmp_path / file).write_text(f"name: {file.split('.')[0]}\nmemory:\n  {memory}\n")
    (tmp_path / "good.yaml").write_text(
        "name: good\ntools: [remember, recall]\n"
        "memory: {namespace: ['{project}', '{end_user}', notes], save_tool: remember, search_tool: recall,\n"
        "         context: {enabled: true, limit: 3, max_tokens: 200}}\n"
    )
    registry = AgentRegistry.load_dir(tmp_path)
    errors = {error.path.name: str(error) for error in registry.errors}
    assert set(errors) == set(cases), errors
    for file, (_, where) in cases.items():
        assert errors[file].startswith(f"{file}:3: {where}"), errors[file]  # line 3: where `memory` starts
    assert "'{End-User}'" in errors["key.yaml"] and "scope key" in errors["key.yaml"]
    good = registry.get("good").memory
    assert good.scope_keys == ["project", "end_user"] and good.tool_names() == ("remember", "recall")
    assert (good.context.enabled, good.context.limit, good.context.max_tokens) == (True, 3, 200)


def test_shipped_agents_leave_memory_off() -> None:
    for shipped in AgentRegistry.default().list(include_hidden=True):
        assert not shipped.memory.context.enabled
        assert not set(shipped.memory.tool_names()) & set(shipped.tools)


# --------------------------------------------------------------------------- the tools


def clients_to_nowhere() -> Clients:
    return Clients(Settings(memory_addr="127.0.0.1:9", call_timeout_s=1))  # the discard port: refused


def test_only_listed_tools_are_offered_under_their_configured_names() -> None:
    clients = clients_to_nowhere()
    assert set(tools_for_agent(clients, agent())) == {"save_memory", "search_memories"}
    assert tools_for_agent(clients, AgentDefinition(name="plain", tools=["calculator"])) == {}
    renamed = AgentDefinition(
        name="r", tools=["remember", "search_memories"], memory={"save_tool": "remember", "search_tool": "recall"}
    )
    tools = tools_for_agent(clients, renamed)
    assert set(tools) == {"remember"}  # search_memories is not this agent's search tool's name any more
    assert tools["remember"].schema.name == "remember" and tools["remember"].policy_checked


def test_schemas_have_no_namespace_and_reject_unknown_arguments() -> None:
    tools = tools_for_agent(clients_to_nowhere(), agent())
    save, search = tools["save_memory"], tools["search_memories"]
    for tool in (save, search):
        properties = set(tool.schema.parameters["properties"])
        assert not properties & {"namespace", "tenant", "tenant_id", "scope", "end_user"}
    assert validate(save, {"text": "Likes tea"}) == ""
    assert validate(save, {"text": "Likes tea", "key": "drink"}) == ""
    assert "namespace" in validate(save, {"text": "Likes tea", "namespace": ["bob", "memories"]})
    assert validate(save, {}) != "" and validate(save, {"text": ""}) != ""
    assert validate(search, {"query": "tea", "limit": 5}) == ""
    assert validate(search, {"query": "tea", "limit": 21}) != ""
    assert validate(search, {"query": "tea", "limit": 0}) != ""
    assert "scope" in validate(search, {"query": "tea", "scope": {"end_user": "bob"}})


async def test_the_tools_check_their_own_arguments_too() -> None:
    tools = tools_for_agent(clients_to_nowhere(), agent())
    context = ToolContext(tenant_id="t", session_id="s", scope={"end_user": "u"})
    with pytest.raises(ToolError, match=r"unknown argument.*'namespace'"):
        await tools["save_memory"].run({"text": "x", "namespace": ["other"]}, context)
    with pytest.raises(ToolError, match="'text' must be a non-empty string"):
        await tools["save_memory"].run({"text": "  "}, context)
    with pytest.raises(ToolError, match="'limit' must be an integer from 1 to 20"):
        await tools["search_memories"].run({"query": "x", "limit": 100}, context)
    with pytest.raises(ToolError, match="'limit' must be an integer"):
        await tools["search_memories"].run({"query": "x", "limit": True}, context)


async def test_a_session_without_the_scope_key_gets_a_tool_error_before_any_call() -> None:
    tools = tools_for_agent(clients_to_nowhere(), agent())
    context = ToolContext(tenant_id="t", session_id="s", scope={"project": "p"})
    with pytest.raises(ToolError, match="save_memory: the session has no scope 'end_user'"):
        await tools["save_memory"].run({"text": "Likes tea"}, context)
    with pytest.raises(ToolError, match="search_memories: the session has no scope 'end_user'"):
        await tools["search_memories"].run({"query": "tea"}, context)


async def test_a_memory_service_that_is_down_is_unavailable_so_the_call_is_retried() -> None:
    clients = clients_to_nowhere()
    tools = tools_for_agent(clients, agent())
    assert tools["save_memory"].retries >= 1 and tools["save_memory"].server
    context = ToolContext(tenant_id="t", session_id="s", scope={"end_user": "u"})
    try:
        with pytest.raises(ToolUnavailable, match="the memory service is unavailable"):
            await tools["save_memory"].run({"text": "Likes tea"}, context)
        # The context pack's search does not fail the turn: no memories, and why.
        found, problem = await recall(
            clients, agent(context={"enabled": True}), "t", {"end_user": "u"}, "what does the user drink?"
        )
        assert found == [] and problem.startswith("no memories were recalled: memory service UNAVAILABLE")
    finally:
        await clients.close()


async def test_recall_with_the_pack_off_or_no_scope_makes_no_call() -> None:
    clients = clients_to_nowhere()
    assert await recall(clients, agent(), "t", {"end_user": "u"}, "tea?") == ([], "")
    found, problem = await recall(clients, agent(context={"enabled": True}), "t", {}, "tea?")
    assert found == [] and "the session has no scope 'end_user'" in problem
    assert not clients._channels  # no channel was ever opened


def test_derived_keys_are_stable_over_case_and_spacing() -> None:
    assert derived_key("Prefers  dark roast\n") == derived_key("prefers dark roast")
    assert derived_key("Prefers dark roast") != derived_key("Prefers light roast")
    assert re.fullmatch(r"m_[0-9a-f]{16}", derived_key("x"))


# --------------------------------------------------------------------------- the context pack


def build(**fields: Any) -> Any:
    builder = ContextBuilder(PromptFiles(), WordCounter())
    return builder.build(ContextInput(agent=AgentDefinition(name="bot", system_prompt="I am bot."), **fields))


def section(prompt: str) -> str:
    match = re.search(rf"^## {re.escape(RECALLED_HEADING)}\n(.*?)(?=\n\n## |\Z)", prompt, re.M | re.S)
    return match.group(1) if match else ""


def test_recalled_memories_form_a_pack_after_memory_and_before_the_profile() -> None:
    built = build(
        memory={"pet": "cat"},
        recalled_memories=[("coffee", "Prefers dark roast"), ("m_1", "Lives in\nLisbon")],
        user_profile={"name": "Ann"},
        budget=ContextBudget(guardrails_reserved=0),
    )
    headings = re.findall(r"^## (.+)$", built.system_prompt, re.M)
    assert headings == ["Identity", "Memory", RECALLED_HEADING, "User profile"]
    assert section(built.system_prompt) == "- [coffee] Prefers dark roast\n- [m_1] Lives in Lisbon"
    assert ("recalled_memories", "P3.5", "kept") in [(p.name, p.priority, p.action) for p in built.packs]


def test_over_its_cap_the_lowest_ranked_memories_go_first() -> None:
    memories = [("a", "one two three"), ("b", "four five six"), ("c", "seven eight nine")]  # 5 words a line
    built = build(recalled_memories=memories, budget=ContextBudget(guardrails_reserved=0, recalled_memories_max=10))
    assert section(built.system_prompt) == "- [a] one two three\n- [b] four five six"
    assert built.truncated_packs == ("recalled_memories",)
    # A first memory longer than the cap is cut, not dropped.
    built = build(recalled_memories=[("a", "w " * 30)], budget=ContextBudget(recalled_memories_max=6))
    assert section(built.system_prompt).startswith("- [a] w w") and section(built.system_prompt).endswith("…")
    # Under the whole budget it is cut like any pack of its priority (identity 5 words, heading 8).
    tight = build(recalled_memories=memories, budget=ContextBudget(guardrails_reserved=0, total_tokens=18))
    assert section(tight.system_prompt) == "- [a] one two three"


def test_the_prompt_hash_covers_the_recalled_memories() -> None:
    none = build()
    one = build(recalled_memories=[("a", "Prefers tea")])
    other = build(recalled_memories=[("a", "Prefers coffee")])
    reordered = build(recalled_memories=[("b", "x"), ("a", "Prefers tea")])
    assert len({none.prompt_hash, one.prompt_hash, other.prompt_hash, reordered.prompt_hash}) == 4
    assert build(recalled_memories=[("a", "Prefers tea")]).prompt_hash == one.prompt_hash
