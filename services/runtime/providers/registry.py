"""Provider name -> adapter: builds (and reuses) one SDK client per provider.

SDK retries are off (`max_retries=0`): the loop retries and fails over itself, so it
can honour retry-after, report each retry as an event and stop at once on cancel.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anthropic
import httpx2
import openai
from google import genai
from google.genai import types as genai_types

from services.lib.llm import ChatModel
from services.lib.providers import ProviderConfig, ProviderConfigError
from services.runtime.providers.anthropic_messages import AnthropicChatModel
from services.runtime.providers.google_genai import GoogleChatModel
from services.runtime.providers.openai_compat import OpenAIChatModel


class ProviderUnavailable(Exception):
    """The provider cannot be called: unknown, or no API key. The message says how to fix it."""


class ProviderRegistry:
    def __init__(self, providers: Mapping[str, ProviderConfig]) -> None:
        self._providers = dict(providers)
        self._clients: dict[str, Any] = {}

    def names(self) -> list[str]:
        return sorted(self._providers)

    def model(
        self, provider: str, model_id: str, *, temperature: float | None = None, max_tokens: int | None = None
    ) -> ChatModel:
        """An adapter for `model_id` at `provider`; ProviderUnavailable when it cannot be called."""
        config = self._providers.get(provider)
        if config is None:
            raise ProviderUnavailable(
                f"model {model_id!r} is served by provider {provider!r}, which is not configured; "
                f"known providers: {', '.join(self.names())} (add it to the providers file)"
            )
        client = self._client(provider, config, model_id)
        options: dict[str, Any] = {"provider": provider, "temperature": temperature, "max_tokens": max_tokens}
        if config.kind == "openai":
            return OpenAIChatModel(client, model_id, **options)
        if config.kind == "anthropic":
            return AnthropicChatModel(client, model_id, **options)
        return GoogleChatModel(client, model_id, **options)

    def _client(self, provider: str, config: ProviderConfig, model_id: str) -> Any:
        if provider in self._clients:
            return self._clients[provider]
        try:
            key = config.api_key()
        except ProviderConfigError as exc:
            raise ProviderUnavailable(f"model {model_id!r}: provider {provider!r}: {exc}") from exc
        if key is None:
            raise ProviderUnavailable(
                f"model {model_id!r} needs an API key for provider {provider!r}: set {config.key_sources()}"
            )
        secret = key.get_secret_value()
        timeout = httpx2.Timeout(config.timeout_s, connect=config.connect_timeout_s)
        client: Any
        if config.kind == "openai":
            http = openai.DefaultAioHttpClient(timeout=timeout) if config.http_client == "aiohttp" else None
            client = openai.AsyncOpenAI(
                api_key=secret, base_url=config.base_url, max_retries=0, timeout=timeout, http_client=http
            )
        elif config.kind == "anthropic":
            http = anthropic.DefaultAioHttpClient(timeout=timeout) if config.http_client == "aiohttp" else None
            client = anthropic.AsyncAnthropic(
                api_key=secret, base_url=config.base_url, max_retries=0, timeout=timeout, http_client=http
            )
        else:
            options = genai_types.HttpOptions(
                base_url=config.base_url,
                timeout=int(config.timeout_s * 1000),
                retry_options=genai_types.HttpRetryOptions(attempts=1),
            )
            client = genai.Client(api_key=secret, http_options=options)
        self._clients[provider] = client
        return client

    async def close(self) -> None:
        for client in self._clients.values():
            if isinstance(client, genai.Client):
                await client.aio.aclose()
            else:
                await client.close()
        self._clients.clear()
