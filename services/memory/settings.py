"""The memory service's own settings (COGMESH_*): TTLs, caps, the embedding model and the index cache.

What every service reads alike is in services.kit.config.Settings, which this extends.
"""

from __future__ import annotations

from pydantic import Field

from services.kit.config import Settings


class MemorySettings(Settings):
    """What the memory service reads besides the shared settings."""

    memory_ttl_s: float = Field(0.0, ge=0, description="seconds a memory lives when its put names no TTL; 0: forever")
    memory_max_items: int = Field(10_000, gt=0, description="memories one namespace may hold")
    memory_max_bytes: int = Field(
        32 * 2**20, gt=0, description="bytes (values, texts, embeddings) one namespace may hold"
    )
    memory_max_value_bytes: int = Field(64 * 2**10, gt=0, description="bytes of one memory's value and text together")
    memory_embedding_model: str = Field(
        "", description="embedding model for vector search, e.g. text-embedding-3-small; empty: BM25 only"
    )
    memory_embedding_provider: str = Field(
        "openai", description="provider (of providers_file) serving memory_embedding_model; an OpenAI-compatible one"
    )
    memory_cache_items: int = Field(
        1_000_000, gt=0, description="memories a memory replica keeps indexed from Redis (least recently used go first)"
    )
