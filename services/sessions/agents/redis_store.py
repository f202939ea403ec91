"""The Redis agent store: every replica of the sessions service shares it (standalone, Sentinel or Cluster).

One tenant's agents share a hash tag, so every write is one Lua script on one slot: the
tenant's hash of latest versions (name -> version), and per agent a hash of its versions
(version -> record) and one of its aliases (alias -> version).
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable
from typing import Any, TypeVar

from cogmesh.sessions.v1 import agents_pb2 as pb
from services.kit import lua
from services.kit.errors import NotFound
from services.kit.redis_pool import Client, pooled_client, unless_unavailable
from services.kit.redis_url import check_prefix
from services.sessions.agents.store import (
    AlreadyExists,
    Conflict,
    agent_not_found,
    alias_not_found,
    version_not_found,
    with_aliases,
)

T = TypeVar("T")

# The scripts: services/sessions/agents/lua/*.lua (each file's opening comments say what its KEYS and ARGV hold).
_LUA = lua.load("services.sessions.agents")
_PUT, _GET, _DELETE = _LUA["put"], _LUA["get"], _LUA["delete"]
_SET_ALIAS, _DELETE_ALIAS = _LUA["set_alias"], _LUA["delete_alias"]


def _decoded(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisAgentStore:
    def __init__(self, client: Client, prefix: str = "cogmesh:", owns_client: bool = True):
        """`owns_client` False: the client is shared (another store's pool) and closed by its owner."""
        self._redis = client
        self._owns_client = owns_client
        self._prefix = check_prefix(prefix)
        self._scripts = {
            name: client.register_script(script)
            for name, script in (
                ("put", _PUT),
                ("get", _GET),
                ("delete", _DELETE),
                ("set_alias", _SET_ALIAS),
                ("delete_alias", _DELETE_ALIAS),
            )
        }

    @classmethod
    def from_url(cls, url: str, prefix: str, timeout_s: float) -> RedisAgentStore:
        return cls(pooled_client(url, timeout_s, health_check_interval=15), prefix)

    def _tenant(self, tenant_id: str) -> str:
        # The tenant's part is hashed: no braces, one slot per tenant.
        return f"{self._prefix}{{agents:{hashlib.sha256(tenant_id.encode()).hexdigest()[:24]}}}"

    def _keys(self, tenant_id: str, name: str) -> tuple[str, str, str]:
        base = self._tenant(tenant_id)
        return f"{base}:latest", f"{base}:a:{name}:v", f"{base}:a:{name}:al"

    async def _run(self, script: str, keys: list[str], args: list[Any]) -> Any:
        return await self._call(self._scripts[script](keys=keys, args=args))

    async def _call(self, call: Awaitable[T]) -> T:
        return await unless_unavailable(call, "agent store")

    @staticmethod
    def _record(raw: bytes, version: int) -> pb.StoredAgentVersion:
        record = pb.StoredAgentVersion.FromString(raw)
        record.version = version
        return record

    async def put(self, record: pb.StoredAgentVersion, create: bool, expected_version: int) -> pb.StoredAgentVersion:
        latest_key, versions_key, aliases_key = self._keys(record.tenant_id, record.name)
        stored = pb.StoredAgentVersion()
        stored.CopyFrom(record)
        stored.ClearField("version")  # the script numbers it; the number is the hash field
        del stored.aliases[:]
        status, number = await self._run(
            "put",
            [latest_key, versions_key],
            [record.name, "1" if create else "0", expected_version, stored.SerializeToString()],
        )
        status, number = _decoded(status), int(number)
        if status == "exists":
            raise AlreadyExists(f"agent {record.name!r} exists", metadata={"agent": record.name})
        if status == "missing":
            raise agent_not_found(record.name)
        if status == "conflict":
            raise Conflict(
                f"agent {record.name!r} is at version {number}, not {expected_version}",
                metadata={"agent": record.name, "latest_version": str(number)},
            )
        stored.version = number
        aliases = await self._call(self._redis.hgetall(aliases_key))
        return with_aliases(stored, {_decoded(k): int(v) for k, v in aliases.items()})

    async def get(self, tenant_id: str, name: str, version: int = 0, alias: str = "") -> pb.StoredAgentVersion:
        reply = await self._run("get", list(self._keys(tenant_id, name)), [name, version, alias])
        status = _decoded(reply[0])
        if status == "missing":
            raise agent_not_found(name)
        if status == "no_alias":
            raise alias_not_found(name, alias)
        if status == "no_version":
            raise version_not_found(name, version)
        number, raw, pairs = int(reply[1]), reply[2], reply[3:]
        aliases = {_decoded(pairs[i]): int(pairs[i + 1]) for i in range(0, len(pairs), 2)}
        return with_aliases(self._record(raw, number), aliases)

    async def list_versions(
        self, tenant_id: str, name: str, offset: int, size: int
    ) -> tuple[list[pb.StoredAgentVersion], int, dict[str, int]]:
        latest_key, versions_key, aliases_key = self._keys(tenant_id, name)
        latest = int(await self._call(self._redis.hget(latest_key, name)) or 0)
        if not latest:
            raise agent_not_found(name)
        # Versions are 1..latest with no gaps: a page newest first is a range of numbers.
        numbers = list(range(latest - offset, max(latest - offset - size, 0), -1))
        raws: list[Any] = (
            await self._call(self._redis.hmget(versions_key, [str(n) for n in numbers])) if numbers else []
        )
        aliases = {_decoded(k): int(v) for k, v in (await self._call(self._redis.hgetall(aliases_key))).items()}
        found = [with_aliases(self._record(raw, n), aliases) for n, raw in zip(numbers, raws, strict=True) if raw]
        return found, latest, aliases

    async def list_agents(self, tenant_id: str, offset: int, size: int) -> tuple[list[pb.StoredAgentVersion], int]:
        latest: dict[Any, Any] = await self._call(self._redis.hgetall(f"{self._tenant(tenant_id)}:latest"))
        names = sorted(_decoded(k) for k in latest)
        page = []
        for name in names[offset : offset + size]:
            try:
                page.append(await self.get(tenant_id, name))
            except NotFound:  # deleted between the two reads: leave it out
                continue
        return page, len(names)

    async def delete(self, tenant_id: str, name: str) -> int:
        deleted = int(await self._run("delete", list(self._keys(tenant_id, name)), [name]))
        if not deleted:
            raise agent_not_found(name)
        return deleted

    async def set_alias(self, tenant_id: str, name: str, alias: str, version: int) -> tuple[pb.StoredAgentVersion, int]:
        keys = list(self._keys(tenant_id, name))
        reply = await self._run("set_alias", keys, [name, alias, version])
        status = _decoded(reply[0])
        if status == "missing":
            raise agent_not_found(name)
        if status == "no_version":
            raise version_not_found(name, version)
        aliases = {_decoded(k): int(v) for k, v in (await self._call(self._redis.hgetall(keys[2]))).items()}
        return with_aliases(self._record(reply[2], version), aliases), int(reply[1])

    async def delete_alias(self, tenant_id: str, name: str, alias: str) -> int:
        latest_key, _, aliases_key = self._keys(tenant_id, name)
        previous = int(await self._run("delete_alias", [latest_key, aliases_key], [name, alias]))
        if previous < 0:
            raise agent_not_found(name)
        if previous == 0:
            raise alias_not_found(name, alias)
        return previous

    async def close(self) -> None:
        if self._owns_client:
            await self._redis.aclose()
