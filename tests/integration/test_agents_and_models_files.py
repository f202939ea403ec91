"""COGMESH_AGENTS_DIR and COGMESH_MODELS_FILE replace the shipped agents and models; they do not add
to them. README's recipe, copies of services/defaults plus one's own, keeps the shipped ones working.
The whole suite in-process, asked through the gateway as any client would."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cogmesh.gateway.v1 import gateway_pb2
from services.suite.settings import SuiteSettings
from tests.integration.conftest import SUITE_SETTINGS, TIMEOUT_S, new_session, running_suite, send

pytestmark = pytest.mark.asyncio

DEFAULTS = Path(__file__).resolve().parents[2] / "services" / "defaults"
MINE_AGENT = """name: mine
description: An agent of one's own.
model: mine-model
mode: primary
"""
MINE_MODEL = """  - id: mine-model
    provider: local
    aliases: [mine]
    description: A model of one's own.
    context_window: 8192
    max_output_tokens: 1024
    capabilities: {tools: true, streaming: true, vision: false, structured_output: false}
    pricing: {input_per_million_usd: 0, output_per_million_usd: 0}
"""


async def catalogue(settings: SuiteSettings) -> tuple[set[str], set[str]]:
    """The agents and model ids the gateway lists under these settings."""
    async with running_suite(settings) as (_, stubs):
        gateway = stubs["gateway"]
        agents = await gateway.ListAgents(gateway_pb2.ListAgentsRequest(), timeout=TIMEOUT_S)
        models = await gateway.ListModels(gateway_pb2.ListModelsRequest(), timeout=TIMEOUT_S)
        return {a.name for a in agents.agents}, {m.id for m in models.models}


async def test_an_agents_dir_and_a_models_file_replace_the_shipped_ones(tmp_path: Path) -> None:
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "mine.yaml").write_text(MINE_AGENT)
    models = tmp_path / "models.yaml"
    models.write_text(f"default_model: mine-model\nmodels:\n{MINE_MODEL}")
    settings = SUITE_SETTINGS.model_copy(update={"agents_dir": agents, "models_file": models})
    assert await catalogue(settings) == ({"mine"}, {"mine-model"})


async def test_copies_of_the_shipped_files_keep_them_beside_ones_own(tmp_path: Path) -> None:
    # README's recipe: cp -r services/defaults/agents my-agents; cp services/defaults/models.yaml my-models.yaml
    agents = tmp_path / "my-agents"
    shutil.copytree(DEFAULTS / "agents", agents)
    (agents / "mine.yaml").write_text(MINE_AGENT)
    models = tmp_path / "my-models.yaml"
    models.write_text((DEFAULTS / "models.yaml").read_text().replace("models:\n", f"models:\n{MINE_MODEL}", 1))
    settings = SUITE_SETTINGS.model_copy(update={"agents_dir": agents, "models_file": models})
    shipped_agents = {path.stem for path in (DEFAULTS / "agents").iterdir() if path.is_file()}
    listed_agents, listed_models = await catalogue(settings)
    assert listed_agents == shipped_agents | {"mine"}
    assert {"cogmesh-local", "mine-model"} <= listed_models
    # The copied `default` agent still finds its prompt files (prompts_dir is relative to the copy).
    async with running_suite(settings) as (_, stubs):
        session_id = await new_session(stubs["gateway"])
        turn = await send(stubs["gateway"], session_id, "What is 17 * 23?")
        assert turn[-1].final.text == "17 * 23 = 391."
