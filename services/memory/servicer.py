"""MemoryService over services.memory.memories: proto in, validated, domain call, proto out."""

from __future__ import annotations

from typing import Any

from google.protobuf import timestamp_pb2

from cogmesh.memory.v1 import memory_pb2, memory_pb2_grpc
from services.kit.errors import Violations
from services.kit.limits import MAX_ARGUMENT_DEPTH, depth_problem, json_depth
from services.kit.protos import dict_to_struct, struct_to_dict
from services.memory.memories import Memories, Mode
from services.memory.model import (
    MAX_VALUE_BYTES_SETTING,
    Namespace,
    Record,
    label_problem,
)

DEFAULT_PAGE_SIZE = 100
DEFAULT_SEARCH_LIMIT = 10

_MODES = {
    memory_pb2.SEARCH_MODE_UNSPECIFIED: Mode.AUTO,
    memory_pb2.SEARCH_MODE_TEXT: Mode.TEXT,
    memory_pb2.SEARCH_MODE_VECTOR: Mode.VECTOR,
    memory_pb2.SEARCH_MODE_HYBRID: Mode.HYBRID,
}
_MODE_PROTOS: dict[Mode, memory_pb2.SearchMode] = {
    mode: proto for proto, mode in _MODES.items() if mode is not Mode.AUTO
}


def _timestamp(ms: int) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromMilliseconds(ms)
    return stamp


def memory_to_proto(namespace: Namespace, record: Record) -> memory_pb2.Memory:
    memory = memory_pb2.Memory(
        namespace=list(namespace.labels),
        key=record.key,
        value=dict_to_struct(record.value),
        text=record.text,
        create_time=_timestamp(record.created_ms),
        update_time=_timestamp(record.updated_ms),
    )
    if record.expire_ms:
        memory.expire_time.CopyFrom(_timestamp(record.expire_ms))
    return memory


class _Checks(Violations):
    """Checks shared by the requests of MemoryService beyond their field rules (memory.proto: namespaces,
    keys, page sizes, limits; checked before the servicer runs)."""

    def tenant(self, tenant_id: str) -> None:
        # Not a rule on the protos: the gateway serves the same API and fills the tenant in from the API key.
        if problem := label_problem(tenant_id):
            self.items.append(("tenant_id", "is required" if not tenant_id else problem))


def _namespace(request: Any) -> Namespace:
    return Namespace(request.tenant_id, tuple(request.namespace))


class MemoryServicer(memory_pb2_grpc.MemoryServiceServicer):
    def __init__(self, memories: Memories):
        self.memories = memories

    async def PutMemory(self, request: memory_pb2.PutMemoryRequest, context: Any) -> memory_pb2.PutMemoryResponse:
        checks = _Checks()
        checks.tenant(request.tenant_id)
        value = struct_to_dict(request.value)
        checks.check(bool(value) or bool(request.text.strip()), "value", "is required when text is empty")
        depth = json_depth(value)
        checks.check(depth <= MAX_ARGUMENT_DEPTH, "value", depth_problem(depth, "the value is"))
        cap = self.memories.limits.max_value_bytes
        size = request.value.ByteSize() + len(request.text.encode())
        checks.check(
            size <= cap,
            "value",
            f"value and text are {size} bytes; at most {cap} are allowed ({MAX_VALUE_BYTES_SETTING})",
        )
        ttl_s = None
        if request.HasField("ttl"):
            ttl_s = request.ttl.ToNanoseconds() / 1e9
            checks.check(ttl_s > 0, "ttl", "must be positive; leave it unset for the service default")
        checks.raise_if_any()
        record, created = await self.memories.put(_namespace(request), request.key, value, request.text, ttl_s)
        return memory_pb2.PutMemoryResponse(memory=memory_to_proto(_namespace(request), record), created=created)

    async def GetMemory(self, request: memory_pb2.GetMemoryRequest, context: Any) -> memory_pb2.GetMemoryResponse:
        self._check_address(request)
        record = await self.memories.get(_namespace(request), request.key)
        return memory_pb2.GetMemoryResponse(memory=memory_to_proto(_namespace(request), record))

    async def DeleteMemory(
        self, request: memory_pb2.DeleteMemoryRequest, context: Any
    ) -> memory_pb2.DeleteMemoryResponse:
        self._check_address(request)
        return memory_pb2.DeleteMemoryResponse(deleted=await self.memories.delete(_namespace(request), request.key))

    async def ListMemories(
        self, request: memory_pb2.ListMemoriesRequest, context: Any
    ) -> memory_pb2.ListMemoriesResponse:
        checks = _Checks()
        checks.tenant(request.tenant_id)
        checks.raise_if_any()
        page, token = await self.memories.list_page(
            request.tenant_id,
            tuple(request.namespace_prefix),
            request.page_size or DEFAULT_PAGE_SIZE,
            request.page_token,
        )
        return memory_pb2.ListMemoriesResponse(
            memories=[memory_to_proto(ns, record) for ns, record in page], next_page_token=token
        )

    async def SearchMemories(
        self, request: memory_pb2.SearchMemoriesRequest, context: Any
    ) -> memory_pb2.SearchMemoriesResponse:
        checks = _Checks()
        checks.tenant(request.tenant_id)
        checks.raise_if_any()
        outcome = await self.memories.search(
            request.tenant_id,
            tuple(request.namespace_prefix),
            request.query,
            struct_to_dict(request.filter),
            request.limit or DEFAULT_SEARCH_LIMIT,
            _MODES[request.mode],
        )
        return memory_pb2.SearchMemoriesResponse(
            results=[
                memory_pb2.SearchResult(memory=memory_to_proto(hit.namespace, hit.record), score=hit.score)
                for hit in outcome.hits
            ],
            mode=_MODE_PROTOS[outcome.mode],
            fallback_reason=outcome.fallback_reason,
        )

    async def ListNamespaces(
        self, request: memory_pb2.ListNamespacesRequest, context: Any
    ) -> memory_pb2.ListNamespacesResponse:
        checks = _Checks()
        checks.tenant(request.tenant_id)
        checks.raise_if_any()
        found, token = await self.memories.namespaces(
            request.tenant_id,
            tuple(request.prefix),
            request.max_depth,
            request.page_size or DEFAULT_PAGE_SIZE,
            request.page_token,
        )
        return memory_pb2.ListNamespacesResponse(
            namespaces=[memory_pb2.Namespace(labels=list(labels)) for labels in found], next_page_token=token
        )

    @staticmethod
    def _check_address(request: memory_pb2.GetMemoryRequest | memory_pb2.DeleteMemoryRequest) -> None:
        checks = _Checks()
        checks.tenant(request.tenant_id)
        checks.raise_if_any()
