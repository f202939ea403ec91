"""Agents carried by the catalogue snapshot: what the models service puts in, what every other process holds.

The models service reads the agents folder; the others take each definition back from
its JSON. A definition must come back equal (Path fields included), a snapshot whose
agents do not load is refused whole, and the folder is read once only while no
snapshot came.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cogmesh.models.v1 import models_pb2
from services.kit.config import Settings
from services.kit.snapshots import SnapshotWatcher
from services.lib.agents import (
    DEFAULT_AGENTS_DIR,
    AgentRegistry,
    SnapshotAgentRegistry,
    agent_from_json,
    agent_to_json,
)
from services.lib.models.api import agents_of, snapshot_of
from services.lib.models.catalog import DEFAULT_CATALOG_PATH, ModelCatalog
from services.lib.models.watch import CatalogWatcher, follow_agents, held_of

CATALOG = ModelCatalog.from_yaml(DEFAULT_CATALOG_PATH)

EVERY_FIELD = """---
description: Every kind of field.
prompts_dir: prompts/full
model: local
tools: [calculator, "mcp__everything__*"]
skills: [math]
default_role: assistant
mode: all
hidden: true
a2a_exposed: true
mcp_exposed: true
config: {provider: openai, temperature: 0.25, max_tokens: 512, fallback_models: [gpt-4o, local]}
subagents: [helper]
interrupt_on: {calculator: true, "mcp__*": false}
runtime: single-shot
limits: {max_iterations: 4, tool_timeout_s: 2.5, on_tool_limit: error}
budget: {max_cost_usd: 0.5, action: warn, per_session: true}
output_schema:
  type: object
  properties: {answer: {type: string}, score: {type: number, minimum: 0.5}}
  required: [answer]
compaction: {max_tokens: 800, model: local}
memory: {namespace: ["{end_user}", notes], context: {enabled: true, limit: 3}}
---
You answer in full. Ünïcode stays as it is.
"""


def folder(tmp_path: Path) -> Path:
    agents = tmp_path / "agents"
    (agents / "prompts" / "full" / "roles").mkdir(parents=True)
    (agents / "prompts" / "full" / "roles" / "assistant.md").write_text("Assist.\n")
    (agents / "full.md").write_text(EVERY_FIELD, encoding="utf-8")
    (agents / "helper.yaml").write_text("name: helper\nmode: subagent\n")
    (agents / "broken.yaml").write_text("name: broken\nconfig: {temperature: 9}\n")
    return agents


def snapshot(agents: AgentRegistry, agents_dir: Path | None = None) -> models_pb2.WatchCatalogResponse:
    return models_pb2.WatchCatalogResponse(snapshot=snapshot_of(CATALOG, False, agents, agents_dir))


def test_every_shipped_agent_comes_back_equal_from_its_json() -> None:
    shipped = AgentRegistry.default()
    assert shipped.names() and shipped.errors == ()
    for definition in shipped.list(include_hidden=True):
        back = agent_from_json(definition.name, agent_to_json(definition))
        assert back == definition, definition.name
        assert type(back.prompts_dir) is type(definition.prompts_dir)  # a Path stays a Path
    held = agents_of(snapshot(shipped, DEFAULT_AGENTS_DIR).snapshot)
    assert held.list(include_hidden=True) == shipped.list(include_hidden=True)


def test_every_kind_of_field_and_the_load_problems_travel(tmp_path: Path) -> None:
    agents_dir = folder(tmp_path)
    loaded = AgentRegistry.load_dir(agents_dir)
    full = loaded.get("full")
    assert full.prompts_dir == (agents_dir / "prompts" / "full").resolve()
    assert full.system_prompt == "You answer in full. Ünïcode stays as it is."

    message = snapshot(loaded, agents_dir)
    assert [agent.name for agent in message.snapshot.agents] == ["full", "helper"]
    held = agents_of(message.snapshot)
    assert held.get("full") == full and held.get("helper") == loaded.get("helper")
    # The problems name the file relative to the folder, as the folder's own registry reports them.
    assert [(p.file, p.problem) for p in message.snapshot.agent_problems] == [
        ("broken.yaml", "config.temperature: Input should be less than or equal to 2")
    ]
    # The snapshot carries file and problem; the line stays with the folder's owner (AgentLoadProblem has no line).
    assert [(e.path.name, e.message) for e in held.errors] == [(e.path.name, e.message) for e in loaded.errors]
    assert [str(error) for error in loaded.errors] == [
        "broken.yaml:2: config.temperature: Input should be less than or equal to 2"
    ]


def test_the_version_covers_the_agents(tmp_path: Path) -> None:
    agents_dir = folder(tmp_path)
    first = snapshot(AgentRegistry.load_dir(agents_dir), agents_dir).snapshot
    assert snapshot(AgentRegistry.load_dir(agents_dir), agents_dir).snapshot.version == first.version
    (agents_dir / "helper.yaml").write_text("name: helper\nmode: subagent\ndescription: changed\n")
    assert snapshot(AgentRegistry.load_dir(agents_dir), agents_dir).snapshot.version != first.version
    (agents_dir / "broken.yaml").unlink()  # a problem gone is a new version too
    changed = snapshot(AgentRegistry.load_dir(agents_dir), agents_dir).snapshot
    assert not changed.agent_problems and changed.version != first.version


def test_a_definition_json_cannot_carry_is_a_load_problem(tmp_path: Path) -> None:
    (tmp_path / "dated.yaml").write_text("name: dated\noutput_schema: {type: string, examples: [2024-01-01]}\n")
    (tmp_path / "keyed.yaml").write_text("name: keyed\noutput_schema: {type: object, properties: {1: {}}}\n")
    (tmp_path / "fine.yaml").write_text("name: fine\n")
    registry = AgentRegistry.load_dir(tmp_path)
    assert registry.names() == ["fine"]
    assert sorted(str(error) for error in registry.errors) == [
        "dated.yaml: output_schema: has a value JSON cannot carry (a date, NaN or a key that is not a string?)",
        "keyed.yaml: output_schema: has a value JSON cannot carry (a date, NaN or a key that is not a string?)",
    ]


@pytest.mark.parametrize(
    ("definition_json", "problem"),
    [
        ("{not json", "agent 'helper': its definition_json does not load: Invalid JSON"),
        ('{"name": "helper", "temprature": 1}', "agent 'helper': its definition_json does not load: temprature"),
        ('{"name": "other"}', "agent 'helper': its definition_json names agent 'other'"),
    ],
)
def test_an_agent_that_does_not_load_fails_the_whole_snapshot(definition_json: str, problem: str) -> None:
    message = snapshot(AgentRegistry.default())
    message.snapshot.agents.append(models_pb2.AgentSnapshot(name="helper", definition_json=definition_json))
    with pytest.raises(ValueError, match="^" + problem.replace("(", r"\(")):
        held_of(message)


class FakeWatch:
    """WatchCatalog as a queue: `send` returns once the watcher has taken (or refused) the message."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[models_pb2.WatchCatalogResponse] = asyncio.Queue()

    async def open(self, known_version: str) -> AsyncIterator[models_pb2.WatchCatalogResponse]:
        while True:
            yield await self.queue.get()
            self.queue.task_done()  # the watcher asks for the next: it is done with this one

    async def send(self, message: models_pb2.WatchCatalogResponse) -> None:
        await self.queue.put(message)
        await self.queue.join()


def watcher_of(watch: FakeWatch) -> CatalogWatcher:
    return SnapshotWatcher("models", watch.open, held_of, lambda message: message.snapshot.version)


async def test_a_refused_snapshot_keeps_the_last_good_agents(tmp_path: Path) -> None:
    agents_dir = folder(tmp_path)
    watch = FakeWatch()
    watcher = watcher_of(watch)
    agents = SnapshotAgentRegistry()
    follow_agents(watcher, agents, Settings(agents_dir=agents_dir))
    watcher.start()
    try:
        good = snapshot(AgentRegistry.load_dir(agents_dir), agents_dir)
        await watch.send(good)
        assert agents.version == good.snapshot.version and agents.names() == ["full", "helper"]
        assert [str(error) for error in agents.errors] == [
            "broken.yaml: config.temperature: Input should be less than or equal to 2"
        ]

        # One broken agent refuses the snapshot whole: its models are not taken either.
        held = watcher.current()
        bad = snapshot(AgentRegistry.load_dir(agents_dir), agents_dir)
        bad.snapshot.agents[1].definition_json = '{"name": "helper", "mode": "boss"}'
        bad.snapshot.version = "bad-version"
        await watch.send(bad)
        assert watcher.refused == 1 and watcher.version == good.snapshot.version and watcher.current() is held
        assert agents.version == good.snapshot.version and agents.get("helper").mode == "subagent"

        (agents_dir / "added.yaml").write_text("name: added\n")
        newer = snapshot(AgentRegistry.load_dir(agents_dir), agents_dir)
        await watch.send(newer)
        assert agents.version == newer.snapshot.version and agents.names() == ["added", "full", "helper"]
    finally:
        await watcher.close()


async def test_the_folder_is_read_once_until_a_snapshot_comes(tmp_path: Path) -> None:
    agents_dir = folder(tmp_path)
    agents = SnapshotAgentRegistry()
    assert agents.names() == [] and agents.version == ""
    assert agents.load_folder(agents_dir)
    assert agents.folder == agents_dir and agents.names() == ["full", "helper"]
    (agents_dir / "later.yaml").write_text("name: later\n")
    assert agents.names() == ["full", "helper"], "no reload: the folder was read once"

    agents.take(AgentRegistry.load_dir(agents_dir), "v1")
    assert agents.folder is None and agents.version == "v1" and "later" in agents.names()
    assert not agents.load_folder(agents_dir), "a snapshot came: the folder is not read"
    assert agents.version == "v1"


async def test_a_snapshot_without_agents_is_an_older_models_service_and_the_folder_is_read(tmp_path: Path) -> None:
    agents_dir = folder(tmp_path)
    watch = FakeWatch()
    watcher = watcher_of(watch)
    agents = SnapshotAgentRegistry()
    follow_agents(watcher, agents, Settings(agents_dir=agents_dir))
    watcher.start()
    try:
        older = snapshot(AgentRegistry({}))  # what a models service sends that predates agents in the snapshot
        await watch.send(older)
        assert watcher.version == older.snapshot.version, "its catalogue is taken"
        assert agents.folder == agents_dir and agents.names() == ["full", "helper"] and agents.version == ""

        newer = snapshot(AgentRegistry.load_dir(agents_dir), agents_dir)
        await watch.send(newer)
        assert agents.version == newer.snapshot.version and agents.folder is None
        await watch.send(older)  # a models service rolled back: the agents held stay
        assert agents.version == newer.snapshot.version and agents.names() == ["full", "helper"]
    finally:
        await watcher.close()
