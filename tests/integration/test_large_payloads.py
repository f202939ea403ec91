"""Large payloads through a whole turn: a tool result of megabytes, a reply of megabytes.

Issue 31: a 1.1 MB tool result had the turn taken over until it gave up, a 1.5 MB one
locked the session for good. A result over the agent's limit is archived and the model
gets its head behind a marker it can page through with get_tool_response; the session
is free for the next message whatever the size.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio

from cogmesh.common.v1 import events_pb2, messages_pb2
from cogmesh.sessions.v1 import sessions_pb2
from services.lib.agents import DEFAULT_AGENTS_DIR
from services.suite.inprocess import Suite, start_suite
from tests.fakes.providers import FakeOpenAI, Reply
from tests.integration.conftest import STUB_CLASSES, SUITE_SETTINGS, TIMEOUT_S, new_session, send
from tests.support.redis_server import delete_prefix, unique_prefix

pytestmark = pytest.mark.asyncio(loop_scope="module")
ROOT = Path(__file__).resolve().parents[2]
BLOB_AGENT = """
name: blob
prompts_dir: default
model: local
tools: [mcp__py__blob]
default_role: assistant
"""
GPT_AGENT = "name: talker\nsystem_prompt: You talk.\nmodel: gpt-4o\n"
SMALL_AGENT = """
name: small
prompts_dir: default
model: local
tools: [mcp__py__blob]
default_role: assistant
config: {tool_token_limit_before_evict: 1000}
"""


@dataclass
class Env:
    suite: Suite
    stubs: dict[str, Any]
    openai: FakeOpenAI

    @property
    def gateway(self) -> Any:
        return self.stubs["gateway"]


@pytest_asyncio.fixture(loop_scope="module", scope="module", params=["memory", "redis"])
async def env(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    stack = contextlib.AsyncExitStack()
    tmp = tmp_path_factory.mktemp("large")
    agents = tmp / "agents"
    shutil.copytree(DEFAULT_AGENTS_DIR, agents)
    (agents / "blob.yaml").write_text(BLOB_AGENT)
    (agents / "small.yaml").write_text(SMALL_AGENT)
    (agents / "talker.yaml").write_text(GPT_AGENT)
    (tmp / "tools.yaml").write_text(
        f"servers:\n  py:\n    transport: stdio\n    command: {sys.executable}\n"
        f"    args: [-m, tests.fakes.mcp_server, stdio]\n    cwd: {ROOT}\n"
    )
    openai = await stack.enter_async_context(FakeOpenAI())
    (tmp / "key").write_text("sk-large\n")
    (tmp / "providers.yaml").write_text(f"providers:\n  openai: {{base_url: '{openai.url}/v1', api_key_file: key}}\n")
    settings = SUITE_SETTINGS.model_copy(
        update={
            "agents_dir": agents,
            "tool_servers_file": tmp / "tools.yaml",
            "providers_file": tmp / "providers.yaml",
            "call_timeout_s": 10,
        }
    )
    prefix = ""
    if request.param == "redis":
        prefix = unique_prefix("large")
        settings = settings.model_copy(
            update={"redis_url": request.getfixturevalue("redis_url"), "redis_key_prefix": prefix}
        )
    suite = await start_suite(settings)
    options = [("grpc.max_receive_message_length", settings.max_message_bytes)]  # as the suite's own callers
    channels = {n: grpc.aio.insecure_channel(s.address, options=options) for n, s in suite.servers.items()}
    try:
        yield Env(suite, {name: STUB_CLASSES[name](channel) for name, channel in channels.items()}, openai)
    finally:
        for channel in channels.values():
            await channel.close()
        await suite.stop(0)
        await stack.aclose()
        if prefix:
            delete_prefix(settings.redis_url, prefix)


def of(events: list[events_pb2.RuntimeEvent], kind: str) -> list[Any]:
    return [getattr(e, kind) for e in events if e.WhichOneof("payload") == kind]


def tool_message(events: list[events_pb2.RuntimeEvent]) -> str:
    final = of(events, "final")[0]
    return next(m.content for m in final.new_messages if m.role == messages_pb2.ROLE_TOOL)


@pytest.mark.parametrize("size", [1_100_000, 1_500_000, 5_000_000])
async def test_a_large_tool_result_is_archived_and_the_session_stays_free(env: Env, size: int) -> None:
    session = await new_session(env.gateway, agent="blob")
    events = await send(env.gateway, session, f'@mcp__py__blob {{"size": {size}}}')
    assert events[-1].WhichOneof("payload") == "final", f"the turn ended with {events[-1]}"
    assert [f.ok for f in of(events, "tool_call_finished")] == [True]
    marker = tool_message(events)
    match = re.match(r"SUMMARIZED executionId:'([^']+)' \(the mcp__py__blob result has ([\d,]+) characters", marker)
    assert match, f"the model got {marker[:300]!r}"
    assert int(match[2].replace(",", "")) == size
    assert "line 000000000\nline 000000001\n" in marker, "the marker shows the result's head"
    assert len(marker) < 4 * SUITE_SETTINGS.tool_result_limit_tokens

    # The next turn pages through the archive from the middle, with get_tool_response.
    offset = 15 * 50_000
    paged = await send(env.gateway, session, f'@get_tool_response {{"execution_id": "{match[1]}", "offset": {offset}}}')
    assert paged[-1].WhichOneof("payload") == "final", f"the turn ended with {paged[-1]}"
    page = tool_message(paged)
    assert page.startswith("line 000050000\nline 000050001\n")
    assert f"of {size:,}; the next page starts at offset" in page
    assert len(page) <= 4 * SUITE_SETTINGS.tool_result_limit_tokens


async def test_the_last_page_says_it_is_the_end_and_a_bad_offset_is_a_tool_error(env: Env) -> None:
    session = await new_session(env.gateway, agent="blob")
    events = await send(env.gateway, session, '@mcp__py__blob {"size": 150000}')
    execution_id = re.findall(r"executionId:'([^']+)'", tool_message(events))[0]
    last = await send(
        env.gateway, session, f'@get_tool_response {{"execution_id": "{execution_id}", "offset": 149000}}'
    )
    assert tool_message(last).endswith("[characters 149,000-150,000 of 150,000; the end]")
    bad = await send(env.gateway, session, f'@get_tool_response {{"execution_id": "{execution_id}", "offset": 150001}}')
    finished = of(bad, "tool_call_finished")
    assert [f.ok for f in finished] == [False]
    assert "offset" in finished[0].result_summary and "150000" in finished[0].result_summary


async def test_an_agent_sets_its_own_limit(env: Env) -> None:
    session = await new_session(env.gateway, agent="small")
    events = await send(env.gateway, session, '@mcp__py__blob {"size": 5000}')
    marker = tool_message(events)
    assert marker.startswith("SUMMARIZED executionId:"), "5,000 characters are over 1,000 tokens (4,000 characters)"
    execution_id = re.findall(r"executionId:'([^']+)'", marker)[0]
    paged = await send(env.gateway, session, f'@get_tool_response {{"execution_id": "{execution_id}"}}')
    page = tool_message(paged)  # a page of the archive fits the agent's limit: it is not archived again
    assert page.startswith("line 000000000\n") and page.endswith("the next page starts at offset 3800]")
    assert len(page) <= 4000


async def read_messages(env: Env, session: str) -> list[Any]:
    """The session's stored messages, from the sessions service (the gateway has no message listing)."""
    messages: list[Any] = []
    token = ""
    while True:  # a page holds at most 3 MiB (and at least one message)
        request = sessions_pb2.ListMessagesRequest(tenant_id="default", session_id=session, page_token=token)
        reply = await env.stubs["sessions"].ListMessages(request, timeout=TIMEOUT_S)
        messages += reply.messages
        token = reply.next_page_token
        if not token:
            return messages


@pytest.mark.parametrize("size", [1_200_000, 5_000_000])
async def test_a_long_streamed_reply_completes_and_is_stored(env: Env, size: int) -> None:
    delta = "abcdefghijklmnopqrstuvwxyz0123456789 " * 55 + "\n"  # 2,036 bytes, as a chatty model streams
    count = size // len(delta)
    env.openai.then(Reply(text=[delta] * count, usage=(100, count * 500)))
    session = await new_session(env.gateway, agent="talker")
    events = await send(env.gateway, session, "Tell me everything.")
    assert events[-1].WhichOneof("payload") == "final", f"the turn ended with {events[-1]}"
    text = "".join(e.assistant_delta.text for e in events if e.WhichOneof("payload") == "assistant_delta")
    assert text == delta * count, "the deltas carry the whole reply, in order, once"
    assert "native_notice" not in [e.WhichOneof("payload") for e in events], "no step was retried"
    final = events[-1].final
    assert final.text_omitted and final.messages_omitted and not final.text and not final.new_messages
    assert events[-1].ByteSize() < 1 << 20
    stored = await read_messages(env, session)
    assert [m.role for m in stored] == [messages_pb2.ROLE_USER, messages_pb2.ROLE_ASSISTANT]
    assert stored[1].content == delta * count
    env.openai.then(Reply(text=["short"]))
    after = await send(env.gateway, session, "And now briefly?")
    assert after[-1].WhichOneof("payload") == "final" and after[-1].final.text == "short"
