"""One owner reads the agents folder (issue 32, item 1): the models service.

An agent file added to or changed in the folder reaches the runtime, the policy and
context services and the gateway in the models service's catalogue snapshot; none of
them reads the folder. With the models service down at start, each still starts from
the folder (read once) and takes the snapshot's agents once the service is up.
The whole suite runs in this process, so the test counts who loads the folder.
"""

from __future__ import annotations

import asyncio
import shutil
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from cogmesh.context.v1 import context_pb2
from cogmesh.gateway.v1 import gateway_pb2
from cogmesh.policy.v1 import policy_pb2
from services.kit.server import RunningServer, start
from services.lib.agents import DEFAULT_AGENTS_DIR, AgentRegistry, ReloadingAgentRegistry, SnapshotAgentRegistry
from services.models import main as models_main
from services.suite.inprocess import ORDER, Suite
from services.suite.settings import SuiteSettings
from tests.integration.conftest import (
    STUB_CLASSES,
    SUITE_SETTINGS,
    TIMEOUT_S,
    new_session,
    payload,
    running_suite,
    send,
)
from tests.support.ports import free_port

pytestmark = pytest.mark.asyncio(loop_scope="module")

FRESH = "---\nmode: all\ndescription: {description}\n---\nI am the fresh agent, {description}.\n"


@pytest.fixture
def agents_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "agents"
    shutil.copytree(DEFAULT_AGENTS_DIR, folder)
    return folder


@pytest.fixture
def folder_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Who loads the agents folder: "owner" (the models service's reloading registry) or "once" (a fallback)."""
    reads: Counter[str] = Counter()
    load_dir = AgentRegistry.load_dir.__func__  # type: ignore[attr-defined]
    owner_init, load_folder = ReloadingAgentRegistry.__init__, SnapshotAgentRegistry.load_folder

    def counted_load_dir(cls: type[AgentRegistry], path: Path | str) -> AgentRegistry:
        reads["load_dir"] += 1
        return load_dir(cls, path)  # type: ignore[no-any-return]

    def counted_owner(self: ReloadingAgentRegistry, *args: Any, **kwargs: Any) -> None:
        reads["owner"] += 1
        owner_init(self, *args, **kwargs)

    def counted_once(self: SnapshotAgentRegistry, agents_dir: Path | None) -> bool:
        reads["once"] += 1
        return load_folder(self, agents_dir)

    monkeypatch.setattr(AgentRegistry, "load_dir", classmethod(counted_load_dir))
    monkeypatch.setattr(ReloadingAgentRegistry, "__init__", counted_owner)
    monkeypatch.setattr(SnapshotAgentRegistry, "load_folder", counted_once)
    yield reads


def registries(servers: dict[str, RunningServer]) -> dict[str, SnapshotAgentRegistry]:
    """The agents each process other than the models service decides with."""
    held = {
        "runtime": servers["runtime"].app.mounts[0].servicer.agents,
        "policy": servers["policy"].app.mounts[0].servicer.engine.agents,
        "context": servers["context"].app.mounts[0].servicer.agents,
        "gateway": servers["gateway"].app.mounts[0].servicer.agents,
    }
    assert all(isinstance(registry, SnapshotAgentRegistry) for registry in held.values()), held
    return held


def owner(servers: dict[str, RunningServer]) -> ReloadingAgentRegistry:
    registry = servers["models"].app.mounts[0].servicer.publisher.agents
    assert isinstance(registry, ReloadingAgentRegistry)
    return registry


def published(servers: dict[str, RunningServer]) -> str:
    return str(servers["models"].app.mounts[0].servicer.publisher.feed.version)


async def until(condition: Callable[[], bool], what: str) -> None:
    """Wait for `condition` (the snapshot travels on its own; the holders' state is polled)."""
    async with asyncio.timeout(TIMEOUT_S):
        while not condition():  # noqa: ASYNC110 - the holders are other servers' state, read here
            await asyncio.sleep(0.02)
    assert condition(), what


async def all_hold(servers: dict[str, RunningServer], holds: Callable[[SnapshotAgentRegistry], bool]) -> None:
    """Until every holder has the version the models service publishes and it satisfies `holds`."""
    await until(
        lambda: all(r.version == published(servers) and holds(r) for r in registries(servers).values()),
        "every process holds the published agents",
    )


async def reached_everywhere(stubs: dict[str, Any], agent: str, description: str) -> None:
    """The agent as each service answers for it: listed, routed, prompted, and a turn with it runs."""
    listed = await stubs["gateway"].ListAgents(gateway_pb2.ListAgentsRequest(), timeout=TIMEOUT_S)
    assert {a.name: a.description for a in listed.agents}[agent] == description
    role = await stubs["policy"].ResolveRole(policy_pb2.ResolveRoleRequest(agent=agent, text="hi"), timeout=TIMEOUT_S)
    assert role.HasField("role")
    prompt = await stubs["context"].BuildContext(
        context_pb2.BuildContextRequest(agent=agent, user_text="hi"), timeout=TIMEOUT_S
    )
    assert f"I am the fresh agent, {description}." in prompt.system_prompt
    session_id = await new_session(stubs["gateway"], agent=agent)
    events = await send(stubs["gateway"], session_id, "hello")
    assert payload(events[-1]) == "final", events[-1]


async def test_an_agent_added_or_changed_reaches_every_process_in_the_snapshot(
    agents_dir: Path, folder_reads: Counter[str]
) -> None:
    settings = SUITE_SETTINGS.model_copy(update={"agents_dir": agents_dir, "models_refresh_s": 0.1})
    async with running_suite(settings) as (suite, stubs):
        servers = suite.servers
        # One process read the folder: the models service, once at start.
        assert folder_reads == Counter(owner=1, load_dir=1)
        await all_hold(servers, lambda r: "default" in r.names())

        (agents_dir / "fresh.md").write_text(FRESH.format(description="added while running"))
        await all_hold(servers, lambda r: "fresh" in r.names())
        await reached_everywhere(stubs, "fresh", "added while running")

        (agents_dir / "fresh.md").write_text(FRESH.format(description="changed while running"))
        await all_hold(servers, lambda r: r.get("fresh").description == "changed while running")
        await reached_everywhere(stubs, "fresh", "changed while running")

        (agents_dir / "fresh.md").unlink()
        await all_hold(servers, lambda r: "fresh" not in r.names())
        listed = await stubs["gateway"].ListAgents(gateway_pb2.ListAgentsRequest(), timeout=TIMEOUT_S)
        assert "fresh" not in {a.name for a in listed.agents}

        # Every load of the folder was the owner's: its start and one per change it saw.
        assert folder_reads == Counter(owner=1, load_dir=1 + owner(servers).reloads)
        assert owner(servers).reloads >= 3


async def start_without_models(settings: SuiteSettings) -> tuple[Suite, str, SuiteSettings]:
    """Every service but the models service, which is to listen on the address returned (and their settings)."""
    address = f"127.0.0.1:{free_port()}"
    settings = settings.model_copy(update={"models_addr": address})
    servers: dict[str, RunningServer] = {}
    for name, build in ORDER:
        if name != "models":
            servers[name] = await start(build, settings, "127.0.0.1:0")
            settings = settings.model_copy(update={f"{name}_addr": servers[name].address})
    return Suite(servers, settings), address, settings


async def test_with_the_models_service_down_at_start_each_process_reads_the_folder_once(
    agents_dir: Path, folder_reads: Counter[str]
) -> None:
    # A short call deadline: each process waits min(it, 2 s) for the first snapshot.
    settings = SUITE_SETTINGS.model_copy(
        update={"agents_dir": agents_dir, "models_refresh_s": 0.1, "call_timeout_s": 1}
    )
    suite, address, settings = await start_without_models(settings)
    channels = {name: grpc.aio.insecure_channel(server.address) for name, server in suite.servers.items()}
    stubs = {name: STUB_CLASSES[name](channel) for name, channel in channels.items()}
    try:
        held = registries(suite.servers)
        assert folder_reads == Counter(once=4, load_dir=4), "each process read the folder itself, once"
        for name, registry in held.items():
            assert registry.folder == agents_dir and registry.version == "", name
            assert "default" in registry.names(), name
        listed = await stubs["gateway"].ListAgents(gateway_pb2.ListAgentsRequest(), timeout=TIMEOUT_S)
        assert "default" in {a.name for a in listed.agents}

        # Read once: a file added now is not seen until the models service publishes it.
        (agents_dir / "fresh.md").write_text(FRESH.format(description="added while models was down"))
        assert all("fresh" not in registry.names() for registry in held.values())

        suite.servers["models"] = await start(models_main.build, settings, address)
        await all_hold(suite.servers, lambda r: "fresh" in r.names() and r.folder is None)
        await reached_everywhere(stubs, "fresh", "added while models was down")
        assert folder_reads == Counter(once=4, owner=1, load_dir=5 + owner(suite.servers).reloads)
    finally:
        for channel in channels.values():
            await channel.close()
        await suite.stop(0)
