"""Large payloads through the suite's processes (issue 31): tool results and a reply of megabytes.

Before the fix a 1.1 MB tool result had its turn taken over until it gave up and a 1.5 MB
one locked the session; a 1.2 MB reply was taken over until it gave up. Now a result over
the agent's limit is archived (the model gets a `SUMMARIZED executionId:'...'` marker with
its head) and a final event over 512 KiB leaves its text out (the deltas carry it).

Tool turns run on the shared cluster (`suite`): the `slow` agent's MCP tool `blob` returns
any number of bytes. The long reply needs an OpenAI-compatible model, so it runs on a
cluster of this module whose `talker` agent streams from a FakeOpenAI in this process.
Every wait is on a condition, bounded by BOUND_S with a message saying what did not come.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import pytest
import pytest_asyncio

from cogmesh.common.v1 import messages_pb2
from cogmesh.gateway.v1 import gateway_pb2
from cogmesh.sessions.v1 import sessions_pb2, sessions_pb2_grpc
from tests.fakes.providers import FakeOpenAI, Reply
from tests.reliability.cluster import Cluster
from tests.reliability.conftest import Suite, slow_agent_env
from tests.reliability.helpers import (
    TENANT,
    Event,
    Outcome,
    calc_request,
    finish,
    gateway,
    kind,
    new_session,
    sessions,
)
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.asyncio(loop_scope="module")  # the fake model serves from the module's loop
BOUND_S = 90.0  # every wait: a generous upper bound for a loaded 2-core machine, takeovers included
BLOB = "mcp__slow__blob"
MARKER = re.compile(r"SUMMARIZED executionId:'([^']+)' \(the mcp__slow__blob result has ([\d,]+) characters")
INTERNAL = [("grpc.max_receive_message_length", 64 << 20)]  # a stored 5 MB message, as the services read it
TALKER = "name: talker\nsystem_prompt: You talk.\nmodel: gpt-4o\n"
CALL = ("tool_call_started", "tool_call_finished")
DELTA = "abcdefghijklmnopqrstuvwxyz0123456789 " * 55 + "\n"  # 2,036 bytes, as a chatty model streams


def blob_request(session_id: str, size: int, seconds: float = 0) -> gateway_pb2.SendMessageRequest:
    arguments = f'{{"size": {size}, "seconds": {seconds}}}'
    return gateway_pb2.SendMessageRequest(session_id=session_id, content=f"@{BLOB} {arguments}")


async def stream(cluster: Cluster, request: gateway_pb2.SendMessageRequest) -> Outcome:
    """A caller's whole turn, on a channel with a client's defaults (4 MiB a response)."""
    async with gateway(cluster) as stub:
        started = time.monotonic()
        return await finish(stub.SendMessage(request, timeout=BOUND_S), [], started)


def ended(outcome: Outcome) -> Event:
    """The turn's final event; fails naming how the turn ended otherwise."""
    tail = [kind(e) for e in outcome.events[-4:]]
    assert outcome.code is None, f"the caller's stream failed with {outcome.code}: {outcome.details} (after {tail})"
    end = outcome.end
    assert end is not None and kind(end) == "final", f"the turn ended with {end or tail}"
    return end


def replays(events: list[Event]) -> list[str]:
    """What says a step ran twice: a step_retried notice, a `taken over` status."""
    notices = [f"notice {e.native_notice.kind}" for e in events if kind(e) == "native_notice"]
    statuses = [f"status {e.status.text}" for e in events if kind(e) == "status" and e.status.text == "taken over"]
    return [n for n in notices if n == "notice step_retried"] + statuses


def assert_contiguous(events: list[Event]) -> None:
    seqs = [e.seq for e in events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "gap or duplicate in the caller's seqs"


async def stored(cluster: Cluster, session_id: str) -> list[messages_pb2.Message]:
    """The session's messages from the sessions service, page by page (a page holds at most 3 MiB)."""
    found: list[messages_pb2.Message] = []
    token = ""
    async with grpc.aio.insecure_channel(cluster.addresses["sessions"], options=INTERNAL) as channel:
        stub = sessions_pb2_grpc.SessionsServiceStub(channel)  # type: ignore[no-untyped-call]
        while True:
            request = sessions_pb2.ListMessagesRequest(tenant_id=TENANT, session_id=session_id, page_token=token)
            reply = await stub.ListMessages(request, timeout=BOUND_S)
            found += reply.messages
            token = reply.next_page_token
            if not token:
                return found


def assert_marker(message: messages_pb2.Message, size: int) -> None:
    """The stored tool message is the archive's marker with the result's head, not the result."""
    match = MARKER.match(message.content)
    assert match, f"the stored tool message is not the archived marker: {message.content[:200]!r}"
    assert int(match[2].replace(",", "")) == size
    assert "line 000000000\nline 000000001\n" in message.content, "the marker shows the result's head"
    assert len(message.content) < 10_000, f"the marker holds {len(message.content):,} characters"


async def next_message_works(cluster: Cluster, session_id: str) -> None:
    again = await stream(cluster, calc_request(session_id))
    assert ended(again).final.text == "6 * 7 = 42."


# --------------------------------------------------------------------------- tool results of megabytes


@pytest.mark.parametrize("size", [1_500_000, 5_000_000])
async def test_a_large_tool_result_ends_its_turn_at_once_and_the_session_takes_the_next_message(
    healthy: Suite, size: int
) -> None:
    cluster = healthy.cluster
    session_id = await new_session(cluster)
    outcome = await stream(cluster, blob_request(session_id, size))
    end = ended(outcome)
    assert replays(outcome.events) == [], "a step of the turn ran twice"
    assert end.final.metrics.model_calls == 2, "one model call a step: the tool call, then the answer"
    assert_contiguous(outcome.events)
    messages = await stored(cluster, session_id)
    roles = [m.role for m in messages]
    assert roles == [
        messages_pb2.ROLE_USER,
        messages_pb2.ROLE_ASSISTANT,
        messages_pb2.ROLE_TOOL,
        messages_pb2.ROLE_ASSISTANT,
    ], roles
    assert_marker(messages[2], size)
    await next_message_works(cluster, session_id)


async def decided(cluster: Cluster, session_id: str, turn_id: str) -> None:
    """Until the turn's journal holds its "decide" record: its tool call starts only after it is stored
    (tool_call_started can reach a caller a moment before it)."""
    request = sessions_pb2.GetJournalRequest(tenant_id=TENANT, session_id=session_id, turn_id=turn_id)
    async with sessions(cluster) as stub, asyncio.timeout(BOUND_S):
        while not any(e.kind == "decide" for e in (await stub.GetJournal(request, timeout=BOUND_S)).entries):  # noqa: ASYNC110 - another process's state
            await asyncio.sleep(0.05)


async def test_a_runtime_killed_during_a_5mb_tool_call_has_its_turn_taken_over_to_the_end(healthy: Suite) -> None:
    """kill -9 of the runtime while the tool runs: the restarted runtime takes the turn over once its
    lease lapses, runs the call again from the recorded step (the result was not recorded), archives
    it and ends the turn; the session is free. The MCP tool counts no executions, so "once" is
    what the caller saw (one finished call, after the takeover) and what is stored (one result)."""
    cluster = healthy.cluster
    session_id = await new_session(cluster)
    async with gateway(cluster) as stub:
        started = time.monotonic()
        # The tool waits 3 s first, so the kill lands in the call however slowly its start reaches us.
        call = stub.SendMessage(blob_request(session_id, 5_000_000, seconds=3), timeout=BOUND_S)
        events: list[Event] = []
        while not any(kind(e) == "tool_call_started" for e in events):
            response = await asyncio.wait_for(call.read(), BOUND_S)
            assert response is not grpc.aio.EOF, f"the stream ended before the tool call: {[kind(e) for e in events]}"
            events += response.events
        await decided(cluster, session_id, events[0].turn_id)  # the tool runs: the kill lands in the call
        cluster.kill("runtime")
        restarting = asyncio.create_task(asyncio.to_thread(cluster.start, "runtime"))
        outcome = await asyncio.wait_for(finish(call, events, started), BOUND_S + 5)
        await restarting
    ended(outcome)
    assert "status taken over" in replays(outcome.events), "the turn was not taken over"
    order = [e.status.text or kind(e) for e in outcome.events if kind(e) in CALL or e.status.text == "taken over"]
    assert order == ["tool_call_started", "taken over", "tool_call_finished"], (
        f"{order}: the kill was to land in the tool call (3 s), the call to finish once, after the takeover"
    )
    assert all(e.tool_call_finished.ok for e in outcome.events if kind(e) == "tool_call_finished")
    assert_contiguous(outcome.events)
    messages = await stored(cluster, session_id)
    assert [m.role for m in messages].count(messages_pb2.ROLE_TOOL) == 1, "the tool's result stored once"
    assert len(messages) == 4
    assert_marker(messages[2], 5_000_000)
    await next_message_works(cluster, session_id)  # the lease went with the turn's end


# --------------------------------------------------------------------------- a reply of megabytes


@dataclass
class Talking:
    cluster: Cluster
    openai: FakeOpenAI


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def talking(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Talking]:
    """A cluster of this module whose `talker` agent streams from a fake OpenAI server in this process."""
    tmp = tmp_path_factory.mktemp("large-payloads")
    async with contextlib.AsyncExitStack() as stack:
        openai = FakeOpenAI()
        await stack.enter_async_context(openai)
        redis = RedisServer(directory=tmp).start()
        stack.callback(redis.close)
        (tmp / "key").write_text("sk-large\n")
        (tmp / "providers.yaml").write_text(
            f"providers:\n  openai: {{base_url: '{openai.url}/v1', api_key_file: '{tmp / 'key'}'}}\n"
        )
        env = slow_agent_env(tmp, redis, "cogmesh-large:", providers_file=str(tmp / "providers.yaml"))
        (tmp / "agents" / "talker.yaml").write_text(TALKER)
        cluster = Cluster(env, tmp)
        stack.callback(cluster.stop)
        await asyncio.to_thread(cluster.start_all)
        yield Talking(cluster, openai)


async def test_a_5mb_streamed_reply_arrives_whole_and_once_and_is_stored(talking: Talking) -> None:
    cluster, openai = talking.cluster, talking.openai
    count = 5_000_000 // len(DELTA)
    openai.then(Reply(text=[DELTA] * count, usage=(100, count * 500)))
    requests = len(openai.model_requests)
    session_id = await new_session(cluster, agent="talker")
    outcome = await stream(cluster, gateway_pb2.SendMessageRequest(session_id=session_id, content="Tell me all."))
    end = ended(outcome)
    assert len(openai.model_requests) == requests + 1 and end.final.metrics.model_calls == 1, "one model call"
    assert replays(outcome.events) == [], "the step ran twice"
    assert_contiguous(outcome.events)
    text = "".join(e.assistant_delta.text for e in outcome.events if kind(e) == "assistant_delta")
    assert text == DELTA * count, f"the deltas carry {len(text):,} characters, not the reply's {len(DELTA) * count:,}"
    assert end.final.text_omitted and not end.final.text, "a final event over 512 KiB leaves its text out"
    messages = await stored(cluster, session_id)
    assert [m.role for m in messages] == [messages_pb2.ROLE_USER, messages_pb2.ROLE_ASSISTANT]
    assert messages[1].content == DELTA * count, "the stored reply is the whole reply"
    openai.then(Reply(text=["short"]))
    after = await stream(cluster, gateway_pb2.SendMessageRequest(session_id=session_id, content="And briefly?"))
    assert ended(after).final.text == "short"
