"""Who is calling: API keys (stored as SHA-256 hashes) map to a tenant and a principal.

The key arrives as `authorization: Bearer <key>` metadata. Without a keys file the
gateway only runs in an explicit dev mode, where every caller is one tenant.

A key may also bound the scope of the sessions it creates (see CreateSession's scope):
`scope.pin` values are always set and cannot be changed by a request, and a key that
pins values sees only sessions holding them (others are NOT_FOUND, like another
tenant's); `scope.allow` lists the other keys a request may set. Omitted, it is any key
for a key that pins nothing and none for a key that pins values: a bounded key (a
browser's, an end user's) must not pick its own `role` or a fresh rate-limit window.

`permissions` lists what a key may change beyond its sessions ("agents:write": the tenant's
agents and their aliases); a key lists none unless given. Dev mode may do everything.
"""

from __future__ import annotations

import contextvars
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator

from cogmesh.common.v1 import errors_pb2, resources_pb2
from services.kit import yaml_config
from services.kit.errors import NotFound, PermissionDenied, Unauthenticated, Violations
from services.lib import scope as scopes

# "agents:write": create, update and delete the tenant's agents and move their aliases (AgentService).
AGENTS_WRITE = "agents:write"
Permission = Literal["agents:write"]
PERMISSIONS: frozenset[str] = frozenset(get_args(Permission))


@dataclass(frozen=True)
class Principal:
    tenant_id: str
    name: str
    # Scope values every session of this key has (and the only sessions it sees).
    pinned_scope: Mapping[str, str] = field(default_factory=dict, hash=False)
    # Scope keys a request may set besides the pinned ones; None: any.
    allowed_scope_keys: frozenset[str] | None = None
    # What the key may change beyond its sessions (PERMISSIONS); dev mode may do everything.
    permissions: frozenset[str] = frozenset()

    def require(self, permission: str) -> None:
        """PERMISSION_DENIED naming the permission this key lacks."""
        if permission not in self.permissions:
            raise PermissionDenied(
                f"this API key lacks the permission {permission!r} (add it to the key's `permissions` "
                "in the keys file)",
                metadata={"permission": permission, "principal": self.name},
            )

    def session_scope(self, requested: Mapping[str, str], where: str = "scope") -> dict[str, str]:
        """The scope a session created by this key gets: the request's (its entries checked by the request's
        field rules already) plus the pinned values."""
        problems = Violations()
        for key, value in requested.items():
            pinned = self.pinned_scope.get(key)
            if pinned is not None and value != pinned:
                raise PermissionDenied(
                    f"{where}[{key}]: this API key pins {key!r} to another value; leave it out or send that value",
                    metadata={"scope_key": key, "principal": self.name},
                )
            if pinned is None and self.allowed_scope_keys is not None and key not in self.allowed_scope_keys:
                allowed = ", ".join(sorted(self.allowed_scope_keys)) or "none"
                raise PermissionDenied(
                    f"{where}[{key}]: this API key may not set scope key {key!r} (it may set: {allowed})",
                    metadata={"scope_key": key, "principal": self.name},
                )
        merged = {**requested, **self.pinned_scope}
        problems.check(len(merged) <= scopes.MAX_ENTRIES, where, f"must have at most {scopes.MAX_ENTRIES} entries")
        problems.raise_if_any()
        return merged

    def sees(self, session: resources_pb2.Session) -> bool:
        return session.tenant_id == self.tenant_id and scopes.holds(session.scope, self.pinned_scope)

    def check_sees(self, session: resources_pb2.Session) -> resources_pb2.Session:
        """The session, or NOT_FOUND exactly as for a session that does not exist (nothing leaks)."""
        if not self.sees(session):
            raise session_not_found(session.session_id)
        return session


def session_not_found(session_id: str) -> NotFound:
    """The sessions service's answer for a missing session, word for word: a hidden one looks the same."""
    return NotFound(
        f"session {session_id!r} not found",
        reason=errors_pb2.ERROR_REASON_SESSION_NOT_FOUND,
        metadata={"session_id": session_id},
    )


class _ScopeRules(BaseModel):
    model_config = ConfigDict(extra="forbid")
    pin: dict[str, str] = Field({}, description="scope values set on every session of the key")
    allow: list[str] | None = Field(
        None, description="other scope keys a request may set; omitted: any without pins, none with pins"
    )

    @field_validator("pin")
    @classmethod
    def _valid_pins(cls, pin: dict[str, str]) -> dict[str, str]:
        problems = Violations()
        scopes.check(pin, "pin", problems)
        if problems.items:
            raise ValueError("; ".join(f"{where}: {what}" for where, what in problems.items))
        return pin

    @field_validator("allow")
    @classmethod
    def _valid_keys(cls, allow: list[str] | None) -> list[str] | None:
        bad = [key for key in allow or [] if not scopes.KEY_PATTERN.fullmatch(key)]
        if bad:
            raise ValueError(f"scope keys must match [a-z][a-z0-9_]{{0,63}}: {', '.join(map(repr, bad))}")
        return allow


class _KeyEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="hex SHA-256 of the key")
    tenant: str = Field(min_length=1, max_length=128)
    principal: str = Field(min_length=1, max_length=128)
    scope: _ScopeRules = _ScopeRules()
    permissions: list[Permission] = Field([], description="what the key may change beyond its sessions")

    def to_principal(self) -> Principal:
        allow = self.scope.allow
        allowed = frozenset(allow) if allow is not None else (frozenset() if self.scope.pin else None)
        return Principal(self.tenant, self.principal, dict(self.scope.pin), allowed, frozenset(self.permissions))


class _KeysFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    keys: list[_KeyEntry]


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def load_keys(path: Path) -> dict[str, Principal]:
    """Read the keys file; ConfigError (a ValueError) names file, line and field of every problem."""
    document = yaml_config.parse(yaml_config.read_text(path), str(path))
    parsed = document.validate(_KeysFile)
    seen: dict[str, int] = {}
    problems = []
    for index, entry in enumerate(parsed.keys):
        if entry.sha256 in seen:  # the later entry would silently replace the earlier one's tenant or pins
            first = yaml_config.field_path(("keys", seen[entry.sha256]))
            problems.append(document.problem(("keys", index, "sha256"), f"the same key as {first}"))
        seen.setdefault(entry.sha256, index)
    if problems:
        raise yaml_config.ConfigError(problems)
    return {entry.sha256: entry.to_principal() for entry in parsed.keys}


current: contextvars.ContextVar[Principal] = contextvars.ContextVar("cogmesh_principal")


def tenant_of_call(default: str) -> str:
    """The tenant of the RPC being served (GatewayGuard sets it), or `default` outside any RPC."""
    principal = current.get(None)
    return principal.tenant_id if principal is not None else default


class Authenticator:
    """`keys=None` is dev mode: everyone is `dev_principal`."""

    def __init__(self, keys: dict[str, Principal] | None, dev_tenant: str = "default"):
        self._keys = keys
        self._dev = Principal(dev_tenant, "dev", permissions=PERMISSIONS)

    @property
    def dev_mode(self) -> bool:
        return self._keys is None

    def authenticate(self, metadata: Sequence[tuple[str, str | bytes]]) -> Principal:
        if self._keys is None:
            return self._dev
        header = next((v for k, v in metadata if k == "authorization"), None)
        if header is None:
            raise Unauthenticated("missing `authorization: Bearer <api key>` metadata")
        text = header.decode() if isinstance(header, bytes) else header
        scheme, _, key = text.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise Unauthenticated("authorization metadata must be `Bearer <api key>`")
        # Looked up by hash: lookup timing tells nothing about the key, whose hash the caller cannot steer.
        principal = self._keys.get(hash_key(key.strip()))
        if principal is None:
            raise Unauthenticated("unknown API key")
        return principal
