"""The agent store: each tenant's agents as immutable, numbered versions, with aliases.

Versions of an agent are 1, 2, ... with no gaps (only a whole agent is ever deleted), so a
page of versions is a range of numbers. Every write is a compare-and-set on the latest
version: of two writers that read version 4, one stores 5 and the other gets Conflict.
The store checks no definition: the gateway validates one before it is stored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import grpc

from cogmesh.sessions.v1 import agents_pb2 as pb
from services.kit.errors import CogmeshError, InvalidArgument, NotFound

DEFAULT_PAGE = 50


class Conflict(CogmeshError):
    """The agent changed since the caller read it."""

    code = grpc.StatusCode.ABORTED


class AlreadyExists(CogmeshError):
    code = grpc.StatusCode.ALREADY_EXISTS


def agent_not_found(name: str) -> NotFound:
    return NotFound(f"no agent {name!r}", metadata={"agent": name})


def version_not_found(name: str, version: int) -> NotFound:
    return NotFound(f"agent {name!r} has no version {version}", metadata={"agent": name, "version": str(version)})


def alias_not_found(name: str, alias: str) -> NotFound:
    return NotFound(f"agent {name!r} has no alias {alias!r}", metadata={"agent": name, "alias": alias})


def page_bounds(page_size: int, page_token: str) -> tuple[int, int]:
    """(offset, size) of a page; a token is the offset where the page starts (the size is 0..200, by the
    request's rules)."""
    try:
        offset = int(page_token or 0)
    except ValueError:
        offset = -1
    if offset < 0:
        raise InvalidArgument([("page_token", "is not a token this service gave")])
    return offset, page_size or DEFAULT_PAGE


def next_token(offset: int, size: int, total: int) -> str:
    return str(offset + size) if offset + size < total else ""


class AgentStore(Protocol):
    async def put(self, record: pb.StoredAgentVersion, create: bool, expected_version: int) -> pb.StoredAgentVersion:
        """Store `record` as the agent's next version (1 when `create`); returns it numbered."""
        ...

    async def get(self, tenant_id: str, name: str, version: int = 0, alias: str = "") -> pb.StoredAgentVersion: ...
    async def list_versions(
        self, tenant_id: str, name: str, offset: int, size: int
    ) -> tuple[list[pb.StoredAgentVersion], int, dict[str, int]]:
        """A page of versions, newest first; how many there are; every alias."""
        ...

    async def list_agents(self, tenant_id: str, offset: int, size: int) -> tuple[list[pb.StoredAgentVersion], int]:
        """A page of the tenant's agents (latest versions), by name; how many there are."""
        ...

    async def delete(self, tenant_id: str, name: str) -> int:
        """Delete the agent; how many versions went (NOT_FOUND when none)."""
        ...

    async def set_alias(self, tenant_id: str, name: str, alias: str, version: int) -> tuple[pb.StoredAgentVersion, int]:
        """Point `alias` at `version`; returns that version and the alias's previous one (0: new)."""
        ...

    async def delete_alias(self, tenant_id: str, name: str, alias: str) -> int:
        """Remove the alias; the version it pointed at."""
        ...

    async def close(self) -> None: ...


def with_aliases(record: pb.StoredAgentVersion, aliases: dict[str, int]) -> pb.StoredAgentVersion:
    out = pb.StoredAgentVersion()
    out.CopyFrom(record)
    del out.aliases[:]
    out.aliases.extend(sorted(a for a, v in aliases.items() if v == record.version))
    return out


@dataclass
class _Agent:
    versions: list[pb.StoredAgentVersion] = field(default_factory=list)  # index i holds version i + 1
    aliases: dict[str, int] = field(default_factory=dict)


class MemoryAgentStore:
    """One process's agents: the default, for a suite whose sessions live in memory too.

    No method awaits between its reads and writes, so each is atomic on the event loop."""

    def __init__(self) -> None:
        self._agents: dict[tuple[str, str], _Agent] = {}

    def _found(self, tenant_id: str, name: str) -> _Agent:
        agent = self._agents.get((tenant_id, name))
        if agent is None:
            raise agent_not_found(name)
        return agent

    async def put(self, record: pb.StoredAgentVersion, create: bool, expected_version: int) -> pb.StoredAgentVersion:
        key = (record.tenant_id, record.name)
        agent = self._agents.get(key)
        if create:
            if agent is not None:
                raise AlreadyExists(f"agent {record.name!r} exists", metadata={"agent": record.name})
            agent = self._agents[key] = _Agent()
        elif agent is None:
            raise agent_not_found(record.name)
        latest = len(agent.versions)
        if expected_version and expected_version != latest:
            raise Conflict(
                f"agent {record.name!r} is at version {latest}, not {expected_version}",
                metadata={"agent": record.name, "latest_version": str(latest)},
            )
        stored = pb.StoredAgentVersion()
        stored.CopyFrom(record)
        stored.version = latest + 1
        del stored.aliases[:]
        agent.versions.append(stored)
        return with_aliases(stored, agent.aliases)

    async def get(self, tenant_id: str, name: str, version: int = 0, alias: str = "") -> pb.StoredAgentVersion:
        agent = self._found(tenant_id, name)
        if alias:
            if alias not in agent.aliases:
                raise alias_not_found(name, alias)
            version = agent.aliases[alias]
        version = version or len(agent.versions)
        if not 1 <= version <= len(agent.versions):
            raise version_not_found(name, version)
        return with_aliases(agent.versions[version - 1], agent.aliases)

    async def list_versions(
        self, tenant_id: str, name: str, offset: int, size: int
    ) -> tuple[list[pb.StoredAgentVersion], int, dict[str, int]]:
        agent = self._found(tenant_id, name)
        newest = list(reversed(agent.versions))[offset : offset + size]
        return [with_aliases(v, agent.aliases) for v in newest], len(agent.versions), dict(agent.aliases)

    async def list_agents(self, tenant_id: str, offset: int, size: int) -> tuple[list[pb.StoredAgentVersion], int]:
        mine = sorted((name, a) for (tenant, name), a in self._agents.items() if tenant == tenant_id)
        page = mine[offset : offset + size]
        return [with_aliases(a.versions[-1], a.aliases) for _, a in page], len(mine)

    async def delete(self, tenant_id: str, name: str) -> int:
        agent = self._found(tenant_id, name)
        del self._agents[(tenant_id, name)]
        return len(agent.versions)

    async def set_alias(self, tenant_id: str, name: str, alias: str, version: int) -> tuple[pb.StoredAgentVersion, int]:
        agent = self._found(tenant_id, name)
        if not 1 <= version <= len(agent.versions):
            raise version_not_found(name, version)
        previous = agent.aliases.get(alias, 0)
        agent.aliases[alias] = version
        return with_aliases(agent.versions[version - 1], agent.aliases), previous

    async def delete_alias(self, tenant_id: str, name: str, alias: str) -> int:
        agent = self._found(tenant_id, name)
        if alias not in agent.aliases:
            raise alias_not_found(name, alias)
        return agent.aliases.pop(alias)

    async def close(self) -> None:
        return None
