"""Where each model provider is and how to authenticate to it (the runtime's models, the memory service's embeddings).

The models service says which provider serves a model ("openai", "anthropic",
"deepseek", ...); this file says how to reach that provider: the wire protocol
(`kind`), the endpoint (`base_url`, so vLLM, Ollama, llama.cpp server and DeepSeek
work through the OpenAI-compatible adapter) and where the API key comes from — an
environment variable or a secret file (a mounted Kubernetes secret), never the
config file itself and never a log line.

Built-in entries cover the catalogue's providers and common local servers; a YAML
file (COGMESH_PROVIDERS_FILE) adds providers or overrides fields of built-in ones:

    providers:
      openai:
        base_url: http://127.0.0.1:8000/v1   # e.g. a vLLM server
      mylab:
        kind: openai
        base_url: http://gpu-box:8080/v1
        api_key_file: /run/secrets/mylab
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from services.kit import yaml_config
from services.kit.yaml_config import ConfigError, ConfigProblem

ProviderKind = Literal["openai", "anthropic", "google"]
HttpClientKind = Literal["aiohttp", "httpx"]


class ProviderConfigError(ConfigError):
    """The providers file is unreadable or invalid (each problem names file, line and field), or a key file is."""


class ProviderConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: ProviderKind
    base_url: str | None = None
    # Environment variables tried in order; the first one set wins.
    api_key_env: list[str] = Field(default_factory=list)
    api_key_file: Path | None = None
    # Local servers (Ollama, vLLM, llama.cpp) accept any key; the SDKs still want one.
    api_key_required: bool = True
    timeout_s: float = Field(120.0, gt=0)
    connect_timeout_s: float = Field(10.0, gt=0)
    # The HTTP stack under the openai and anthropic SDKs (google-genai picks its own). The SDKs' aiohttp
    # transport costs 40-50% less CPU than their default httpx one per streamed reply (bench/results/
    # hotpath.notes.md); "httpx" keeps the SDK's own.
    http_client: HttpClientKind = "aiohttp"

    def api_key(self) -> SecretStr | None:
        """The key from the secret file, else the first set environment variable."""
        if self.api_key_file is not None:
            try:
                text = self.api_key_file.read_text(encoding="utf-8").strip()
            except OSError as exc:
                problem = ConfigProblem(f"api_key_file {self.api_key_file}", 0, "", str(exc.strerror or exc))
                raise ProviderConfigError([problem]) from exc
            if text:
                return SecretStr(text)
        for name in self.api_key_env:
            value = os.environ.get(name, "").strip()
            if value:
                return SecretStr(value)
        if not self.api_key_required:
            return SecretStr("not-needed")
        return None

    def key_sources(self) -> str:
        sources = [f"${name}" for name in self.api_key_env]
        if self.api_key_file is not None:
            sources.insert(0, f"file {self.api_key_file}")
        return " or ".join(sources) or "api_key_file"


BUILTIN_PROVIDERS: dict[str, ProviderConfig] = {
    "openai": ProviderConfig(kind="openai", api_key_env=["OPENAI_API_KEY"]),
    "deepseek": ProviderConfig(kind="openai", base_url="https://api.deepseek.com/v1", api_key_env=["DEEPSEEK_API_KEY"]),
    "anthropic": ProviderConfig(kind="anthropic", api_key_env=["ANTHROPIC_API_KEY"]),
    "google": ProviderConfig(kind="google", api_key_env=["GEMINI_API_KEY", "GOOGLE_API_KEY"]),
    "vllm": ProviderConfig(
        kind="openai", base_url="http://127.0.0.1:8000/v1", api_key_env=["VLLM_API_KEY"], api_key_required=False
    ),
    "ollama": ProviderConfig(kind="openai", base_url="http://127.0.0.1:11434/v1", api_key_required=False),
    "llamacpp": ProviderConfig(kind="openai", base_url="http://127.0.0.1:8080/v1", api_key_required=False),
}


class _ProvidersFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    providers: dict[str, dict[str, object]] = Field(default_factory=dict)


def load_providers(path: Path | None) -> dict[str, ProviderConfig]:
    """Built-in providers, with the file's entries merged over them field by field."""
    providers = dict(BUILTIN_PROVIDERS)
    if path is None:
        return providers
    problems: list[ConfigProblem] = []
    try:
        document = yaml_config.parse(yaml_config.read_text(path), str(path))
        parsed = document.validate(_ProvidersFile)
        for name, fields in parsed.providers.items():
            base = providers.get(name)
            merged = (base.model_dump(exclude_unset=False) if base else {}) | fields
            if isinstance(merged.get("api_key_file"), str):
                # A relative secret path is relative to the providers file.
                merged["api_key_file"] = path.parent / str(merged["api_key_file"])
            try:
                providers[name] = document.validate(ProviderConfig, merged, at=("providers", name))
            except ConfigError as exc:
                problems += exc.problems
    except ConfigError as exc:
        raise ProviderConfigError(exc.problems) from exc
    if problems:
        raise ProviderConfigError(problems)
    return providers
