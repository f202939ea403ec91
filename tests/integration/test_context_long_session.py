"""A session run far past its context budget keeps answering.

The test drives turns the way the runtime does with compaction: before each
model call it sends the live transcript to CompactHistory (which summarizes
with the agent's model — the built-in local model here — archives heavy tool
results and stores the rolling summary in the sessions service), builds the
system prompt with the summary, calls the model, runs the calculator tool,
and appends the turn's messages to the sessions service under the turn lease.
Real servers throughout: models, sessions and context on port 0.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from cogmesh.common.v1 import messages_pb2
from cogmesh.context.v1 import context_pb2
from cogmesh.sessions.v1 import sessions_pb2
from services.kit.protos import dict_to_struct, struct_to_dict
from services.lib.llm import ChatMessage, TextDelta, ToolCallChunk, ToolCallRequest
from services.lib.tokens import TiktokenCounter
from services.runtime.calculator import CALCULATOR_SCHEMA, evaluate, format_number
from services.runtime.local_model import LocalModel
from tests.integration.conftest import SUITE_SETTINGS
from tests.integration.test_context_service import context_with_dependencies

pytestmark = pytest.mark.asyncio(loop_scope="module")

TENANT = SUITE_SETTINGS.tenant_id
TURNS = 150
# A budget a few turns fill: every calculator result carries a heavy payload.
LIMITS = context_pb2.CompactionLimits(max_tokens=1500, context_token_limit=800, summary_token_limit=200)
HEAVY = " (intermediate steps: " + "carry the digits, " * 60 + ")"
_ROLE = {"user": messages_pb2.ROLE_USER, "assistant": messages_pb2.ROLE_ASSISTANT, "tool": messages_pb2.ROLE_TOOL}
_NAME = {v: k for k, v in _ROLE.items()}
COUNTER = TiktokenCounter()


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def stubs() -> AsyncIterator[dict[str, Any]]:
    async with context_with_dependencies(SUITE_SETTINGS) as found:
        yield found


def to_proto(message: ChatMessage, turn_id: str) -> messages_pb2.Message:
    return messages_pb2.Message(
        role=_ROLE[message.role],
        content=message.content,
        tool_calls=[
            messages_pb2.ToolCall(id=c.id, name=c.name, arguments=dict_to_struct(c.arguments))
            for c in message.tool_calls
        ],
        tool_call_id=message.tool_call_id,
        name=message.name,
        turn_id=turn_id,
    )


def from_proto(message: messages_pb2.Message) -> ChatMessage:
    return ChatMessage(
        _NAME[message.role],  # type: ignore[arg-type]
        message.content,
        tuple(ToolCallRequest(c.id, c.name, struct_to_dict(c.arguments)) for c in message.tool_calls),
        message.tool_call_id,
        message.name,
    )


async def model_turn(
    model: LocalModel, system: str, live: list[messages_pb2.Message], turn_id: str
) -> list[ChatMessage]:
    """The agent loop of one turn: model -> calculator -> model, until a text answer."""
    new: list[ChatMessage] = []
    for _ in range(4):
        conversation = [ChatMessage("system", system), *(from_proto(m) for m in live), *new]
        text, calls = "", []
        async for chunk in model.stream(conversation, [CALCULATOR_SCHEMA]):
            if isinstance(chunk, TextDelta):
                text += chunk.text
            elif isinstance(chunk, ToolCallChunk):
                calls.append(chunk.call)
        new.append(ChatMessage("assistant", text, tuple(calls)))
        if not calls:
            return new
        for call in calls:
            result = format_number(evaluate(str(call.arguments["expression"]))) + HEAVY
            new.append(ChatMessage("tool", result, tool_call_id=call.id, name=call.name))
    raise AssertionError(f"turn {turn_id} did not finish")


async def test_session_far_past_its_budget_keeps_answering(stubs: dict[str, Any]) -> None:
    sessions, context = stubs["sessions"], stubs["context"]
    created = await sessions.CreateSession(
        sessions_pb2.CreateSessionRequest(tenant_id=TENANT, agent="default", user_id="long", topic_id="long-session")
    )
    session_id = created.session.session_id
    model = LocalModel()
    live: list[messages_pb2.Message] = []
    summary, covered = "", 0
    stored_total = compactions = all_tokens = 0
    first_archived: context_pb2.ArchivedToolResult | None = None
    durations: list[float] = []
    sent_tokens: list[int] = []

    for i in range(TURNS):
        started = time.perf_counter()
        turn_id = f"turn-{i}"
        lease = await sessions.AcquireTurnLease(
            sessions_pb2.AcquireTurnLeaseRequest(tenant_id=TENANT, session_id=session_id, turn_id=turn_id)
        )
        question = f"What is {i} * 17?" if i % 3 else f"Tell me about topic number {i}, in a few words."
        user = messages_pb2.Message(role=messages_pb2.ROLE_USER, content=question, turn_id=turn_id)

        compacted = await context.CompactHistory(
            context_pb2.CompactHistoryRequest(
                tenant_id=TENANT,
                session_id=session_id,
                agent="default",
                messages=[*live, user],
                summary=summary,
                limits=LIMITS,
                store_summary=True,
                covered_message_count=covered,
                lease_token=lease.lease_token,
            )
        )
        live = list(compacted.messages)
        if compacted.compacted:
            compactions += 1
            summary, covered = compacted.summary, compacted.covered_message_count
            assert compacted.summary_stored
            assert compacted.event.summary_tokens <= LIMITS.summary_token_limit
            if first_archived is None and compacted.archived:
                first_archived = compacted.archived[0]

        built = await context.BuildContext(context_pb2.BuildContextRequest(agent="default", summary=summary))
        sent_tokens.append(sum(COUNTER.count(m.content) for m in live) + COUNTER.count(summary))
        new = await model_turn(model, built.system_prompt, live, turn_id)

        answer = new[-1].content
        assert answer, f"turn {i} has no answer"
        if i % 3:
            assert answer.startswith(f"{i} * 17 = {i * 17} "), answer[:80]
        else:
            assert f"topic number {i}" in answer
        appended = [user, *(to_proto(m, turn_id) for m in new)]
        await sessions.AppendMessages(
            sessions_pb2.AppendMessagesRequest(
                tenant_id=TENANT, session_id=session_id, lease_token=lease.lease_token, messages=appended
            )
        )
        await sessions.ReleaseTurnLease(
            sessions_pb2.ReleaseTurnLeaseRequest(tenant_id=TENANT, session_id=session_id, lease_token=lease.lease_token)
        )
        live += appended[1:]
        stored_total += len(appended)
        all_tokens += sum(COUNTER.count(m.content) for m in appended)
        durations.append(time.perf_counter() - started)

    # Far past the budget: uncompacted, the transcript would be many times max_tokens.
    assert stored_total == sum(2 if i % 3 == 0 else 4 for i in range(TURNS))  # calculator turns have 4 messages
    assert all_tokens > 30 * LIMITS.max_tokens
    assert compactions >= 10
    # What reached the model never grew past the trigger (plus the one turn added since the last check).
    assert max(sent_tokens) <= LIMITS.max_tokens + 400
    # No stall: late turns are as fast as early ones (generous bound for a shared machine).
    early, late = sorted(durations[:30])[15], sorted(durations[-30:])[15]
    assert late < max(5 * early, 0.05), (early, late)

    # The rolling summary is in the sessions service and covers what was folded away.
    payload = await sessions.GetRehydrationPayload(
        sessions_pb2.GetRehydrationPayloadRequest(tenant_id=TENANT, session_id=session_id)
    )
    assert payload.summary.text == summary
    assert payload.summary.covered_message_count == covered > 0
    # An early heavy tool result is still retrievable after all that compaction.
    assert first_archived is not None
    got = await context.GetToolResponse(
        context_pb2.GetToolResponseRequest(
            tenant_id=TENANT, session_id=session_id, execution_id=first_archived.execution_id
        )
    )
    assert got.content.endswith(HEAVY) and got.tool_name == "calculator"
