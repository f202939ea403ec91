"""The models service's catalogue snapshot held in another process: models and agents without a round trip.

Each process opens one WatchCatalog stream. The runtime resolves a turn's models from
the snapshot, the gateway checks a named model against it, and every process (runtime,
policy, context, gateway) reads its agents from it: the models service is the one
process that reads the agents folder. A process waits a bounded time at start for the
first snapshot; without one it reads the folder once and takes the snapshot's agents
as soon as one comes.
"""

from __future__ import annotations

from typing import NamedTuple

from cogmesh.models.v1 import models_pb2
from services.kit.clients import Clients
from services.kit.config import Settings
from services.kit.dependencies import ModelsClient
from services.kit.logging import log
from services.kit.snapshots import SnapshotWatcher, stream_of
from services.lib.agents import AgentRegistry, SnapshotAgentRegistry
from services.lib.models.api import agents_of, catalog_of, resolve_model
from services.lib.models.catalog import ModelCatalog

# How long a starting process waits for its first catalogue snapshot before it serves anyway.
FIRST_SNAPSHOT_WAIT_S = 2.0


class HeldCatalog(NamedTuple):
    catalog: ModelCatalog
    strict: bool  # whether the service resolves unknown names strictly
    agents: AgentRegistry


CatalogWatcher = SnapshotWatcher[HeldCatalog, models_pb2.WatchCatalogResponse]


def held_of(message: models_pb2.WatchCatalogResponse) -> HeldCatalog:
    """What a snapshot holds; raises (and the watcher refuses it whole) when a model or an agent does not load."""
    snapshot = message.snapshot
    return HeldCatalog(catalog_of(snapshot), snapshot.strict, agents_of(snapshot))


def catalog_watcher(clients: Clients) -> CatalogWatcher:
    return SnapshotWatcher(
        "models",
        stream_of(
            lambda: ModelsClient.of(clients).WatchCatalog,
            lambda known: models_pb2.WatchCatalogRequest(known_version=known),
        ),
        held_of,
        lambda message: message.snapshot.version,
    )


def resolve_held(
    watcher: CatalogWatcher, request: models_pb2.ResolveModelRequest
) -> models_pb2.ResolveModelResponse | None:
    """ResolveModel's answer from the snapshot held (its errors too); None while none is held."""
    held = watcher.current_or_none()
    if held is None:
        return None
    return resolve_model(held.catalog, request, held.strict)


def follow_agents(watcher: CatalogWatcher, agents: SnapshotAgentRegistry, settings: Settings) -> None:
    """Feed `agents` the agents of every snapshot the watcher applies, starting with the one it holds."""

    def take(held: HeldCatalog, version: str) -> None:
        if held.agents.names() or held.agents.errors:
            agents.take(held.agents, version)
        elif not agents.version and agents.folder is None:
            # A models service older than agents in the snapshot sends none: not "no agents at all".
            _read_folder(agents, settings, "the models service's catalogue snapshot carries no agents (older?)")

    watcher.listeners.append(take)
    held = watcher.current_or_none()
    if held is not None:
        take(held, watcher.version)


def first_wait_s(settings: Settings) -> float:
    return min(settings.call_timeout_s, FIRST_SNAPSHOT_WAIT_S)


def read_folder_unless_synced(
    watcher: CatalogWatcher, agents: SnapshotAgentRegistry, settings: Settings, waited_s: float
) -> None:
    """After the start's wait: without agents from a snapshot, the agents folder read once (no reload), and why."""
    if agents.version or agents.folder is not None:
        return
    if watcher.refused:
        why = f"the models service's catalogue snapshots were refused ({watcher.refused}; see 'snapshot refused')"
    else:
        why = f"no catalogue snapshot from the models service ({settings.models_addr}) within {waited_s:g} s"
    _read_folder(agents, settings, why)


def _read_folder(agents: SnapshotAgentRegistry, settings: Settings, why: str) -> None:
    try:
        read = agents.load_folder(settings.agents_dir)
    except OSError as exc:  # no folder here: the agents come with the first snapshot that carries them
        log.error("no agents until a catalogue snapshot carries them: " + why, error=str(exc))
        return
    if read:
        log.warning(
            "agents read from the folder once: " + why,
            folder=str(agents.folder),
            agents=agents.names(),
            then="the agents of the first snapshot that carries them",
        )


async def agents_of_catalog(clients: Clients, settings: Settings) -> tuple[SnapshotAgentRegistry, CatalogWatcher]:
    """A process's agents (policy, context, gateway): fed by its catalogue watcher, started and waited for."""
    watcher = catalog_watcher(clients)
    agents = SnapshotAgentRegistry()
    follow_agents(watcher, agents, settings)
    watcher.start()
    wait_s = first_wait_s(settings)
    await watcher.wait_synced(wait_s)
    read_folder_unless_synced(watcher, agents, settings, wait_s)
    return agents, watcher
