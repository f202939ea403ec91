"""Webhooks: subscriptions to turn outcomes, delivered by the sessions service (docs/webhooks.md).

`open_webhooks` builds the pieces main.py installs: the store (memory or Redis, like the
session store), the session store wrapped so outcomes are enqueued as they are logged,
the dispatcher task, and the WebhookStoreService servicer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from services.sessions.settings import SessionsSettings
from services.sessions.store import SessionStore
from services.sessions.webhooks.dispatcher import Dispatcher, Policy
from services.sessions.webhooks.hooked import HookedSessionStore
from services.sessions.webhooks.secrets import Sealer
from services.sessions.webhooks.servicer import WebhookStoreServicer
from services.sessions.webhooks.store import MemoryWebhookStore, WebhookStore

if TYPE_CHECKING:
    from services.kit.redis_pool import Client  # redis loads only where the Redis store is used


@dataclass
class Webhooks:
    store: WebhookStore
    sessions: SessionStore  # the session store that enqueues what it logs
    dispatcher: Dispatcher
    servicer: WebhookStoreServicer
    redis: Client | None = None  # the Redis client of the store, for another store to share (None: memory)

    async def close(self) -> None:
        await self.dispatcher.close()
        await self.store.close()


def policy_of(settings: SessionsSettings) -> Policy:
    return Policy(
        allow_private=settings.webhook_allow_private_targets,
        timeout_s=settings.webhook_timeout_s,
        retry_first_s=settings.webhook_retry_first_s,
        retry_max_s=settings.webhook_retry_max_s,
        retry_window_s=settings.webhook_retry_window_s,
        poll_s=settings.webhook_poll_s,
    )


def open_webhooks(settings: SessionsSettings, sessions: SessionStore, client: Client | None = None) -> Webhooks:
    """`client`: a Redis client already open on COGMESH_REDIS_URL to share (its owner closes it), else
    the store opens a pool of its own."""
    store: WebhookStore
    redis: Client | None = None
    if settings.redis_url:
        from services.sessions.webhooks.redis_store import RedisWebhookStore

        if client is not None:
            found = RedisWebhookStore(client, settings.redis_key_prefix, owns_client=False)
        else:
            found = RedisWebhookStore.from_url(settings.redis_url, settings.redis_key_prefix, settings.redis_timeout_s)
        store, redis = found, found.client
    else:
        store = MemoryWebhookStore()
    sealer = Sealer.from_file(settings.webhook_secrets_key_file, ephemeral=not settings.redis_url)
    policy = policy_of(settings)
    dispatcher = Dispatcher(store, sessions, sealer, policy)
    hooked = HookedSessionStore(sessions, store, on_enqueued=dispatcher.wake)
    servicer = WebhookStoreServicer(store, sessions, sealer, policy, on_enqueued=dispatcher.wake)
    dispatcher.start()
    return Webhooks(store, hooked, dispatcher, servicer, redis)
