"""Models added or removed on one replica reach the others by announcement (Redis pub/sub), not by a poll.

An idle models service sends Redis nothing: the store's version is read when a change
is announced, after each (re)subscription (announcements made meanwhile were missed)
and, as a safety net, on the registry's slow recheck clock. Real Redis of each form.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest_asyncio
import redis
import yaml

from services.kit.redis_pool import Client, pooled_client
from services.lib.models.catalog import ModelSpec
from services.lib.redis_keys import models_keys
from services.models.registry import ModelRegistry, RedisModelStore
from tests.support.redis_server import RedisServer, unique_prefix
from tests.support.redis_topologies import RedisUnderTest

NEVER = 3600.0  # the recheck clock never comes round in these tests: only announcements count


def spec(model_id: str) -> ModelSpec:
    return ModelSpec.model_validate(
        {
            "id": model_id,
            "provider": "acme",
            "description": f"{model_id} test model",
            "context_window": 8000,
            "max_output_tokens": 1000,
            "capabilities": {"tools": True, "streaming": True, "vision": False, "structured_output": False},
            "pricing": {"input_per_million_usd": 1.5, "output_per_million_usd": 3.0},
        }
    )


class Replica:
    """A models service's registry on a Redis store, following the store's announcements."""

    def __init__(self, catalog_file: Path, client: Client, prefix: str) -> None:
        self.store = RedisModelStore(client, prefix)
        self.registry = ModelRegistry(catalog_file, self.store, refresh_s=0, clock=lambda: 0.0)
        self.registry.store_announces_changes(NEVER)
        self.version_reads = 0
        self.changes = asyncio.Condition()
        self.heard = 0
        self._follower: asyncio.Task[None] | None = None
        read = self.store.version

        async def counted() -> str:
            self.version_reads += 1
            return await read()

        self.store.version = counted  # type: ignore[method-assign]

    async def start(self) -> None:
        await self.registry.start()
        self._follower = asyncio.create_task(self.store.follow(self._changed))
        await self.heard_more_than(0)  # subscribed: the first call follows the subscription

    async def _changed(self) -> None:
        await self.registry.store_changed()
        async with self.changes:
            self.heard += 1
            self.changes.notify_all()

    async def heard_more_than(self, count: int) -> None:
        async with self.changes:
            await self.changes.wait_for(lambda: self.heard > count)

    async def until(self, holds: Callable[[ModelRegistry], bool]) -> None:
        """Until the registry satisfies `holds` after some announcement (each one wakes the check)."""
        while True:
            heard = self.heard
            if holds(self.registry):
                return
            await self.heard_more_than(heard)

    async def close(self) -> None:
        if self._follower is not None:
            self._follower.cancel()
            await asyncio.gather(self._follower, return_exceptions=True)


def has(model_id: str) -> Callable[[ModelRegistry], bool]:
    return lambda registry: registry._catalog.get_or_none(model_id) is not None


@pytest_asyncio.fixture
async def catalog_file(tmp_path: Path) -> Path:
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump({"default_model": "base", "models": [spec("base").model_dump(mode="json")]}))
    return path


@pytest_asyncio.fixture
async def client(any_redis: RedisUnderTest) -> AsyncIterator[Client]:
    made = pooled_client(any_redis.url, 2.0)
    try:
        yield made
    finally:
        await made.aclose()


async def test_a_change_on_one_replica_reaches_the_other_without_a_poll(
    catalog_file: Path, client: Client, any_redis: RedisUnderTest
) -> None:
    one, two = Replica(catalog_file, client, any_redis.prefix), Replica(catalog_file, client, any_redis.prefix)
    await one.start()
    await two.start()
    try:
        reads = two.version_reads
        for _ in range(3):  # requests on an idle catalogue: the file's stamp, no Redis
            assert (await two.registry.catalog()).get_or_none("added") is None
        assert two.version_reads == reads

        await one.registry.add(spec("added"))
        await two.until(has("added"))
        assert await one.registry.remove("added")
        await two.until(lambda registry: not has("added")(registry))
    finally:
        await one.close()
        await two.close()


async def test_a_change_made_while_the_subscription_was_lost_is_read_on_subscribing_again(
    catalog_file: Path, private_redis: RedisServer
) -> None:
    client = pooled_client(private_redis.url, 2.0)
    prefix = unique_prefix("announce")
    one, two = Replica(catalog_file, client, prefix), Replica(catalog_file, client, prefix)
    await one.start()
    await two.start()
    try:
        heard = two.heard
        # Change the store without an announcement, then drop the subscribers' connections.
        added, version = models_keys(prefix)
        admin = redis.Redis.from_url(private_redis.url)
        try:
            admin.hset(added, "quiet", spec("quiet").model_dump_json())
            admin.incr(version)
            assert two.registry._catalog.get_or_none("quiet") is None
            admin.client_kill_filter(_type="pubsub")
        finally:
            admin.close()
        await two.heard_more_than(heard)  # subscribed again
        await two.until(has("quiet"))
    finally:
        await one.close()
        await two.close()
        await client.aclose()
