"""Who is calling: API keys (stored as SHA-256 hashes) map to a tenant and a principal.

The key arrives as `authorization: Bearer <key>` metadata. Without a keys file the
gateway only runs in an explicit dev mode, where every caller is one tenant.
"""

from __future__ import annotations

import contextvars
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from services.kit.errors import Unauthenticated


@dataclass(frozen=True)
class Principal:
    tenant_id: str
    name: str


class _KeyEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="hex SHA-256 of the key")
    tenant: str = Field(min_length=1, max_length=128)
    principal: str = Field(min_length=1, max_length=128)


class _KeysFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    keys: list[_KeyEntry]


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def load_keys(path: Path) -> dict[str, Principal]:
    """Read the keys file; errors name the file and the field."""
    try:
        data = yaml.safe_load(path.read_text())
        parsed = _KeysFile.model_validate(data)
    except OSError as exc:
        raise ValueError(f"{path}: cannot read API keys file: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: invalid YAML: {exc}") from exc
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ValueError(f"{path}: {where}: {first['msg']}") from exc
    return {entry.sha256: Principal(entry.tenant, entry.principal) for entry in parsed.keys}


current: contextvars.ContextVar[Principal] = contextvars.ContextVar("cogmesh_principal")


def tenant_of_call(default: str) -> str:
    """The tenant of the RPC being served (GatewayGuard sets it), or `default` outside any RPC."""
    principal = current.get(None)
    return principal.tenant_id if principal is not None else default


class Authenticator:
    """`keys=None` is dev mode: everyone is `dev_principal`."""

    def __init__(self, keys: dict[str, Principal] | None, dev_tenant: str = "default"):
        self._keys = keys
        self._dev = Principal(dev_tenant, "dev")

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
