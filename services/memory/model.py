"""What a memory is, where it lives (a namespace inside a tenant), what is valid and the limits.

A namespace is (tenant, *labels). Labels become parts of Redis keys joined by "/" inside a
hash tag `{...}`, so a label may not hold "/", "{" or "}" (nor control characters), and
namespaces are bounded in depth and label length: bad labels are refused up front
instead of producing keys that collide or split across cluster slots.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from cogmesh.common.v1 import errors_pb2
from services.kit.errors import NotFound, ResourceExhausted

# A namespace's labels and a memory's key: memory.proto's rules bound them on every request (at most 8
# labels of 1 to 384 characters without "/", "{", "}" or control characters; keys of 1 to 256). The
# tenant id is held to the same as a label here: the gateway fills it in, so no rule can.
MAX_LABEL_CHARS = 384  # room for a scope label: a 64-character key, '=', a 256-character value
_BAD_LABEL_CHARS = re.compile(r"[/{}\x00-\x1f\x7f]")

# The settings (environment variables) behind each limit, named in the errors they raise.
MAX_ITEMS_SETTING = "COGMESH_MEMORY_MAX_ITEMS"
MAX_BYTES_SETTING = "COGMESH_MEMORY_MAX_BYTES"
MAX_VALUE_BYTES_SETTING = "COGMESH_MEMORY_MAX_VALUE_BYTES"

JsonObject = dict[str, Any]


def label_problem(label: str) -> str:
    """Empty when `label` is a valid namespace label (or tenant id), else what is wrong with it."""
    if not label:
        return "must not be empty"
    if len(label) > MAX_LABEL_CHARS:
        return f"must be at most {MAX_LABEL_CHARS} characters"
    if _BAD_LABEL_CHARS.search(label):
        return 'must not contain "/", "{", "}" or control characters'
    return ""


@dataclass(frozen=True, order=True)
class Namespace:
    """A namespace: its tenant and its labels (what applications see) after it."""

    tenant: str
    labels: tuple[str, ...]

    @property
    def path(self) -> str:
        """ "tenant/label/label": unambiguous, since labels hold no "/"."""
        return "/".join((self.tenant, *self.labels))

    def under(self, prefix: tuple[str, ...]) -> bool:
        return self.labels[: len(prefix)] == prefix


@dataclass
class Record:
    """One stored memory. Times are Unix milliseconds; expire_ms 0 means never."""

    key: str
    value: JsonObject
    text: str
    created_ms: int
    updated_ms: int
    expire_ms: int = 0
    size: int = 0  # bytes counted against the namespace's cap
    embedding: np.ndarray | None = None  # unit length, float32

    def live(self, now_ms: int) -> bool:
        return self.expire_ms == 0 or self.expire_ms > now_ms


def encode_body(value: JsonObject, text: str, embedding: np.ndarray | None) -> str:
    """A memory's stored form (and the bytes counted against its namespace's cap)."""
    body: dict[str, Any] = {"v": value, "t": text}
    if embedding is not None:
        body["e"] = base64.b64encode(embedding.astype(np.float32).tobytes()).decode()
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


def decode_body(body: str) -> tuple[JsonObject, str, np.ndarray | None]:
    data = json.loads(body)
    packed = data.get("e")
    embedding = np.frombuffer(base64.b64decode(packed), dtype=np.float32) if packed else None
    return data["v"], data["t"], embedding


@dataclass(frozen=True)
class Limits:
    max_items: int = 10_000
    max_bytes: int = 32 * 2**20
    max_value_bytes: int = 64 * 2**10
    default_ttl_s: float = 0.0


def index_text(value: JsonObject, text: str) -> str:
    """The text search indexes: `text` when given, else every string in the value, in order."""
    if text:
        return text
    parts: list[str] = []
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            parts.append(item)
        elif isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))
    return " ".join(parts)


class MemoryNotFound(NotFound):
    reason = errors_pb2.ERROR_REASON_MEMORY_NOT_FOUND

    def __init__(self, namespace: tuple[str, ...], key: str):
        super().__init__(
            f"no memory {key!r} in namespace {list(namespace)}", metadata={"namespace": "/".join(namespace), "key": key}
        )


class NamespaceFull(ResourceExhausted):
    """A put that would take a namespace over one of its caps; names the setting that raises it."""

    reason = errors_pb2.ERROR_REASON_LIMIT_EXCEEDED

    def __init__(self, namespace: Namespace, limit: str, setting: str, cap: int, current: int):
        unit = "memories" if limit == "items" else "bytes"
        super().__init__(
            f"namespace {list(namespace.labels)} is full: it holds {current} {unit} and may hold {cap}; "
            f"delete memories or raise {setting} on the memory service",
            metadata={
                "namespace": "/".join(namespace.labels),
                "limit": limit,
                "setting": setting,
                "value": str(cap),
                "current": str(current),
            },
        )
