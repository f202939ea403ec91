"""Each provider adapter, through its official SDK, against a local server speaking that provider's wire format."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import structlog

from services.kit.config import Settings
from services.kit.logging import configure_logging
from services.lib.llm import (
    ChatMessage,
    ChatModel,
    ModelChunk,
    ModelError,
    TextDelta,
    ToolCallChunk,
    ToolCallRequest,
    ToolSchema,
    UsageChunk,
)
from services.lib.providers import ProviderConfig
from services.runtime.providers.registry import ProviderRegistry
from tests.fakes.providers import Call, Fail, FakeAnthropic, FakeGoogle, FakeOpenAI, FakeProvider, Reply

pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")

KEY = "sk-test-0123456789"
CALC = ToolSchema(
    "calculator",
    "Evaluate arithmetic.",
    {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
)
CONVERSATION = [
    ChatMessage("system", "be brief"),
    ChatMessage("user", "What is 2 + 3?"),
    ChatMessage("assistant", "", (ToolCallRequest("call_a", "calculator", {"expression": "2 + 3"}),)),
    ChatMessage("tool", "5", tool_call_id="call_a", name="calculator"),
    ChatMessage("assistant", "2 + 3 = 5."),
    ChatMessage("user", "And 4 * 4?"),
]
FAKES: dict[str, type[FakeProvider]] = {"openai": FakeOpenAI, "anthropic": FakeAnthropic, "google": FakeGoogle}
MODEL_IDS = {"openai": "gpt-4o", "anthropic": "claude-sonnet-4-20250514", "google": "gemini-2.5-pro"}


# Each SDK over each HTTP stack the runtime can give it (ProviderConfig.http_client); google-genai picks its own.
PROVIDERS = [
    ("openai", "aiohttp"),
    ("openai", "httpx"),
    ("anthropic", "aiohttp"),
    ("anthropic", "httpx"),
    ("google", ""),
]


@pytest.fixture(params=PROVIDERS, ids=["-".join(filter(None, p)) for p in PROVIDERS])
def provider(request: pytest.FixtureRequest) -> tuple[str, str]:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def kind(provider: tuple[str, str]) -> str:
    return provider[0]


@pytest.fixture
def http_client(provider: tuple[str, str]) -> str:
    return provider[1] or "aiohttp"


@pytest.fixture
async def fake(kind: str) -> AsyncIterator[FakeProvider]:
    async with FAKES[kind]() as server:
        yield server


def adapter(
    kind: str, fake: FakeProvider, tmp_path: Path, http_client: str = "aiohttp", **options: Any
) -> tuple[ChatModel, ProviderRegistry]:
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    base = fake.url + ("/v1" if kind == "openai" else "")
    config = ProviderConfig(kind=kind, base_url=base, api_key_file=key_file, http_client=http_client)  # type: ignore[arg-type]
    registry = ProviderRegistry({kind: config})
    return registry.model(kind, MODEL_IDS[kind], **options), registry


async def collect(model: ChatModel, messages: list[ChatMessage] = CONVERSATION) -> list[ModelChunk]:
    async def run() -> list[ModelChunk]:
        return [chunk async for chunk in model.stream(messages, [CALC])]

    return await asyncio.wait_for(run(), 10)


async def test_streams_text_tool_calls_from_fragments_and_usage(
    kind: str, http_client: str, fake: FakeProvider, tmp_path: Path
) -> None:
    fake.then(
        Reply(
            text=["Let me ", "compute."],
            calls=[Call("calculator", ['{"expr', 'ession": ', '"4 * 4"}'], id="call_1")],
            usage=(120, 30),
        )
    )
    model, registry = adapter(kind, fake, tmp_path, http_client)
    chunks = await collect(model)
    await registry.close()

    assert [c.text for c in chunks if isinstance(c, TextDelta)] == ["Let me ", "compute."]
    calls = [c.call for c in chunks if isinstance(c, ToolCallChunk)]
    assert len(calls) == 1
    assert (calls[0].name, dict(calls[0].arguments), calls[0].arguments_error) == (
        "calculator",
        {"expression": "4 * 4"},
        "",
    )
    assert calls[0].id  # Gemini sends no id: the adapter makes one
    assert isinstance(chunks[-1], UsageChunk) and (chunks[-1].input_tokens, chunks[-1].output_tokens) == (120, 30)


async def test_model_calls_one_after_another_share_one_connection(
    kind: str, http_client: str, fake: FakeProvider, tmp_path: Path
) -> None:
    model, registry = adapter(kind, fake, tmp_path, http_client)
    for _ in range(5):
        assert [c.text for c in await collect(model) if isinstance(c, TextDelta)] == ["ok"]
    await registry.close()
    # A response read to its end gives its connection back to the pool: no new connection per call.
    assert len({request.client for request in fake.model_requests}) == 1


async def test_sends_the_conversation_tools_and_key_in_the_provider_format(
    kind: str, http_client: str, fake: FakeProvider, tmp_path: Path
) -> None:
    model, registry = adapter(kind, fake, tmp_path, http_client, temperature=0.5, max_tokens=64)
    await collect(model)
    await registry.close()
    request = fake.model_requests[-1]
    body = request.json()
    if kind == "openai":
        assert request.headers["authorization"] == f"Bearer {KEY}"
        assert body["model"] == "gpt-4o" and body["stream"] is True and body["temperature"] == 0.5
        roles = [m["role"] for m in body["messages"]]
        assert roles == ["system", "user", "assistant", "tool", "assistant", "user"]
        assert body["messages"][2]["tool_calls"][0]["function"] == {
            "name": "calculator",
            "arguments": '{"expression": "2 + 3"}',
        }
        assert body["messages"][3] == {"role": "tool", "tool_call_id": "call_a", "content": "5"}
        assert body["tools"][0]["function"]["name"] == "calculator"
        assert body["stream_options"] == {"include_usage": True}
    elif kind == "anthropic":
        assert KEY in (
            request.headers.get("x-api-key"),
            request.headers.get("authorization", "").removeprefix("Bearer "),
        )
        assert body["system"] == "be brief" and body["max_tokens"] == 64
        assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user", "assistant", "user"]
        assert body["messages"][1]["content"][0] == {
            "type": "tool_use",
            "id": "call_a",
            "name": "calculator",
            "input": {"expression": "2 + 3"},
        }
        assert body["messages"][2]["content"][0]["type"] == "tool_result"
        assert body["tools"][0]["input_schema"]["required"] == ["expression"]
    else:
        assert request.headers["x-goog-api-key"] == KEY
        assert "gemini-2.5-pro:streamGenerateContent" in request.path
        assert body["systemInstruction"]["parts"][0]["text"] == "be brief"
        assert [c["role"] for c in body["contents"]] == ["user", "model", "user", "model", "user"]
        assert body["contents"][1]["parts"][0]["functionCall"]["name"] == "calculator"
        assert body["contents"][2]["parts"][0]["functionResponse"]["response"] == {"result": "5"}
        declaration = body["tools"][0]["functionDeclarations"][0]
        schema = declaration.get("parametersJsonSchema", declaration.get("parameters_json_schema"))
        assert declaration["name"] == "calculator" and schema["required"] == ["expression"]
        assert body["generationConfig"]["maxOutputTokens"] == 64


async def test_rate_limit_is_classified_with_retry_after(
    kind: str, http_client: str, fake: FakeProvider, tmp_path: Path
) -> None:
    fake.then(Fail(429, "slow down", headers={"retry-after": "7"}))
    model, registry = adapter(kind, fake, tmp_path, http_client)
    with pytest.raises(ModelError) as caught:
        await collect(model)
    await registry.close()
    assert (caught.value.kind, caught.value.retryable, caught.value.retry_after_s) == ("rate_limited", True, 7.0)
    assert len(fake.model_requests) == 1  # the SDK does not retry on its own: the loop decides


@pytest.mark.parametrize("status", [500, 503])
async def test_server_errors_are_retryable_provider_errors(
    kind: str, http_client: str, fake: FakeProvider, tmp_path: Path, status: int
) -> None:
    fake.then(Fail(status, "upstream exploded"))
    model, registry = adapter(kind, fake, tmp_path, http_client)
    with pytest.raises(ModelError) as caught:
        await collect(model)
    await registry.close()
    assert (caught.value.kind, caught.value.retryable) == ("provider_error", True)
    assert str(status) in str(caught.value) and "upstream exploded" in str(caught.value)


async def test_bad_key_and_context_length_are_not_retryable(
    kind: str, http_client: str, fake: FakeProvider, tmp_path: Path
) -> None:
    fake.then(Fail(401, "invalid api key"), Fail(400, "prompt is too long: 300000 tokens > 200000 maximum"))
    model, registry = adapter(kind, fake, tmp_path, http_client)
    with pytest.raises(ModelError) as auth:
        await collect(model)
    with pytest.raises(ModelError) as too_long:
        await collect(model)
    await registry.close()
    assert (auth.value.kind, auth.value.retryable) == ("authentication", False)
    assert (too_long.value.kind, too_long.value.retryable) == ("context_length", False)
    assert KEY not in str(auth.value)


async def test_malformed_chunk_is_a_provider_error(
    kind: str, http_client: str, fake: FakeProvider, tmp_path: Path
) -> None:
    fake.then(Reply(text=["a", "b", "c"], malformed_at=2))
    model, registry = adapter(kind, fake, tmp_path, http_client)
    with pytest.raises(ModelError) as caught:
        await collect(model)
    await registry.close()
    assert caught.value.kind == "provider_error"
    assert "malformed" in str(caught.value)


async def test_a_provider_nobody_listens_at_is_a_retryable_connection_failure(kind: str, http_client: str) -> None:
    """Not a timeout: openai's aiohttp transport reports a refused connection as httpx2's ConnectTimeout."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    base = f"http://127.0.0.1:{port}" + ("/v1" if kind == "openai" else "")
    config = ProviderConfig(kind=kind, base_url=base, api_key_required=False, http_client=http_client)  # type: ignore[arg-type]
    registry = ProviderRegistry({kind: config})
    with pytest.raises(ModelError) as caught:
        await collect(registry.model(kind, MODEL_IDS[kind]))
    await registry.close()
    assert (caught.value.kind, caught.value.retryable) == ("provider_error", True)
    assert str(caught.value).startswith(f"connection to {kind} failed: "), caught.value


class ForwardProxy:
    """A plain HTTP forward proxy (absolute-form requests, no CONNECT) that notes each request it carries."""

    def __init__(self) -> None:
        self.carried: list[str] = []
        self.url = ""
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> ForwardProxy:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        line, rest = head.split(b"\r\n", 1)
        method, target, version = line.split(b" ")
        self.carried.append(f"{method.decode()} {target.decode()}")
        url = urlsplit(target.decode())
        upstream_reader, upstream_writer = await asyncio.open_connection(url.hostname, url.port)
        upstream_writer.write(b" ".join((method, url.path.encode(), version)) + b"\r\n" + rest)

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()
            sink.close()

        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer), return_exceptions=True)


@pytest.mark.parametrize("provider", [p for p in PROVIDERS if p[0] != "google"], indirect=True)
async def test_a_proxy_named_in_the_environment_carries_the_call(
    kind: str, http_client: str, fake: FakeProvider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both HTTP stacks honour HTTP_PROXY, as the SDKs' default does (a provider behind a corporate proxy)."""
    fake.then(Reply(text=["via the proxy"]))
    async with ForwardProxy() as proxy:
        for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "http_proxy"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        model, registry = adapter(kind, fake, tmp_path, http_client)
        chunks = await collect(model)
        await registry.close()
    assert [c.text for c in chunks if isinstance(c, TextDelta)] == ["via the proxy"]
    assert len(fake.model_requests) == 1
    assert proxy.carried == [f"POST {fake.url}{fake.model_requests[0].path}"]


async def test_stream_cut_midway_is_a_retryable_provider_error(
    kind: str, http_client: str, fake: FakeProvider, tmp_path: Path
) -> None:
    fake.then(Reply(text=["one ", "two ", "three"], cut_after=2))
    model, registry = adapter(kind, fake, tmp_path, http_client)
    seen: list[ModelChunk] = []
    with pytest.raises(ModelError) as caught:
        async for chunk in model.stream(CONVERSATION, [CALC]):
            seen.append(chunk)
    await registry.close()
    assert (caught.value.kind, caught.value.retryable) == ("provider_error", True)
    assert "connection" in str(caught.value)


async def test_cancelling_the_consumer_aborts_the_http_request(
    kind: str, http_client: str, fake: FakeProvider, tmp_path: Path
) -> None:
    """What CancelTurn does: the task reading the stream is cancelled mid-read; the connection must close."""
    fake.then(Reply(text=[f"w{i} " for i in range(200)], delay_s=0.02))
    model, registry = adapter(kind, fake, tmp_path, http_client)
    first = asyncio.Event()

    async def consume() -> None:
        async for chunk in model.stream(CONVERSATION, [CALC]):
            if isinstance(chunk, TextDelta):
                first.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(fake.wait_for_disconnects(1), 30)  # the server saw the connection close
    await registry.close()
    assert fake.disconnects == 1
    assert len(fake.model_requests) == 1


async def test_tool_arguments_that_are_not_json_are_reported_not_raised(tmp_path: Path) -> None:
    async with FakeOpenAI() as fake:
        fake.then(Reply(calls=[Call("calculator", ['{"expression": ', "oops"])]))
        model, registry = adapter("openai", fake, tmp_path)
        chunks = await collect(model)
        await registry.close()
    call = next(c.call for c in chunks if isinstance(c, ToolCallChunk))
    assert call.arguments == {} and "not valid JSON" in call.arguments_error


async def test_openai_compatible_servers_take_any_base_url(tmp_path: Path) -> None:
    """vLLM, Ollama and llama.cpp serve /v1/chat/completions at their own address, without a real key."""
    async with FakeOpenAI() as fake:
        fake.then(Reply(text=["hi from a local server"]))
        config = ProviderConfig(kind="openai", base_url=fake.url + "/v1", api_key_required=False)
        registry = ProviderRegistry({"ollama": config})
        chunks = await collect(registry.model("ollama", "llama3.2"))
        await registry.close()
    assert "".join(c.text for c in chunks if isinstance(c, TextDelta)) == "hi from a local server"
    assert json.loads(fake.model_requests[0].body)["model"] == "llama3.2"


async def test_openai_conversation_reaches_the_wire_without_the_sdks_param_walk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The conversation and tools are wire JSON already: they go as extra_body, not through the SDK's
    typed transform of `messages` and `tools` (which cost every model request 0.5-1 ms)."""
    import openai.resources.chat.completions.completions as completions

    walked: list[dict[str, Any]] = []
    transform = completions.async_maybe_transform

    async def recording(data: Any, *args: Any, **kwargs: Any) -> Any:
        walked.append(dict(data))
        return await transform(data, *args, **kwargs)

    monkeypatch.setattr(completions, "async_maybe_transform", recording)
    async with FakeOpenAI() as fake:
        fake.then(Reply(text=["4 * 4 = 16."]))
        model, registry = adapter("openai", fake, tmp_path)
        await collect(model)
        await registry.close()
    assert walked and walked[-1]["messages"] == [] and not isinstance(walked[-1].get("tools"), list)
    body = fake.model_requests[-1].json()
    assert len(body["messages"]) == len(CONVERSATION) and body["tools"][0]["function"]["name"] == "calculator"


@pytest.fixture
def log_buffer() -> Iterator[io.StringIO]:
    """Logging configured as a service configures it, into a buffer; restored afterwards."""
    structlog_config, root = structlog.get_config(), logging.getLogger()
    root_handlers, root_level = list(root.handlers), root.level
    levels = {name: logging.getLogger(name).level for name in logging.root.manager.loggerDict}
    buffer = io.StringIO()
    yield buffer
    structlog.configure(**structlog_config)
    root.handlers, root.level = root_handlers, root_level
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


@pytest.mark.parametrize("log_sensitive", [False, True])
async def test_the_sdks_http_clients_log_request_urls_only_when_sensitive_logs_are_on(
    kind: str, http_client: str, fake: FakeProvider, tmp_path: Path, log_buffer: io.StringIO, log_sensitive: bool
) -> None:
    """The openai and anthropic SDKs' HTTP client (httpx2, not httpx) logs every request's URL at INFO: a line
    per model call, and a URL may carry a key, so it is written only with log_sensitive (Google's logs none)."""
    configure_logging("test", Settings(log_sensitive=log_sensitive), stream=log_buffer)
    fake.then(Reply(text=["hi"]))
    model, registry = adapter(kind, fake, tmp_path, http_client)
    await collect(model)
    await registry.close()
    logged = [line for line in log_buffer.getvalue().splitlines() if fake.url.split("//")[1] in line]
    assert bool(logged) == (log_sensitive and kind != "google"), logged
