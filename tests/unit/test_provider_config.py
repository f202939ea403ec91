"""Provider endpoints and key sources: built-ins, the providers file, env and secret files."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.lib.providers import BUILTIN_PROVIDERS, ProviderConfig, ProviderConfigError, load_providers
from services.runtime.providers.errors import retry_after_s
from services.runtime.providers.registry import ProviderRegistry, ProviderUnavailable


def test_builtins_cover_the_catalogue_and_local_servers() -> None:
    assert {"openai", "anthropic", "google", "deepseek", "vllm", "ollama", "llamacpp"} <= set(BUILTIN_PROVIDERS)
    assert BUILTIN_PROVIDERS["deepseek"].kind == "openai" and BUILTIN_PROVIDERS["deepseek"].base_url
    assert BUILTIN_PROVIDERS["ollama"].base_url == "http://127.0.0.1:11434/v1"


def test_key_from_env_then_secret_file_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COGMESH_TEST_KEY", "from-env")
    config = ProviderConfig(kind="openai", api_key_env=["COGMESH_TEST_MISSING", "COGMESH_TEST_KEY"])
    key = config.api_key()
    assert key is not None and key.get_secret_value() == "from-env"
    assert "from-env" not in repr(key) and "from-env" not in str(key)  # a SecretStr never prints its value
    secret = tmp_path / "secret"
    secret.write_text("  from-file\n")
    with_file = config.model_copy(update={"api_key_file": secret})
    assert with_file.api_key().get_secret_value() == "from-file"  # type: ignore[union-attr]


def test_missing_key_names_where_to_put_it_and_unknown_provider_lists_known(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    registry = ProviderRegistry(BUILTIN_PROVIDERS)
    with pytest.raises(ProviderUnavailable, match=r"gpt-4o.*'openai'.*\$OPENAI_API_KEY"):
        registry.model("openai", "gpt-4o")
    with pytest.raises(ProviderUnavailable, match=r"'acme'.*known providers: anthropic"):
        registry.model("acme", "m1")
    assert registry.model("ollama", "llama3.2").name == "llama3.2"  # local servers need no key


def test_unreadable_secret_file_is_a_clear_error(tmp_path: Path) -> None:
    registry = ProviderRegistry({"openai": ProviderConfig(kind="openai", api_key_file=tmp_path / "nope")})
    with pytest.raises(ProviderUnavailable, match=r"api_key_file .*nope"):
        registry.model("openai", "gpt-4o")


def test_file_overrides_builtin_fields_and_adds_providers(tmp_path: Path) -> None:
    path = tmp_path / "providers.yaml"
    path.write_text(
        "providers:\n"
        "  openai:\n    base_url: http://127.0.0.1:9999/v1\n"
        "  mylab:\n    kind: anthropic\n    api_key_file: keys/mylab\n"
    )
    providers = load_providers(path)
    assert providers["openai"].base_url == "http://127.0.0.1:9999/v1"
    assert providers["openai"].api_key_env == ["OPENAI_API_KEY"]  # kept from the built-in entry
    assert providers["mylab"].kind == "anthropic"
    assert providers["mylab"].api_key_file == tmp_path / "keys" / "mylab"
    assert (providers["openai"].http_client, providers["mylab"].http_client) == ("aiohttp", "aiohttp")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("providers:\n  x:\n    kind: cohere\n", "providers.x.kind"),
        ("providers:\n  openai:\n    timeout_s: -1\n", "providers.openai.timeout_s"),
        ("providers:\n  openai:\n    api_key: sk-inline\n", "providers.openai.api_key"),
        ("providers:\n  openai:\n    http_client: requests\n", "providers.openai.http_client"),
        ("provider: {}\n", "provider"),
        ("providers: [\n", "providers.yaml:2: YAML syntax error"),
    ],
)
def test_invalid_file_names_the_field(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "providers.yaml"
    path.write_text(text)
    with pytest.raises(ProviderConfigError) as caught:
        load_providers(path)
    assert expected in str(caught.value) and "providers.yaml" in str(caught.value)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "3"}, 3.0),
        ({"Retry-After-Ms": "250"}, 0.25),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0.0),  # a date in the past: no wait
        ({"retry-after": "soon"}, None),
        ({}, None),
    ],
)
def test_retry_after_parsing(headers: dict[str, str], expected: float | None) -> None:
    assert retry_after_s(headers) == expected
