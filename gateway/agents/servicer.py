"""cogmesh.gateway.v1.AgentService: the tenant's versioned agents, stored by the sessions service.

The built-in agents (the agents folder, from the catalogue snapshot) answer reads as version 0,
`native`, and refuse changes; a tenant's agent may not take a built-in's name. Every change needs
the key's "agents:write" permission and is logged as an audit event with its principal. The requests'
field rules (agents.proto: names, aliases, versions, page sizes) are checked before the servicer runs.
"""

from __future__ import annotations

import json
from typing import Any

import grpc

from cogmesh.common.v1 import errors_pb2
from cogmesh.gateway.v1 import agents_pb2 as api
from cogmesh.gateway.v1 import agents_pb2_grpc
from cogmesh.runtime.v1 import runtime_pb2
from cogmesh.sessions.v1 import agents_pb2 as store
from gateway import auth
from gateway.agents import definitions
from services.kit.clients import Clients
from services.kit.dependencies import AgentStoreClient, RuntimeClient
from services.kit.errors import CogmeshError, DependencyError, FailedPrecondition, InvalidArgument, NotFound
from services.kit.logging import log
from services.lib.agents import AgentDefinition, AgentRegistry, agent_from_json
from services.lib.models.watch import CatalogWatcher
from services.lib.stored_agents import StoredAgents


class AlreadyExists(CogmeshError):
    code = grpc.StatusCode.ALREADY_EXISTS
    reason = errors_pb2.ERROR_REASON_AGENT_EXISTS


class Conflict(CogmeshError):
    code = grpc.StatusCode.ABORTED
    reason = errors_pb2.ERROR_REASON_AGENT_VERSION_CONFLICT


async def _put(client: AgentStoreClient, request: store.PutAgentVersionRequest) -> store.StoredAgentVersion:
    """The store's ALREADY_EXISTS and ABORTED are the caller's answer too (the kit maps them to INTERNAL)."""
    try:
        return (await client.PutAgentVersion(request)).agent
    except DependencyError as exc:
        if exc.status_code == grpc.StatusCode.ALREADY_EXISTS:
            raise AlreadyExists(exc.status_message, metadata={"agent": request.name}) from exc
        if exc.status_code == grpc.StatusCode.ABORTED:
            info = exc.error_info
            latest = (
                {"latest_version": info.metadata["latest_version"]}
                if info and "latest_version" in info.metadata
                else {}
            )
            raise Conflict(exc.status_message, metadata={"agent": request.name, **latest}) from exc
        raise


def _builtin_read_only(name: str) -> FailedPrecondition:
    return FailedPrecondition(
        f"agent {name!r} is a built-in (the agents folder): read-only here; create an agent of another name",
        metadata={"agent": name},
    )


def _public(record: store.StoredAgentVersion) -> api.AgentVersion:
    definition = agent_from_json(record.name, record.definition_json)
    return api.AgentVersion(
        name=record.name,
        version=record.version,
        definition=definitions.to_struct(definition),
        create_time=record.create_time,
        created_by=record.created_by,
        aliases=list(record.aliases),
    )


def _native(agent: AgentDefinition) -> api.AgentVersion:
    return api.AgentVersion(name=agent.name, version=0, definition=definitions.to_struct(agent), native=True)


class AgentServicer(agents_pb2_grpc.AgentServiceServicer):
    def __init__(self, clients: Clients, builtins: AgentRegistry, catalogue: CatalogWatcher | None) -> None:
        self.stored = StoredAgents(clients, builtins)
        self.store = self.stored.store
        self.runtime = RuntimeClient.of(clients)
        self.catalogue = catalogue

    def _builtin(self, name: str) -> AgentDefinition | None:
        return self.stored.builtin(name)

    def _changeable(self, name: str) -> None:
        """A name that is not a built-in's (built-ins are read-only here)."""
        if self._builtin(name) is not None:
            raise _builtin_read_only(name)

    async def _exists(self, tenant: str, name: str) -> bool:
        if self._builtin(name) is not None:
            return True
        try:
            await self.stored.read(tenant, name)
        except NotFound:
            return False
        return True

    async def _on_offer(self) -> definitions.OnOffer:
        """The tools a runtime replica offers (any one: they share the tool servers file)."""
        reply = await self.runtime.ListTools(runtime_pb2.ListToolsRequest())
        return definitions.OnOffer(
            frozenset(tool.name for tool in reply.tools), tuple(server.prefix for server in reply.unlisted)
        )

    async def _checked(self, tenant: str, name: str, definition: Any) -> str:
        parsed = definitions.parse(name, definition)
        await definitions.check_references(
            parsed, self.catalogue, lambda other: self._exists(tenant, other), self._on_offer
        )
        return json.dumps(json.loads(parsed.model_dump_json(exclude_defaults=True)), sort_keys=True)

    @staticmethod
    def _writer() -> auth.Principal:
        principal = auth.current.get()
        principal.require(auth.AGENTS_WRITE)
        return principal

    @staticmethod
    def _audit(action: str, principal: auth.Principal, name: str, **fields: Any) -> None:
        log.info("audit", action=action, tenant=principal.tenant_id, principal=principal.name, agent=name, **fields)

    async def CreateAgent(self, request: api.CreateAgentRequest, context: Any) -> api.CreateAgentResponse:
        principal = self._writer()
        if self._builtin(request.name) is not None:
            raise AlreadyExists(f"agent {request.name!r} is a built-in agent's name", metadata={"agent": request.name})
        text = await self._checked(principal.tenant_id, request.name, request.definition)
        stored = await _put(
            self.store,
            store.PutAgentVersionRequest(
                tenant_id=principal.tenant_id,
                name=request.name,
                definition_json=text,
                created_by=principal.name,
                create=True,
            ),
        )
        self._audit("agent.create", principal, request.name, version=stored.version)
        return api.CreateAgentResponse(agent=_public(stored))

    async def UpdateAgent(self, request: api.UpdateAgentRequest, context: Any) -> api.UpdateAgentResponse:
        principal = self._writer()
        self._changeable(request.name)
        text = await self._checked(principal.tenant_id, request.name, request.definition)
        stored = await _put(
            self.store,
            store.PutAgentVersionRequest(
                tenant_id=principal.tenant_id,
                name=request.name,
                definition_json=text,
                created_by=principal.name,
                expected_version=request.expected_version,
            ),
        )
        self._audit("agent.update", principal, request.name, version=stored.version)
        return api.UpdateAgentResponse(agent=_public(stored))

    async def GetAgent(self, request: api.GetAgentRequest, context: Any) -> api.GetAgentResponse:
        name, version, alias = definitions.split_ref(request.name, "name")
        version, alias = request.version or version, request.alias or alias
        if version and alias:
            raise InvalidArgument([("alias", "give a version or an alias, not both")])
        builtin = self._builtin(name)
        if builtin is not None:
            if version or alias:
                raise NotFound(
                    f"agent {name!r} is a built-in: it has one version (0) and no aliases",
                    metadata={"agent": name},
                )
            return api.GetAgentResponse(agent=_native(builtin))
        reply = await self.store.GetAgentVersion(
            store.GetAgentVersionRequest(
                tenant_id=auth.current.get().tenant_id, name=name, version=version, alias=alias
            )
        )
        return api.GetAgentResponse(agent=_public(reply.agent))

    async def ListAgentVersions(
        self, request: api.ListAgentVersionsRequest, context: Any
    ) -> api.ListAgentVersionsResponse:
        builtin = self._builtin(request.name)
        if builtin is not None:
            return api.ListAgentVersionsResponse(versions=[_native(builtin)])
        reply = await self.store.ListAgentVersions(
            store.ListAgentVersionsRequest(
                tenant_id=auth.current.get().tenant_id,
                name=request.name,
                page_size=request.page_size,
                page_token=request.page_token,
            )
        )
        return api.ListAgentVersionsResponse(
            versions=[_public(v) for v in reply.versions],
            next_page_token=reply.next_page_token,
            aliases=dict(reply.aliases),
        )

    async def DeleteAgent(self, request: api.DeleteAgentRequest, context: Any) -> api.DeleteAgentResponse:
        principal = self._writer()
        self._changeable(request.name)
        reply = await self.store.DeleteAgent(store.DeleteAgentRequest(tenant_id=principal.tenant_id, name=request.name))
        self._audit("agent.delete", principal, request.name, deleted_versions=reply.deleted_versions)
        return api.DeleteAgentResponse(deleted_versions=reply.deleted_versions)

    async def SetAgentAlias(self, request: api.SetAgentAliasRequest, context: Any) -> api.SetAgentAliasResponse:
        principal = self._writer()
        self._changeable(request.name)
        reply = await self.store.SetAgentAlias(
            store.SetAgentAliasRequest(
                tenant_id=principal.tenant_id, name=request.name, alias=request.alias, version=request.version
            )
        )
        self._audit(
            "agent.alias.set",
            principal,
            request.name,
            alias=request.alias,
            version=request.version,
            previous_version=reply.previous_version,
        )
        return api.SetAgentAliasResponse(agent=_public(reply.agent), previous_version=reply.previous_version)

    async def DeleteAgentAlias(
        self, request: api.DeleteAgentAliasRequest, context: Any
    ) -> api.DeleteAgentAliasResponse:
        principal = self._writer()
        self._changeable(request.name)
        reply = await self.store.DeleteAgentAlias(
            store.DeleteAgentAliasRequest(tenant_id=principal.tenant_id, name=request.name, alias=request.alias)
        )
        self._audit("agent.alias.delete", principal, request.name, alias=request.alias, version=reply.previous_version)
        return api.DeleteAgentAliasResponse(previous_version=reply.previous_version)
