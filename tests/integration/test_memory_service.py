"""The memory service over gRPC: validation errors, limits, search modes, and the gateway's tenancy.

Servers are real (port 0); embeddings come from a local server speaking the OpenAI
embeddings wire format (tests/fakes/embeddings.py), reached through the `openai` SDK
exactly as a hosted provider would be.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import duration_pb2, struct_pb2

from cogmesh.memory.v1 import memory_pb2, memory_pb2_grpc
from services.kit.server import start
from services.memory import main as memory_main
from services.memory.model import MAX_BYTES_SETTING, MAX_ITEMS_SETTING, MAX_VALUE_BYTES_SETTING
from services.memory.settings import MemorySettings
from tests.fakes.embeddings import FakeEmbeddings
from tests.integration.conftest import SUITE_SETTINGS, TIMEOUT_S, running_suite, status_details
from tests.integration.test_gateway_auth import bearer, keys_file
from tests.support.redis_server import RedisServer


def struct(**fields: Any) -> struct_pb2.Struct:
    value = struct_pb2.Struct()
    value.update(fields)
    return value


@contextlib.asynccontextmanager
async def memory_service(settings: MemorySettings = SUITE_SETTINGS) -> AsyncIterator[memory_pb2_grpc.MemoryServiceStub]:
    server = await start(memory_main.build, settings, "127.0.0.1:0")
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            yield memory_pb2_grpc.MemoryServiceStub(channel)
    finally:
        await server.stop(0)


async def failure(call: Any) -> tuple[grpc.StatusCode, Any, list[tuple[str, str]], str]:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    info, violations = status_details(caught.value)
    return caught.value.code(), info, violations, caught.value.details() or ""


def put(key: str, text: str = "", namespace: tuple[str, ...] = ("u1", "memories"), **value: Any) -> Any:
    return memory_pb2.PutMemoryRequest(
        tenant_id="acme", namespace=list(namespace), key=key, value=struct(**value), text=text
    )


def search(query: str, *, tenant: str = "acme", **fields: Any) -> memory_pb2.SearchMemoriesRequest:
    return memory_pb2.SearchMemoriesRequest(tenant_id=tenant, query=query, **fields)


async def test_bad_requests_name_their_fields() -> None:
    async with memory_service() as memory:
        cases: list[tuple[Any, Any, str, str]] = [
            (memory.PutMemory, put("k", "x", namespace=()), "namespace", "at least 1 item"),
            (memory.PutMemory, put("k", "x", namespace=("u1", "a/b")), "namespace[1]", "regex pattern `^[^/{}"),
            (memory.PutMemory, put("k", "x", namespace=("u{1}",)), "namespace[0]", "regex pattern `^[^/{}"),
            (memory.PutMemory, put("k", "x", namespace=("",)), "namespace[0]", "must not be empty"),
            (memory.PutMemory, put("k", "x", namespace=("a",) * 9), "namespace", "at most 8 items"),
            (memory.PutMemory, put("k", "x", namespace=("x" * 385,)), "namespace[0]", "at most 384"),
            (memory.PutMemory, put("", "x"), "key", "is required"),
            (memory.PutMemory, put("k" * 257, "x"), "key", "at most 256"),
            (memory.PutMemory, put("k"), "value", "required when text is empty"),
            (memory.PutMemory, put("k", "x" * 70_000), "value", MAX_VALUE_BYTES_SETTING),
            (
                memory.PutMemory,
                memory_pb2.PutMemoryRequest(namespace=["u1"], key="k", text="x"),
                "tenant_id",
                "is required",
            ),
            (
                memory.PutMemory,
                memory_pb2.PutMemoryRequest(
                    tenant_id="acme", namespace=["u1"], key="k", text="x", ttl=duration_pb2.Duration(seconds=-1)
                ),
                "ttl",
                "must be positive",
            ),
            (
                memory.GetMemory,
                memory_pb2.GetMemoryRequest(tenant_id="a/b", namespace=["u1"], key="k"),
                "tenant_id",
                '"/"',
            ),
            (memory.SearchMemories, search("x", limit=101), "limit", "100"),
            (memory.SearchMemories, search("x" * 5000), "query", "4096"),
            (memory.SearchMemories, search("x", mode=42), "mode", "unknown value 42"),  # type: ignore[arg-type]
            (
                memory.ListMemories,
                memory_pb2.ListMemoriesRequest(tenant_id="acme", page_size=1001),
                "page_size",
                "1000",
            ),
            (
                memory.ListMemories,
                memory_pb2.ListMemoriesRequest(tenant_id="acme", page_token="not a token!"),
                "page_token",
                "not a token",
            ),
            (
                memory.ListNamespaces,
                memory_pb2.ListNamespacesRequest(tenant_id="acme", prefix=["a}"]),
                "prefix[0]",
                "regex pattern",
            ),
        ]
        for method, request, field, words in cases:
            code, info, violations, _ = await failure(method(request, timeout=TIMEOUT_S))
            assert code == grpc.StatusCode.INVALID_ARGUMENT, (field, code)
            assert info is not None and info.reason == "INVALID_ARGUMENT"
            assert any(f == field and words in d for f, d in violations), (field, violations)
        deep: dict[str, Any] = {}
        for _ in range(25):
            deep = {"d": deep}
        code, _, violations, _ = await failure(memory.PutMemory(put("k", **deep), timeout=TIMEOUT_S))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and violations[0][0] == "value"


async def test_put_get_list_search_delete_over_grpc() -> None:
    async with memory_service() as memory:
        stored = await memory.PutMemory(put("coffee", "Prefers dark roast coffee", kind="pref"), timeout=TIMEOUT_S)
        assert stored.created and stored.memory.namespace == ["u1", "memories"]
        assert not stored.memory.HasField("expire_time")
        await memory.PutMemory(put("city", "", kind="fact", city="Lives in Lyon"), timeout=TIMEOUT_S)
        ttl = memory_pb2.PutMemoryRequest(
            tenant_id="acme",
            namespace=["u1", "notes"],
            key="n",
            text="call the dentist",
            ttl=duration_pb2.Duration(seconds=3600),
        )
        noted = await memory.PutMemory(ttl, timeout=TIMEOUT_S)
        assert noted.memory.expire_time.ToSeconds() - noted.memory.update_time.ToSeconds() == 3600

        got = await memory.GetMemory(
            memory_pb2.GetMemoryRequest(tenant_id="acme", namespace=["u1", "memories"], key="city"), timeout=TIMEOUT_S
        )
        assert sorted(got.memory.text.split()) == ["Lives", "Lyon", "fact", "in"]  # no text: the value's strings
        assert dict(got.memory.value) == {"kind": "fact", "city": "Lives in Lyon"}

        found = await memory.SearchMemories(search("where does the user live? lyon"), timeout=TIMEOUT_S)
        assert [r.memory.key for r in found.results] == ["city"] and found.results[0].score > 0
        assert found.mode == memory_pb2.SEARCH_MODE_TEXT and found.fallback_reason == ""
        filtered = await memory.SearchMemories(search("", filter=struct(kind="pref")), timeout=TIMEOUT_S)
        assert [r.memory.key for r in filtered.results] == ["coffee"]

        listed = await memory.ListMemories(
            memory_pb2.ListMemoriesRequest(tenant_id="acme", namespace_prefix=["u1"], page_size=2), timeout=TIMEOUT_S
        )
        assert [(list(m.namespace), m.key) for m in listed.memories] == [
            (["u1", "memories"], "city"),
            (["u1", "memories"], "coffee"),
        ]
        rest = await memory.ListMemories(
            memory_pb2.ListMemoriesRequest(tenant_id="acme", page_size=2, page_token=listed.next_page_token),
            timeout=TIMEOUT_S,
        )
        assert [m.key for m in rest.memories] == ["n"] and rest.next_page_token == ""
        spaces = await memory.ListNamespaces(memory_pb2.ListNamespacesRequest(tenant_id="acme"), timeout=TIMEOUT_S)
        assert [list(ns.labels) for ns in spaces.namespaces] == [["u1", "memories"], ["u1", "notes"]]

        address = {"tenant_id": "acme", "namespace": ["u1", "memories"], "key": "coffee"}
        deleted = await memory.DeleteMemory(memory_pb2.DeleteMemoryRequest(**address), timeout=TIMEOUT_S)
        assert deleted.deleted
        again = await memory.DeleteMemory(memory_pb2.DeleteMemoryRequest(**address), timeout=TIMEOUT_S)
        assert not again.deleted
        code, info, _, message = await failure(
            memory.GetMemory(memory_pb2.GetMemoryRequest(**address), timeout=TIMEOUT_S)
        )
        assert code == grpc.StatusCode.NOT_FOUND and info.reason == "MEMORY_NOT_FOUND" and "coffee" in message

        code, info, _, message = await failure(
            memory.SearchMemories(search("x", mode=memory_pb2.SEARCH_MODE_VECTOR), timeout=TIMEOUT_S)
        )
        assert code == grpc.StatusCode.FAILED_PRECONDITION and "COGMESH_MEMORY_EMBEDDING_MODEL" in message


async def test_full_namespaces_are_resource_exhausted_naming_the_setting() -> None:
    settings = SUITE_SETTINGS.model_copy(update={"memory_max_items": 2, "memory_max_bytes": 2000})
    async with memory_service(settings) as memory:
        await memory.PutMemory(put("a", "one"), timeout=TIMEOUT_S)
        await memory.PutMemory(put("b", "two"), timeout=TIMEOUT_S)
        code, info, _, message = await failure(memory.PutMemory(put("c", "three"), timeout=TIMEOUT_S))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and info.reason == "LIMIT_EXCEEDED"
        assert dict(info.metadata) == {
            "namespace": "u1/memories",
            "limit": "items",
            "setting": MAX_ITEMS_SETTING,
            "value": "2",
            "current": "2",
        }
        assert MAX_ITEMS_SETTING in message
        code, info, _, _ = await failure(memory.PutMemory(put("a", "x" * 1990), timeout=TIMEOUT_S))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and info.metadata["setting"] == MAX_BYTES_SETTING


def providers_file(tmp_path: Path, base_url: str) -> Path:
    path = tmp_path / "providers.yaml"
    path.write_text(
        f"providers:\n  localembed:\n    kind: openai\n    base_url: {base_url}\n    api_key_required: false\n"
    )
    return path


async def test_vector_and_hybrid_search_through_the_openai_sdk(tmp_path: Path) -> None:
    async with FakeEmbeddings() as embeddings:
        settings = SUITE_SETTINGS.model_copy(
            update={
                "providers_file": providers_file(tmp_path, embeddings.base_url),
                "memory_embedding_provider": "localembed",
                "memory_embedding_model": "fake-embed-1",
            }
        )
        async with memory_service(settings) as memory:
            await memory.PutMemory(put("drink", "Orders a double espresso every morning"), timeout=TIMEOUT_S)
            await memory.PutMemory(put("pet", "Has a puppy named Rex"), timeout=TIMEOUT_S)
            await memory.PutMemory(put("work", "Works on coffee machine firmware"), timeout=TIMEOUT_S)
            assert embeddings.requests[0]["model"] == "fake-embed-1"
            assert embeddings.requests[0]["input"] == ["Orders a double espresso every morning"]

            text = await memory.SearchMemories(search("coffee", mode=memory_pb2.SEARCH_MODE_TEXT), timeout=TIMEOUT_S)
            assert [r.memory.key for r in text.results] == ["work"]  # BM25 cannot see espresso is coffee
            vector = await memory.SearchMemories(
                search("coffee", mode=memory_pb2.SEARCH_MODE_VECTOR, limit=2), timeout=TIMEOUT_S
            )
            assert {r.memory.key for r in vector.results} == {"drink", "work"}
            dog = await memory.SearchMemories(
                search("canine", mode=memory_pb2.SEARCH_MODE_VECTOR, limit=1), timeout=TIMEOUT_S
            )
            assert [r.memory.key for r in dog.results] == ["pet"] and dog.results[0].score > 0.3
            hybrid = await memory.SearchMemories(search("coffee", limit=2), timeout=TIMEOUT_S)
            assert hybrid.mode == memory_pb2.SEARCH_MODE_HYBRID
            assert [r.memory.key for r in hybrid.results] == ["work", "drink"]  # in both rankings, then vector only

            embeddings.fail_next(503, times=2)  # the SDK retries once
            degraded = await memory.SearchMemories(search("espresso"), timeout=TIMEOUT_S)
            assert degraded.mode == memory_pb2.SEARCH_MODE_TEXT and "localembed" in degraded.fallback_reason
            assert [r.memory.key for r in degraded.results] == ["drink"]
            embeddings.fail_next(503, times=2)
            code, info, _, message = await failure(
                memory.SearchMemories(search("espresso", mode=memory_pb2.SEARCH_MODE_VECTOR), timeout=TIMEOUT_S)
            )
            assert code == grpc.StatusCode.UNAVAILABLE and info.metadata["provider"] == "localembed"
            embeddings.fail_next(400, "bad input")
            code, _, _, message = await failure(memory.PutMemory(put("x", "new fact"), timeout=TIMEOUT_S))
            assert code == grpc.StatusCode.UNAVAILABLE and "bad input" in message


async def test_the_gateway_serves_memories_inside_the_callers_tenant(tmp_path: Path) -> None:
    settings = SUITE_SETTINGS.model_copy(update={"api_keys_file": keys_file(tmp_path)})
    async with running_suite(settings) as (suite, stubs), grpc.aio.insecure_channel(suite.gateway_address) as channel:
        public = memory_pb2_grpc.MemoryServiceStub(channel)
        request = memory_pb2.PutMemoryRequest(namespace=["alice", "memories"], key="k", text="likes jazz")
        code, info, _, _ = await failure(public.PutMemory(request, timeout=TIMEOUT_S))
        assert code == grpc.StatusCode.UNAUTHENTICATED

        stored = await public.PutMemory(request, metadata=bearer("acme"), timeout=TIMEOUT_S)
        assert stored.created and list(stored.memory.namespace) == ["alice", "memories"]
        # Stored inside the caller's tenant, as the internal service sees it.
        internal = await stubs["memory"].GetMemory(
            memory_pb2.GetMemoryRequest(tenant_id="acme", namespace=["alice", "memories"], key="k"),
            timeout=TIMEOUT_S,
        )
        assert internal.memory.text == "likes jazz"

        address = {"namespace": ["alice", "memories"], "key": "k"}
        mine = await public.GetMemory(
            memory_pb2.GetMemoryRequest(tenant_id="acme", **address), metadata=bearer("acme"), timeout=TIMEOUT_S
        )
        assert mine.memory.text == "likes jazz"
        for call in (
            public.GetMemory(memory_pb2.GetMemoryRequest(**address), metadata=bearer("globex"), timeout=TIMEOUT_S),
            public.GetMemory(
                memory_pb2.GetMemoryRequest(tenant_id="acme", **address),
                metadata=bearer("globex"),
                timeout=TIMEOUT_S,
            ),
            public.ListMemories(
                memory_pb2.ListMemoriesRequest(tenant_id="acme"), metadata=bearer("globex"), timeout=TIMEOUT_S
            ),
        ):
            code, info, _, _ = await failure(call)
            assert code == grpc.StatusCode.NOT_FOUND and info.reason == "MEMORY_NOT_FOUND"

        theirs = await public.SearchMemories(
            memory_pb2.SearchMemoriesRequest(query="jazz"), metadata=bearer("globex"), timeout=TIMEOUT_S
        )
        assert list(theirs.results) == []
        ours = await public.SearchMemories(
            memory_pb2.SearchMemoriesRequest(query="jazz"), metadata=bearer("acme"), timeout=TIMEOUT_S
        )
        assert [r.memory.key for r in ours.results] == ["k"]
        spaces = await public.ListNamespaces(
            memory_pb2.ListNamespacesRequest(), metadata=bearer("globex"), timeout=TIMEOUT_S
        )
        assert list(spaces.namespaces) == []
        gone = await public.DeleteMemory(
            memory_pb2.DeleteMemoryRequest(**address), metadata=bearer("globex"), timeout=TIMEOUT_S
        )
        assert not gone.deleted  # globex's own (empty) namespace: acme's memory is untouched
        assert (
            await public.GetMemory(memory_pb2.GetMemoryRequest(**address), metadata=bearer("acme"))
        ).memory.key == "k"

        # The memory service's own validation reaches the application unchanged.
        code, _, violations, _ = await failure(
            public.PutMemory(
                memory_pb2.PutMemoryRequest(namespace=["a/b"], key="k", text="x"),
                metadata=bearer("acme"),
                timeout=TIMEOUT_S,
            )
        )
        assert code == grpc.StatusCode.INVALID_ARGUMENT and violations[0][0] == "namespace[0]"


async def test_replicas_on_redis_share_memories(redis_url: str, redis_prefix: str) -> None:
    """Two memory services on one Redis (COGMESH_REDIS_URL): a put on one is found by a search on the other."""
    settings = SUITE_SETTINGS.model_copy(update={"redis_url": redis_url, "redis_key_prefix": redis_prefix})
    async with memory_service(settings) as one, memory_service(settings) as two:
        await one.PutMemory(put("seat", "prefers an aisle seat on long flights", kind="travel"), timeout=TIMEOUT_S)
        found = await two.SearchMemories(search("aisle seat", filter=struct(kind="travel")), timeout=TIMEOUT_S)
        assert [r.memory.key for r in found.results] == ["seat"]
        await two.DeleteMemory(
            memory_pb2.DeleteMemoryRequest(tenant_id="acme", namespace=["u1", "memories"], key="seat"),
            timeout=TIMEOUT_S,
        )
        assert list((await one.SearchMemories(search("aisle"), timeout=TIMEOUT_S)).results) == []


async def test_an_unreachable_redis_stops_the_service_at_boot() -> None:
    settings = SUITE_SETTINGS.model_copy(update={"redis_url": "redis://127.0.0.1:1/0", "redis_timeout_s": 0.5})
    with pytest.raises(SystemExit, match="memory: cannot reach Redis"):
        await start(memory_main.build, settings, "127.0.0.1:0")


async def test_redis_going_away_is_unavailable_and_retryable(private_redis: RedisServer) -> None:
    settings = SUITE_SETTINGS.model_copy(update={"redis_url": private_redis.url, "redis_timeout_s": 1.0})
    async with memory_service(settings) as memory:
        await memory.PutMemory(put("k", "before the outage"), timeout=TIMEOUT_S)
        private_redis.stop()
        for call in (
            memory.PutMemory(put("k2", "during the outage"), timeout=TIMEOUT_S),
            memory.SearchMemories(search("outage"), timeout=TIMEOUT_S),
        ):
            code, info, _, message = await failure(call)
            assert code == grpc.StatusCode.UNAVAILABLE and info.reason == "DEPENDENCY_UNAVAILABLE", message
            assert info.metadata["retryable"] == "true" and "Redis" in message
        private_redis.start()
        found = await memory.SearchMemories(search("outage"), timeout=TIMEOUT_S)
        assert [r.memory.key for r in found.results] == []  # a private Redis without persistence: a fresh start
