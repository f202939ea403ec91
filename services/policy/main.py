"""Policy service entry point: `python -m services.policy`."""

from __future__ import annotations

import asyncio
import contextlib

from cogmesh.policy.v1 import policy_pb2, policy_pb2_grpc
from services.kit.clients import Clients
from services.kit.metrics import register_breakers
from services.kit.server import App, mount, run
from services.kit.snapshots import SnapshotFeed
from services.lib.models.watch import agents_of_catalog
from services.lib.policy.api import snapshot_of
from services.lib.policy.assembly import Shared
from services.lib.policy.compactor import ContextServiceCompactor
from services.lib.policy.config import DEFAULT_POLICY_DIR, ConfigRejected, ConfigStore, PolicyConfig
from services.lib.policy.engine import PolicyEngine
from services.lib.policy.hook_client import HookChannels, RemoteHook
from services.lib.policy.hooks import HookHandler
from services.lib.policy.ratelimit import MemoryWindowStore, RedisWindowStore, WindowStore
from services.lib.policy.ratelimit import redis_client as connect_redis
from services.policy.servicer import PolicyServicer
from services.policy.settings import PolicySettings


async def build(settings: PolicySettings, clients: Clients) -> App:
    directory = settings.policy_dir or DEFAULT_POLICY_DIR
    try:
        store = ConfigStore(directory)
    except ConfigRejected as exc:
        raise SystemExit(f"policy: configuration in {directory} rejected: {exc}") from exc

    channels = HookChannels()

    def remote_hook(address: str, timeout_s: float) -> HookHandler:
        return RemoteHook(channels, address, timeout_s)

    # Rate windows are shared by every replica through Redis when the suite has one.
    redis_url = settings.redis_url
    redis_client = None
    windows: WindowStore = MemoryWindowStore()
    if redis_url:
        redis_client = connect_redis(redis_url, settings.redis_timeout_s)
        prefix = settings.redis_key_prefix + "policy:ratelimit:"
        windows = RedisWindowStore(redis_client, prefix)

    shared = Shared(windows, remote_hook, ContextServiceCompactor(clients), {})
    # Breaker states are read when /metrics is scraped, never on the request path.
    register_breakers(
        "policy",
        "interceptor",
        lambda: {
            f"{label}:{name}": b.state.value for (label, *_), r in shared.breakers.items() for name, b in r.items()
        },
    )
    # The agents come with the models service's catalogue snapshot (that service reads the folder).
    agents, catalogue = await agents_of_catalog(clients, settings)
    engine = PolicyEngine(agents, store, shared)

    # Runtimes decide from the configuration in force: published at start and after each
    # good reload (a rejected one publishes nothing, so watchers keep the last good version).
    feed: SnapshotFeed[policy_pb2.PolicySnapshot] = SnapshotFeed()

    async def publish(config: PolicyConfig) -> None:
        await feed.publish(config.digest, snapshot_of(config))

    await publish(store.current)
    store.listeners.append(publish)
    watcher = asyncio.create_task(store.watch(settings.policy_reload_s))

    async def close() -> None:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        await channels.close()
        await catalogue.close()
        if redis_client is not None:
            await redis_client.aclose()

    servicer = PolicyServicer(engine, feed)
    return App(
        "policy",
        [mount(servicer, policy_pb2, policy_pb2_grpc, "PolicyService")],
        on_close=[close],
        on_drained=[servicer.end_watches],
    )


def main() -> None:
    run("policy", build, PolicySettings)
