"""Logs: one JSON line per event carrying trace, span, service, tenant, session and turn
ids; API keys, provider keys and prompt text never logged unless the debug flag says so."""

from __future__ import annotations

import io
import json
import logging
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio
import structlog

from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from gateway.auth import hash_key
from services.kit.config import Settings
from services.kit.logging import Redactor, configure_logging, log, register_secret
from services.kit.telemetry import configure_tracing
from services.suite.inprocess import Suite, start_suite
from tests.integration.conftest import SUITE_SETTINGS, TIMEOUT_S
from tests.support.waiting import until

pytestmark = pytest.mark.asyncio(loop_scope="module")

API_KEY = "cm_" + secrets.token_urlsafe(32)  # as `cogmesh keys new` makes them
PROVIDER_KEY = "sk-proj-" + secrets.token_hex(24)
FILE_KEY = "key-from-a-file-" + secrets.token_hex(8)
MARKER = "pineapple-umbrella-" + secrets.token_hex(4)  # prompt text that must not leak
PROMPT = f"What is 6 * 7? Also, {MARKER}"


@pytest.fixture(scope="module")
def keys_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("keys") / "api-keys.yaml"
    path.write_text(f"keys:\n  - {{sha256: {hash_key(API_KEY)}, tenant: acme, principal: acme-web}}\n")
    return path


@pytest.fixture(scope="module")
def provider_key_in_env() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OPENAI_API_KEY", PROVIDER_KEY)
        yield


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def authed_suite(keys_file: Path, provider_key_in_env: None) -> AsyncIterator[Suite]:
    configure_tracing("test", Settings())  # as every service process does: trace ids in its logs
    structlog_config, root = structlog.get_config(), logging.getLogger()
    root_handlers, root_level = list(root.handlers), root.level
    suite = await start_suite(SUITE_SETTINGS.model_copy(update={"api_keys_file": keys_file, "dev_mode": False}))
    try:
        yield suite
    finally:
        await suite.stop(0)
        # Leave logging as the other tests found it.
        structlog.configure(**structlog_config)
        root.handlers, root.level = root_handlers, root_level


async def run_turn(suite: Suite) -> str:
    """A real calculator turn with an API key; returns its turn_id."""
    metadata = (("authorization", f"Bearer {API_KEY}"),)
    async with grpc.aio.insecure_channel(suite.gateway_address) as channel:
        gateway = gateway_pb2_grpc.GatewayServiceStub(channel)
        created = await gateway.CreateSession(gateway_pb2.CreateSessionRequest(), metadata=metadata, timeout=TIMEOUT_S)
        request = gateway_pb2.SendMessageRequest(session_id=created.session.session_id, content=PROMPT)
        events = [e async for r in gateway.SendMessage(request, metadata=metadata, timeout=TIMEOUT_S) for e in r.events]
    assert events[-1].WhichOneof("payload") == "final", events[-1]
    return events[-1].turn_id


def emit_sensitive_lines() -> None:
    """What careless code might log: keys in fields, headers and text, the prompt, a stdlib line."""
    log.info(
        "calling provider",
        api_key=PROVIDER_KEY,
        headers=[("authorization", f"Bearer {API_KEY}"), ("x-request-id", "r1")],
        content=PROMPT,
        note=f"key in use: {PROVIDER_KEY}; file key {FILE_KEY}",
    )
    logging.getLogger("openai").warning("retrying with key %s for %s", PROVIDER_KEY, API_KEY)


def lines(buffer: io.StringIO) -> list[dict[str, Any]]:
    parsed = []
    for raw in buffer.getvalue().splitlines():
        assert raw.strip(), "blank log line"
        parsed.append(json.loads(raw))  # every line is exactly one JSON object
    return parsed


async def test_turn_logs_are_json_lines_with_ids_and_no_secrets_or_prompt(authed_suite: Suite) -> None:
    buffer = io.StringIO()
    configure_logging("test", Settings(log_level="debug"), stream=buffer)
    register_secret(FILE_KEY)
    turn_id = await run_turn(authed_suite)
    # The runtime logs "turn ended" just after the turn's last event reached the caller.
    await until(lambda: any(r.get("turn_id") == turn_id and r.get("event") == "turn ended" for r in lines(buffer)))
    emit_sensitive_lines()

    text = buffer.getvalue()
    for secret in (API_KEY, PROVIDER_KEY, FILE_KEY, MARKER):
        assert secret not in text, f"{secret[:12]}... leaked into the logs"
    records = lines(buffer)
    turn_lines = [r for r in records if r.get("turn_id") == turn_id]
    by_service = {r["service"] for r in turn_lines}
    # The policy decides in the runtime from its snapshot: its decision lines are the runtime's now.
    assert {"gateway", "runtime", "sessions"} <= by_service, by_service
    assert any(r.get("event") == "policy_decision" for r in turn_lines if r["service"] == "runtime"), by_service
    assert len({r["trace_id"] for r in turn_lines}) == 1, "one trace per turn"
    for record in turn_lines:
        for key in ("trace_id", "span_id", "service", "session_id", "turn_id", "timestamp", "level", "event"):
            assert record.get(key), f"{key} missing in {record}"
        assert len(record["trace_id"]) == 32 and len(record["span_id"]) == 16
        if record["service"] != "gateway":  # internal requests name their tenant
            assert record["tenant"] == "acme", record
    ended = [r for r in turn_lines if r["event"] == "turn ended"]
    assert ended and ended[0]["service"] == "runtime" and ended[0]["tenant"] == "acme"

    careless = next(r for r in records if r["event"] == "calling provider")
    assert careless["api_key"] == "[redacted]"
    assert careless["headers"] == [["authorization", "[redacted]"], ["x-request-id", "r1"]]
    assert careless["content"].startswith("[hidden: ")
    assert "[redacted]" in careless["note"]
    stdlib = next(r for r in records if r["event"].startswith("retrying with key"))
    assert stdlib["level"] == "warning" and stdlib["service"] == "test"


async def test_the_debug_flag_shows_prompt_text_but_never_secrets(authed_suite: Suite) -> None:
    buffer = io.StringIO()
    configure_logging("test", Settings(log_level="debug", log_sensitive=True), stream=buffer)
    await run_turn(authed_suite)
    emit_sensitive_lines()
    text = buffer.getvalue()
    for secret in (API_KEY, PROVIDER_KEY, FILE_KEY):
        assert secret not in text
    careless = next(r for r in lines(buffer) if r["event"] == "calling provider")
    assert careless["content"] == PROMPT


async def test_redactor_keeps_ordinary_fields() -> None:
    redact = Redactor(log_sensitive=False, secrets=["short", "a-long-enough-secret"])
    event = redact(
        None,
        "info",
        {
            "event": "usage with a-long-enough-secret",
            "input_tokens": 12,
            "max_tokens": 100,
            "model": "gpt-4o",
            "lease_token": 7,
            "nested": {"password": "hunter22", "ok": "short"},
            "url": "rediss://default:s3cr3t-pw@redis.internal:6380/0",
        },
    )
    assert event == {
        "event": "usage with [redacted]",
        "input_tokens": 12,
        "max_tokens": 100,
        "model": "gpt-4o",
        "lease_token": 7,
        "nested": {"password": "[redacted]", "ok": "short"},  # too short to be treated as a secret
        "url": "rediss://default:[redacted]@redis.internal:6380/0",
    }
