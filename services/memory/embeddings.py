"""Embeddings for vector search: the OpenAI embeddings endpoint through the official `openai` SDK.

The provider comes from the same providers file as the runtime's models
(COGMESH_PROVIDERS_FILE, services.lib.providers): its base_url, so any server that
speaks the OpenAI wire format (vLLM, Ollama, llama.cpp server, a local test server)
works, and its key source. Vectors are normalised to unit length, so a dot product
is their cosine similarity.
"""

from __future__ import annotations

import httpx2
import numpy as np
import openai

from services.kit.errors import Unavailable
from services.lib.providers import ProviderConfigError, load_providers
from services.memory.settings import MemorySettings

MAX_ATTEMPTS = 2  # the SDK retries a failed call once (connection errors, 429, 5xx)


class EmbeddingFailed(Unavailable):
    """The embedding provider did not answer with embeddings."""


class Embedder:
    def __init__(self, client: openai.AsyncOpenAI, model: str, provider: str = "openai"):
        self.model = model
        self.provider = provider
        self._client = client

    @classmethod
    def from_settings(cls, settings: MemorySettings) -> Embedder | None:
        """The configured embedder, None without an embedding model; SystemExit naming what is wrong."""
        model, name = settings.memory_embedding_model, settings.memory_embedding_provider
        if not model:
            return None
        try:
            config = load_providers(settings.providers_file).get(name)
            key = config.api_key() if config is not None else None
        except ProviderConfigError as exc:
            raise SystemExit(f"memory: {exc}") from exc
        if config is None or config.kind != "openai":
            raise SystemExit(
                f"memory: COGMESH_MEMORY_EMBEDDING_PROVIDER={name!r} must name an OpenAI-compatible provider "
                "(kind: openai) of the providers file"
            )
        if key is None:
            raise SystemExit(
                f"memory: embedding model {model!r} needs an API key for {name!r}: set {config.key_sources()}"
            )
        client = openai.AsyncOpenAI(
            api_key=key.get_secret_value(),
            base_url=config.base_url,
            max_retries=MAX_ATTEMPTS - 1,
            timeout=httpx2.Timeout(config.timeout_s, connect=config.connect_timeout_s),
        )
        return cls(client, model, name)

    async def embed(self, texts: list[str]) -> list[np.ndarray]:
        """One unit-length float32 vector per text, in order."""
        try:
            response = await self._client.embeddings.create(model=self.model, input=texts)
        except openai.OpenAIError as exc:
            raise self._failed(str(exc)) from exc
        vectors = sorted(response.data, key=lambda item: item.index)
        if len(vectors) != len(texts):
            raise self._failed(f"{len(vectors)} embeddings for {len(texts)} texts")
        out = []
        for item in vectors:
            vector = np.asarray(item.embedding, dtype=np.float32)
            norm = float(np.linalg.norm(vector))
            if not vector.size or not np.isfinite(norm):
                raise self._failed("an embedding is empty or not finite")
            out.append(vector / norm if norm else vector)
        return out

    def _failed(self, detail: str) -> EmbeddingFailed:
        return EmbeddingFailed(
            f"embedding provider {self.provider!r} (model {self.model!r}) failed: {' '.join(detail.split())[:300]}",
            metadata={"dependency": "embeddings", "provider": self.provider, "retryable": "true"},
        )

    async def close(self) -> None:
        await self._client.close()
