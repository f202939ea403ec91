"""Sessions service entry point: `python -m services.sessions`.

The store follows the settings: COGMESH_REDIS_URL (or --redis-url) selects the Redis
store that every replica shares; without it sessions live in this process's memory.
"""

from __future__ import annotations

from cogmesh.sessions.v1 import (
    agents_pb2,
    agents_pb2_grpc,
    schedules_pb2,
    schedules_pb2_grpc,
    sessions_pb2,
    sessions_pb2_grpc,
    webhooks_pb2,
    webhooks_pb2_grpc,
)
from services.kit.clients import Clients
from services.kit.logging import log
from services.kit.redis_pool import ReplicaWait
from services.kit.redis_url import redact
from services.kit.server import App, mount, run
from services.sessions.agents import servicer as agents
from services.sessions.model import StoreUnavailable
from services.sessions.redis_store import RedisSessionStore
from services.sessions.schedules import servicer as schedules
from services.sessions.servicer import SessionsServicer
from services.sessions.settings import SessionsSettings
from services.sessions.store import MemorySessionStore, SessionStore
from services.sessions.webhooks import open_webhooks


async def open_store(settings: SessionsSettings) -> SessionStore:
    if not settings.redis_url:
        return MemorySessionStore(
            session_ttl_s=settings.session_ttl_s,
            event_retention=settings.event_retention,
            subscriber_max_lag=settings.subscriber_max_lag,
            fanout_messages_per_s=settings.fanout_messages_per_s,
        )
    store = RedisSessionStore.from_url(
        settings.redis_url,
        settings.redis_key_prefix,
        settings.session_ttl_s,
        settings.redis_timeout_s,
        wait=ReplicaWait.of(settings),
        event_retention=settings.event_retention,
        subscriber_max_lag=settings.subscriber_max_lag,
        fanout_messages_per_s=settings.fanout_messages_per_s,
    )
    try:
        await store.ping()  # fail at boot with a clear message rather than on the first call
    except StoreUnavailable as exc:
        await store.close()
        raise SystemExit(f"sessions: cannot reach Redis at {redact(settings.redis_url)}: {exc.detail}") from exc
    log.info("session store", kind="redis", url=redact(settings.redis_url), prefix=settings.redis_key_prefix)
    return store


async def build(settings: SessionsSettings, clients: Clients) -> App:
    store = await open_store(settings)
    # One Redis pool for the process: the schedules and webhooks stores share the session store's.
    shared = store.client if isinstance(store, RedisSessionStore) else None
    webhooks = open_webhooks(settings, store, client=shared)  # every outcome it logs is enqueued for webhooks
    servicer = SessionsServicer(webhooks.sessions)
    schedule_store = schedules.open_store(settings, client=shared)
    schedule_servicer = schedules.ScheduleStoreServicer(schedule_store)
    agent_store = agents.open_store(settings, client=shared)
    return App(
        "sessions",
        [
            mount(servicer, sessions_pb2, sessions_pb2_grpc, "SessionsService"),
            mount(schedule_servicer, schedules_pb2, schedules_pb2_grpc, "ScheduleStoreService"),
            mount(webhooks.servicer, webhooks_pb2, webhooks_pb2_grpc, "WebhookStoreService"),
            mount(agents.AgentStoreServicer(agent_store), agents_pb2, agents_pb2_grpc, "AgentStoreService"),
        ],
        on_close=[webhooks.close, schedule_store.close, agent_store.close, store.close],  # the pool's owner last
        on_drained=[servicer.drain],
    )


def main() -> None:
    run("sessions", build, SessionsSettings)
