from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from services.lib.agents import (
    AgentConfig,
    AgentDefinition,
    AgentLoadError,
    AgentRegistry,
    ReloadingAgentRegistry,
    UnknownAgentError,
    load_agents,
)


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def test_loads_good_file_with_all_fields(tmp_path: Path) -> None:
    (tmp_path / "prompts" / "helper").mkdir(parents=True)
    write(
        tmp_path,
        "helper.yaml",
        """
name: helper
description: Helps.
prompts_dir: prompts/helper
system_prompt: Be nice.
model: local
tools: [calculator]
skills: [math]
default_role: assistant
mode: all
hidden: true
a2a_exposed: true
config:
  provider: openai
  model: gpt-4o
  temperature: 0.2
  max_tokens: 512
  recursion_limit: 10
""",
    )
    registry = AgentRegistry.load_dir(tmp_path)

    assert registry.errors == ()
    agent = registry.get("helper")
    assert agent.tools == ["calculator"]
    assert agent.skills == ["math"]
    assert agent.mode == "all"
    assert agent.hidden and agent.a2a_exposed
    assert agent.config == AgentConfig(
        provider="openai",
        model="gpt-4o",
        temperature=0.2,
        max_tokens=512,
        recursion_limit=10,
    )
    # Relative prompts_dir is resolved against the YAML file's folder.
    assert agent.prompts_dir == (tmp_path / "prompts" / "helper").resolve()


def test_defaults_of_minimal_definition(tmp_path: Path) -> None:
    write(tmp_path, "mini.yml", "name: mini\n")
    agent = AgentRegistry.load_dir(tmp_path).get("mini")

    assert agent.mode == "primary"
    assert agent.model == ""
    assert agent.tools == [] and agent.skills == []
    assert agent.prompts_dir is None
    assert not agent.hidden and not agent.a2a_exposed
    assert agent.config == AgentConfig()


def test_bad_field_reports_file_and_field_path_and_keeps_other_files(
    tmp_path: Path,
) -> None:
    write(tmp_path, "bad.yaml", "name: bad\nconfig:\n  temperature: 3\n")
    write(tmp_path, "good.yaml", "name: good\n")

    registry = AgentRegistry.load_dir(tmp_path)

    assert registry.names() == ["good"]
    assert [str(e) for e in registry.errors] == [
        "bad.yaml:3: config.temperature: Input should be less than or equal to 2"
    ]
    assert registry.errors[0].path == tmp_path / "bad.yaml"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("name: x\ntemprature: 1\n", "x.yaml:2: temprature: Extra inputs are not permitted"),
        ("name: x\nconfig:\n  max_tokens: 0\n", "x.yaml:3: config.max_tokens: Input"),
        ("name: x\ntools: [a, 1]\n", "x.yaml:2: tools[1]: Input should be a valid string"),
        ("name: x\nmode: boss\n", "x.yaml:2: mode: Input should be"),
        ("name: Bad Name\n", "x.yaml:1: name: String should match pattern"),
        ("description: no name\n", "x.yaml:1: name: Field required"),
        ("- a list\n", "x.yaml:1: expected a mapping at top level, got list"),
        ("name: [unclosed\n", "x.yaml:2: YAML syntax error:"),
        ("name: x\nprompts_dir: missing\n", "x.yaml:2: prompts_dir: not a directory:"),
    ],
)
def test_invalid_files_are_reported(tmp_path: Path, text: str, expected: str) -> None:
    write(tmp_path, "x.yaml", text)

    registry = AgentRegistry.load_dir(tmp_path)

    assert registry.names() == []
    assert len(registry.errors) == 1
    assert str(registry.errors[0]).startswith(expected)


def test_duplicate_name_reports_second_file(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", "name: twin\ndescription: first\n")
    write(tmp_path, "b.yml", "name: twin\ndescription: second\n")

    registry = AgentRegistry.load_dir(tmp_path)

    assert registry.get("twin").description == "first"
    assert len(registry.errors) == 1
    assert registry.errors[0].path.name == "b.yml"
    assert "twin" in registry.errors[0].message
    assert "a.yaml" in registry.errors[0].message


def test_only_agent_files_directly_in_folder_are_loaded(tmp_path: Path) -> None:
    write(tmp_path, "README.md", "# About these agents\n")
    write(tmp_path, "notes.txt", "name: notes\n")
    write(tmp_path, ".backup.yaml", "name: backup\n")
    (tmp_path / "nested").mkdir()
    write(tmp_path / "nested", "deep.yaml", "name: deep\n")
    write(tmp_path, "top.yaml", "name: top\n")

    registry = AgentRegistry.load_dir(tmp_path)

    assert registry.names() == ["top"]
    assert registry.errors == ()


def test_unknown_agent_error_lists_known_names() -> None:
    registry = AgentRegistry.from_definitions([AgentDefinition(name="beta"), AgentDefinition(name="alpha")])

    with pytest.raises(UnknownAgentError) as caught:
        registry.get("gamma")

    assert isinstance(caught.value, LookupError)
    assert str(caught.value) == "unknown agent 'gamma'; known agents: alpha, beta"


def test_list_hides_hidden_agents_unless_asked() -> None:
    registry = AgentRegistry.from_definitions(
        [AgentDefinition(name="shown"), AgentDefinition(name="secret", hidden=True)]
    )

    assert [a.name for a in registry.list()] == ["shown"]
    assert [a.name for a in registry.list(include_hidden=True)] == ["secret", "shown"]
    assert registry.names() == ["secret", "shown"]
    assert registry.get("secret").hidden


def test_from_definitions_rejects_duplicates() -> None:
    with pytest.raises(ValueError, match="dup"):
        AgentRegistry.from_definitions([AgentDefinition(name="dup"), AgentDefinition(name="dup")])


def test_models_forbid_unknown_fields_and_out_of_range_values() -> None:
    with pytest.raises(ValidationError, match="temprature"):
        AgentConfig.model_validate({"temprature": 1})
    with pytest.raises(ValidationError, match="temperature"):
        AgentConfig(temperature=-0.1)
    with pytest.raises(ValidationError, match="recursion_limit"):
        AgentConfig(recursion_limit=0)


def test_load_error_str_uses_file_name() -> None:
    error = AgentLoadError(Path("/somewhere/agents/x.yaml"), "name: Field required")
    assert str(error) == "x.yaml: name: Field required"


def test_shipped_default_agent_loads() -> None:
    registry = AgentRegistry.default()

    assert registry.errors == ()
    agent = registry.get("default")
    assert agent.model == "local"
    assert agent.tools == ["calculator"]
    assert agent.default_role == "assistant"
    assert agent.mode == "primary"
    assert agent.prompts_dir is not None and agent.prompts_dir.is_dir()
    for name in ("identity.md", "guardrails.md", "roles/assistant.md"):
        assert (agent.prompts_dir / name).read_text(encoding="utf-8").strip()


def test_markdown_agent_front_matter_and_body(tmp_path: Path) -> None:
    write(
        tmp_path,
        "researcher.md",
        "---\nmode: subagent\ndescription: Read-only research assistant\ntools:\n  - calculator\n---\n"
        "You are a research assistant.\n\nSummarize findings.\n",
    )
    agent = AgentRegistry.load_dir(tmp_path).get("researcher")

    assert agent.name == "researcher"  # from the file name
    assert agent.mode == "subagent" and agent.tools == ["calculator"]
    assert agent.system_prompt == "You are a research assistant.\n\nSummarize findings."


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("no front matter here\n", "x.md:1: no front matter"),
        ("---\nmode: primary\n", "x.md:1: front matter is not closed"),
        ("---\nsystem_prompt: a\n---\nbody\n", "x.md:2: system_prompt: given twice"),
        ("---\ndescription: x\nmode: boss\n---\nbody\n", "x.md:3: mode: Input should be"),
        ("---\n- 1\n---\nbody\n", "x.md:2: expected a mapping"),
    ],
)
def test_invalid_markdown_agents_are_reported(tmp_path: Path, text: str, expected: str) -> None:
    write(tmp_path, "x.md", text)
    write(tmp_path, "ok.md", "---\ndescription: fine\n---\nHello.\n")

    registry = AgentRegistry.load_dir(tmp_path)

    assert registry.names() == ["ok"]
    assert next(str(e) for e in registry.errors).startswith(expected)


def test_system_prompt_from_a_file(tmp_path: Path) -> None:
    (tmp_path / "prompts").mkdir()
    write(tmp_path / "prompts", "deploy-agent.md", "You deploy things.\n")
    write(tmp_path, "deploy.yaml", "name: deploy\nsystem_prompt:\n  file: prompts/deploy-agent\n")
    write(tmp_path, "broken.yaml", "name: broken\nsystem_prompt:\n  file: prompts/missing\n")
    write(tmp_path, "odd.yaml", "name: odd\nsystem_prompt:\n  path: x\n")

    registry = AgentRegistry.load_dir(tmp_path)

    assert registry.get("deploy").system_prompt == "You deploy things."
    assert registry.names() == ["deploy"]
    messages = sorted(str(e) for e in registry.errors)
    assert messages[0].startswith("broken.yaml:3: system_prompt.file: cannot read")
    assert messages[1] == "odd.yaml:3: system_prompt: expected text or {file: <path>}"


def test_new_fields_limits_budget_fallbacks_runtime(tmp_path: Path) -> None:
    write(
        tmp_path,
        "full.yaml",
        """
name: full
runtime: single-shot
interrupt_on: {calculator: true}
config:
  model: sonnet
  fallback_models: [gpt-4o, local]
limits: {max_iterations: 4, max_tool_calls: 2, tool_timeout_s: 1.5, on_tool_limit: error}
budget: {max_cost_usd: 0.5, action: warn, per_session: true}
output_schema: {type: object, properties: {answer: {type: string}}}
""",
    )
    write(tmp_path, "bad.yaml", "name: bad\nlimits: {max_iterations: 0}\nbudget: {action: explode}\n")
    registry = AgentRegistry.load_dir(tmp_path)
    agent = registry.get("full")

    assert agent.runtime == "single-shot" and agent.interrupt_on == {"calculator": True}
    assert agent.model_name == "sonnet" and agent.config.fallback_models == ["gpt-4o", "local"]
    assert (agent.limits.max_iterations, agent.limits.max_tool_calls, agent.limits.on_tool_limit) == (4, 2, "error")
    assert (agent.budget.max_cost_usd, agent.budget.action, agent.budget.per_session) == (0.5, "warn", True)
    assert agent.output_schema == {"type": "object", "properties": {"answer": {"type": "string"}}}
    assert sorted(str(e) for e in registry.errors) == [
        "bad.yaml:2: limits.max_iterations: Input should be greater than 0",
        "bad.yaml:3: budget.action: Input should be 'error' or 'warn'",
    ]


def test_subagent_references_are_checked_and_modes_listed(tmp_path: Path) -> None:
    write(tmp_path, "lead.yaml", "name: lead\nsubagents: [helper, boss, ghost]\n")
    write(tmp_path, "helper.yaml", "name: helper\nmode: subagent\n")
    write(tmp_path, "both.yaml", "name: both\nmode: all\n")
    write(tmp_path, "boss.yaml", "name: boss\n")

    registry = AgentRegistry.load_dir(tmp_path)

    assert [str(e) for e in registry.errors] == [
        "lead.yaml:2: subagents[1]: agent 'boss' has mode 'primary'; a subagent needs mode 'subagent' or 'all'",
        "lead.yaml:2: subagents[2]: unknown agent 'ghost'",
    ]
    assert [a.name for a in registry.primaries()] == ["boss", "both", "lead"]
    assert [a.name for a in registry.subagents()] == ["both", "helper"]


def test_hot_reload_picks_up_new_changed_and_removed_files(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", "name: a\ndescription: first\n")
    registry = load_agents(tmp_path)
    assert isinstance(registry, ReloadingAgentRegistry)
    assert registry.names() == ["a"]

    write(tmp_path, "a.yaml", "name: a\ndescription: second version\n")
    write(tmp_path, "b.md", "---\nmode: all\n---\nI am b.\n")
    write(tmp_path, "c.yaml", "name: c\nconfig: {temperature: 9}\n")
    registry.reload_now()
    assert registry.get("a").description == "second version"
    assert registry.names() == ["a", "b"]
    assert [str(e) for e in registry.errors] == [
        "c.yaml:2: config.temperature: Input should be less than or equal to 2"
    ]

    (tmp_path / "b.md").unlink()
    registry.reload_now()
    assert registry.names() == ["a"] and registry.reloads == 2
    with pytest.raises(UnknownAgentError):
        registry.get("b")


def test_hot_reload_checks_at_most_once_per_interval(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", "name: a\n")
    registry = ReloadingAgentRegistry(tmp_path, check_interval_s=3600)
    write(tmp_path, "b.yaml", "name: b\n")
    assert registry.names() == ["a"]  # not checked yet: reads stay cheap
    registry.reload_now()
    assert registry.names() == ["a", "b"]


def test_shipped_agents_show_approvals_and_delegation() -> None:
    registry = AgentRegistry.default()
    assert registry.errors == ()
    careful = registry.get("careful")
    assert careful.interrupt_on == {"calculator": True} and "ask_user" in careful.tools
    planner, arithmetic = registry.get("planner"), registry.get("arithmetic")
    assert planner.subagents == ["arithmetic"] and planner.is_primary
    assert arithmetic.mode == "subagent" and not arithmetic.is_primary
    assert arithmetic.system_prompt is not None and "calculator" in arithmetic.system_prompt
    assert [a.name for a in registry.subagents()] == ["arithmetic"]


def test_compaction_settings_are_validated() -> None:
    agent = AgentDefinition(name="a", compaction={"max_tokens": 800, "model": "local"})
    assert (agent.compaction.max_tokens, agent.compaction.enabled, agent.compaction.model) == (800, True, "local")
    with pytest.raises(ValidationError, match="max_tokens"):
        AgentDefinition(name="a", compaction={"max_tokens": -1})
    with pytest.raises(ValidationError, match="summary_tokens"):
        AgentDefinition(name="a", compaction={"summary_tokens": 1})
