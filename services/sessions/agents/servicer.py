"""cogmesh.sessions.v1.AgentStoreService: the agent store over gRPC, for the gateways.

The requests' field rules (agents.proto: tenant ids, agent names and aliases, the definition's size,
versions, page sizes) are checked before the servicer runs; what is left here is across fields.
"""

from __future__ import annotations

from typing import Any

from cogmesh.sessions.v1 import agents_pb2 as pb
from cogmesh.sessions.v1 import agents_pb2_grpc
from services.kit.config import Settings
from services.kit.errors import Violations
from services.kit.logging import log
from services.kit.redis_pool import Client
from services.kit.redis_url import redact
from services.sessions.agents.redis_store import RedisAgentStore
from services.sessions.agents.store import AgentStore, MemoryAgentStore, next_token, page_bounds


def open_store(settings: Settings, client: Client | None = None) -> AgentStore:
    """Redis when COGMESH_REDIS_URL is set (the sessions' own Redis, same key prefix), else memory.

    `client`: a Redis client already open on that URL to share; its owner closes it."""
    if not settings.redis_url:
        return MemoryAgentStore()
    log.info("agent store", kind="redis", url=redact(settings.redis_url), shared_client=client is not None)
    if client is not None:
        return RedisAgentStore(client, settings.redis_key_prefix, owns_client=False)
    return RedisAgentStore.from_url(settings.redis_url, settings.redis_key_prefix, settings.redis_timeout_s)


class AgentStoreServicer(agents_pb2_grpc.AgentStoreServiceServicer):
    def __init__(self, store: AgentStore):
        self.store = store

    async def PutAgentVersion(self, request: pb.PutAgentVersionRequest, context: Any) -> pb.PutAgentVersionResponse:
        record = pb.StoredAgentVersion(
            tenant_id=request.tenant_id,
            name=request.name,
            definition_json=request.definition_json,
            created_by=request.created_by,
        )
        record.create_time.GetCurrentTime()
        stored = await self.store.put(record, request.create, request.expected_version)
        return pb.PutAgentVersionResponse(agent=stored)

    async def GetAgentVersion(self, request: pb.GetAgentVersionRequest, context: Any) -> pb.GetAgentVersionResponse:
        problems = Violations()
        problems.check(not (request.version and request.alias), "alias", "give a version or an alias, not both")
        problems.raise_if_any()
        found = await self.store.get(request.tenant_id, request.name, request.version, request.alias)
        return pb.GetAgentVersionResponse(agent=found)

    async def ListAgentVersions(
        self, request: pb.ListAgentVersionsRequest, context: Any
    ) -> pb.ListAgentVersionsResponse:
        offset, size = page_bounds(request.page_size, request.page_token)
        versions, total, aliases = await self.store.list_versions(request.tenant_id, request.name, offset, size)
        return pb.ListAgentVersionsResponse(
            versions=versions, next_page_token=next_token(offset, size, total), aliases=aliases
        )

    async def ListAgents(self, request: pb.ListAgentsRequest, context: Any) -> pb.ListAgentsResponse:
        offset, size = page_bounds(request.page_size, request.page_token)
        agents, total = await self.store.list_agents(request.tenant_id, offset, size)
        return pb.ListAgentsResponse(agents=agents, next_page_token=next_token(offset, size, total))

    async def DeleteAgent(self, request: pb.DeleteAgentRequest, context: Any) -> pb.DeleteAgentResponse:
        return pb.DeleteAgentResponse(deleted_versions=await self.store.delete(request.tenant_id, request.name))

    async def SetAgentAlias(self, request: pb.SetAgentAliasRequest, context: Any) -> pb.SetAgentAliasResponse:
        agent, previous = await self.store.set_alias(request.tenant_id, request.name, request.alias, request.version)
        return pb.SetAgentAliasResponse(agent=agent, previous_version=previous)

    async def DeleteAgentAlias(self, request: pb.DeleteAgentAliasRequest, context: Any) -> pb.DeleteAgentAliasResponse:
        previous = await self.store.delete_alias(request.tenant_id, request.name, request.alias)
        return pb.DeleteAgentAliasResponse(previous_version=previous)
