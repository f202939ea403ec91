"""A tenant's stored agents (AgentService) as the gateway and the runtime read them.

A session opened with a stored agent holds its version (Session.agent_version). The gateway
resolves "name", "name@7" or "name@prod" to that number when a session is created or moved;
the runtime reads the definitions a turn runs with when the turn starts: the session's
version, and the latest versions of the stored agents it delegates or hands off to. A version
never changes, so each process reads it once; a session of a built-in agent costs nothing.
"""

from __future__ import annotations

import re
from collections import OrderedDict

import grpc

from cogmesh.common.v1 import errors_pb2, resources_pb2
from cogmesh.runtime.v1 import runtime_pb2
from cogmesh.sessions.v1 import agents_pb2 as store
from services.kit.clients import Clients
from services.kit.dependencies import AgentStoreClient
from services.kit.errors import DependencyError, InvalidArgument, NotFound
from services.lib.agents import AGENT_NAME_PATTERN, AgentDefinition, AgentRegistry, UnknownAgentError, agent_from_json

CACHED_VERSIONS = 1024  # definitions kept per process (each at most 256 KiB, most far less)
LISTED_AGENTS = 1000  # a tenant's stored agents ListAgents shows
_NAME = re.compile(AGENT_NAME_PATTERN)
_NUMBER = re.compile(r"^[0-9]+$")


def check_name(name: str, where: str = "name") -> None:
    if not _NAME.match(name):
        raise InvalidArgument(
            [(where, "must be lower case letters, digits, '_' or '-', starting with a letter, at most 63 characters")]
        )


def split_ref(ref: str, where: str = "agent") -> tuple[str, int, str]:
    """ "name", "name@7", "name@prod" or "name@latest" -> (name, version (0: the latest), alias)."""
    name, at, tail = ref.partition("@")
    check_name(name, where)
    if not at or tail == "latest":
        return name, 0, ""
    if _NUMBER.match(tail):
        version = int(tail)
        if version < 1:
            raise InvalidArgument([(where, f"{ref!r}: versions start at 1")])
        return name, version, ""
    if not _NAME.match(tail):
        raise InvalidArgument([(where, f"{ref!r}: after '@' comes a version number or an alias")])
    return name, 0, tail


class StoredAgents:
    def __init__(self, clients: Clients, builtins: AgentRegistry) -> None:
        self.store = AgentStoreClient.of(clients)
        self.builtins = builtins
        self._versions: OrderedDict[tuple[str, str, int], store.StoredAgentVersion] = OrderedDict()

    def builtin(self, name: str) -> AgentDefinition | None:
        try:
            return self.builtins.get(name)
        except UnknownAgentError:
            return None

    async def read(self, tenant: str, name: str, version: int = 0, alias: str = "") -> store.StoredAgentVersion:
        """A version (0: the latest; or the alias's); NOT_FOUND (AGENT_NOT_FOUND) naming what is missing."""
        key = (tenant, name, version)
        if version and key in self._versions:
            self._versions.move_to_end(key)
            return self._versions[key]
        try:
            reply = await self.store.GetAgentVersion(
                store.GetAgentVersionRequest(tenant_id=tenant, name=name, version=version, alias=alias)
            )
        except DependencyError as exc:
            if exc.status_code == grpc.StatusCode.NOT_FOUND:
                raise NotFound(
                    exc.status_message, reason=errors_pb2.ERROR_REASON_AGENT_NOT_FOUND, metadata={"agent": name}
                ) from exc
            raise
        found = reply.agent
        self._versions[(tenant, name, found.version)] = found
        while len(self._versions) > CACHED_VERSIONS:
            self._versions.popitem(last=False)
        return found

    async def latest(self, tenant: str, limit: int = LISTED_AGENTS) -> list[tuple[AgentDefinition, int]]:
        """The tenant's stored agents at their latest versions, by name (at most `limit`)."""
        found: list[tuple[AgentDefinition, int]] = []
        token = ""
        while len(found) < limit:
            reply = await self.store.ListAgents(
                store.ListAgentsRequest(tenant_id=tenant, page_size=200, page_token=token)
            )
            found += [(agent_from_json(a.name, a.definition_json), a.version) for a in reply.agents]
            token = reply.next_page_token
            if not token:
                break
        return found[:limit]

    async def resolve(self, tenant: str, ref: str, where: str = "agent") -> tuple[AgentDefinition, int]:
        """The agent a session is opened with and its version (0: a built-in)."""
        name, version, alias = split_ref(ref or "default", where)
        builtin = self.builtin(name)
        if builtin is not None:
            if version or alias:
                raise InvalidArgument(
                    [(where, f"{ref!r}: {name!r} is a built-in agent: it has no versions or aliases")]
                )
            return builtin, 0
        found = await self.read(tenant, name, version, alias)
        return agent_from_json(name, found.definition_json), found.version

    async def for_session(self, session: resources_pb2.Session) -> list[runtime_pb2.PinnedAgent]:
        """The stored agents a turn of the session runs with; none for a session of a built-in agent."""
        if not session.agent_version:
            return []
        own = await self.read(session.tenant_id, session.agent, session.agent_version)
        pins = {own.name: own}
        agent = agent_from_json(own.name, own.definition_json)
        for other in (*agent.subagents, *agent.handoffs):
            if other not in pins and self.builtin(other) is None:
                pins[other] = await self.read(session.tenant_id, other)
        return [
            runtime_pb2.PinnedAgent(name=p.name, version=p.version, definition_json=p.definition_json)
            for p in pins.values()
        ]
