"""Runtime service entry point: `python -m services.runtime`."""

from __future__ import annotations

import asyncio

from cogmesh.runtime.v1 import runtime_pb2, runtime_pb2_grpc
from services.kit.clients import Clients
from services.kit.logging import log
from services.kit.metrics import BREAKERS, register_breakers
from services.kit.server import App, mount, run
from services.lib.agents import SnapshotAgentRegistry
from services.lib.models.watch import first_wait_s, follow_agents, read_folder_unless_synced
from services.lib.providers import ProviderConfigError, load_providers
from services.runtime.engines import default_registry
from services.runtime.local_model import LocalModel
from services.runtime.local_policy import LocalPolicy
from services.runtime.providers.registry import ProviderRegistry
from services.runtime.servicer import RuntimeServicer
from services.runtime.settings import RuntimeSettings
from services.runtime.tools.builtin import builtin_tools
from services.runtime.tools.catalog import ToolCatalog, ToolServersError


async def build(settings: RuntimeSettings, clients: Clients) -> App:
    try:
        providers = ProviderRegistry(load_providers(settings.providers_file))
        catalog = ToolCatalog.from_file(builtin_tools(), settings.tool_servers_file)
    except (ProviderConfigError, ToolServersError) as exc:
        raise SystemExit(f"runtime: {exc}") from exc
    engines = default_registry()
    if settings.runtime and not engines.is_registered(settings.runtime):
        raise SystemExit(
            f"runtime: COGMESH_RUNTIME={settings.runtime!r} is not a runtime engine; "
            f"known: {', '.join(engines.list_available())}"
        )
    # The agents of the models service's catalogue snapshot (that service reads the folder), filled below.
    agents = SnapshotAgentRegistry()
    # Policy decisions in process, from the snapshot the policy service pushes (its RPCs until then).
    policy = LocalPolicy(clients, agents, settings)
    clients.policy_api = policy
    policy.start()
    servicer = RuntimeServicer(
        clients,
        agents,
        catalog,
        LocalModel(delay_s=settings.local_delay_ms / 1000, reply_tokens=settings.local_reply_tokens),
        providers=providers,
        engines=engines,
        default_runtime=settings.runtime,
        settings=settings,
    )
    register_breakers("runtime", "tool_server", catalog.breaker_states)
    models = servicer.builder.models
    follow_agents(models.watcher, agents, settings)  # one catalogue stream for the models and the agents
    models.start()  # the catalogue snapshot: models resolve in process once it arrives
    # Serve once the first snapshots are held (an informer's HasSynced), or after a bounded wait:
    # until they arrive the services are asked (the agents: the folder, read once), so a control
    # plane that is down delays nothing more.
    wait_s = first_wait_s(settings)
    synced = await asyncio.gather(models.watcher.wait_synced(wait_s), policy.watcher.wait_synced(wait_s))
    read_folder_unless_synced(models.watcher, agents, settings, wait_s)
    if not all(synced):
        log.warning("serving before every snapshot arrived", models=synced[0], policy=synced[1])

    async def unregister() -> None:
        BREAKERS.unregister("runtime", "tool_server")

    return App(
        "runtime",
        [mount(servicer, runtime_pb2, runtime_pb2_grpc, "RuntimeService")],
        # First hand the running turns over to other replicas, then let go of tools and providers.
        on_close=[servicer.runner.close, models.close, catalog.close, providers.close, unregister, policy.close],
        on_serving=[servicer.runner.serving],
    )


def main() -> None:
    run("runtime", build, RuntimeSettings)
