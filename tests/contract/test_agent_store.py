"""One contract, every agent store: in memory and on Redis (standalone, Sentinel, Cluster).

What the gateways rely on: versions are numbered 1, 2, ... per agent and never change; a
write that names the version it read loses to one that came first; aliases point at
existing versions only; tenants never see each other's agents.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest

from cogmesh.sessions.v1 import agents_pb2 as pb
from services.kit.errors import NotFound
from services.kit.redis_pool import pooled_client
from services.sessions.agents.redis_store import RedisAgentStore
from services.sessions.agents.store import AgentStore, AlreadyExists, Conflict, MemoryAgentStore
from tests.support.redis_topologies import REDIS_TOPOLOGIES, redis_for


@pytest.fixture(params=["memory", *REDIS_TOPOLOGIES])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[AgentStore]:
    with contextlib.ExitStack() as stack:
        made: AgentStore
        if request.param == "memory":
            made = MemoryAgentStore()
        else:
            redis = stack.enter_context(redis_for(request, request.param))
            made = RedisAgentStore(pooled_client(redis.url, 2.0), redis.prefix)
        try:
            yield made
        finally:
            await made.close()


def version(name: str, text: str, tenant: str = "acme", by: str = "alice") -> pb.StoredAgentVersion:
    record = pb.StoredAgentVersion(tenant_id=tenant, name=name, definition_json=text, created_by=by)
    record.create_time.FromSeconds(1_700_000_000)
    return record


async def test_versions_are_numbered_immutable_and_read_back(store: AgentStore) -> None:
    first = await store.put(version("helper", '{"v": 1}'), create=True, expected_version=0)
    assert (first.version, first.definition_json, first.created_by) == (1, '{"v": 1}', "alice")
    with pytest.raises(AlreadyExists):
        await store.put(version("helper", '{"v": 9}'), create=True, expected_version=0)
    second = await store.put(version("helper", '{"v": 2}', by="bob"), create=False, expected_version=1)
    assert second.version == 2
    assert (await store.get("acme", "helper")).definition_json == '{"v": 2}'  # the latest
    old = await store.get("acme", "helper", version=1)
    assert (old.version, old.definition_json, old.created_by) == (1, '{"v": 1}', "alice")
    assert old.create_time.seconds == 1_700_000_000
    with pytest.raises(NotFound, match="no version 3"):
        await store.get("acme", "helper", version=3)
    with pytest.raises(NotFound, match="no agent 'nobody'"):
        await store.put(version("nobody", "{}"), create=False, expected_version=0)


async def test_a_write_naming_a_stale_version_loses(store: AgentStore) -> None:
    await store.put(version("helper", '{"v": 1}'), create=True, expected_version=0)
    await store.put(version("helper", '{"v": 2}'), create=False, expected_version=1)
    with pytest.raises(Conflict, match="at version 2, not 1"):
        await store.put(version("helper", '{"v": "late"}'), create=False, expected_version=1)
    assert (await store.get("acme", "helper")).version == 2
    # expected_version 0: whatever is latest.
    assert (await store.put(version("helper", '{"v": 3}'), create=False, expected_version=0)).version == 3


async def test_aliases_point_at_existing_versions_and_move(store: AgentStore) -> None:
    for n in (1, 2, 3):
        await store.put(version("helper", f'{{"v": {n}}}'), create=n == 1, expected_version=0)
    pointed, previous = await store.set_alias("acme", "helper", "prod", 2)
    assert (pointed.version, list(pointed.aliases), previous) == (2, ["prod"], 0)
    assert (await store.get("acme", "helper", alias="prod")).definition_json == '{"v": 2}'
    with pytest.raises(NotFound, match="no version 7"):
        await store.set_alias("acme", "helper", "prod", 7)
    moved, previous = await store.set_alias("acme", "helper", "prod", 3)
    assert (moved.version, previous) == (3, 2)
    await store.set_alias("acme", "helper", "canary", 3)
    assert sorted((await store.get("acme", "helper")).aliases) == ["canary", "prod"]
    versions, total, aliases = await store.list_versions("acme", "helper", 0, 2)
    assert [v.version for v in versions] == [3, 2] and total == 3
    assert aliases == {"prod": 3, "canary": 3}
    rest, _, _ = await store.list_versions("acme", "helper", 2, 2)
    assert [v.version for v in rest] == [1]
    assert await store.delete_alias("acme", "helper", "canary") == 3
    with pytest.raises(NotFound, match="no alias 'canary'"):
        await store.get("acme", "helper", alias="canary")
    with pytest.raises(NotFound, match="no alias 'canary'"):
        await store.delete_alias("acme", "helper", "canary")


async def test_delete_takes_every_version_and_alias_and_tenants_are_apart(store: AgentStore) -> None:
    await store.put(version("helper", '{"v": 1}'), create=True, expected_version=0)
    await store.put(version("helper", '{"v": 2}'), create=False, expected_version=0)
    await store.set_alias("acme", "helper", "prod", 1)
    await store.put(version("helper", '{"other": true}', tenant="globex"), create=True, expected_version=0)
    await store.put(version("aardvark", "{}"), create=True, expected_version=0)
    listed, total = await store.list_agents("acme", 0, 10)
    assert [(a.name, a.version) for a in listed] == [("aardvark", 1), ("helper", 2)] and total == 2
    assert await store.delete("acme", "helper") == 2
    with pytest.raises(NotFound):
        await store.get("acme", "helper", alias="prod")
    with pytest.raises(NotFound):
        await store.delete("acme", "helper")
    assert (await store.get("globex", "helper")).definition_json == '{"other": true}'
    # A name deleted can be created again, from version 1, with no alias left over.
    again = await store.put(version("helper", '{"v": "new"}'), create=True, expected_version=0)
    assert (again.version, list(again.aliases)) == (1, [])
