"""Compaction lifecycle, summarizers and the tool-result archive (domain code, no gRPC)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence

import pytest

from services.context.archive import MARKER_PREFIX, MemoryToolArchive, is_marker
from services.context.compaction import (
    CompactionLimits,
    Compactor,
    Message,
    ToolCallRef,
    render,
)
from services.context.summarizer import (
    ExtractiveSummarizer,
    ModelSummarizer,
    SummarizerError,
    summarizer_for,
)
from services.lib.llm import ChatMessage, ModelChunk, ModelError, ToolSchema
from services.lib.tokens import TiktokenCounter
from services.runtime.local_model import LocalModel
from tests.support.redis_topologies import RedisUnderTest

COUNTER = TiktokenCounter()


def exchange(i: int, result_words: int = 120) -> list[Message]:
    """One user question answered through a weather tool call."""
    call = ToolCallRef(f"call_{i}", "weather", json.dumps({"city": f"city{i}"}))
    report = f"Weather report for city{i}: sunny, {i} degrees. " + " ".join(["detail"] * result_words)
    return [
        Message("user", f"Question {i}: what is the weather in city{i}?"),
        Message("assistant", "", (call,)),
        Message("tool", report, tool_call_id=f"call_{i}", name="weather"),
        Message("assistant", f"In city{i} it is sunny and {i} degrees."),
    ]


def transcript(n: int, result_words: int = 120) -> list[Message]:
    return [m for i in range(n) for m in exchange(i, result_words)]


LIMITS = CompactionLimits.derive(32768, max_tokens=2000, context_token_limit=1000, summary_token_limit=250)


@pytest.fixture
def archive() -> MemoryToolArchive:
    return MemoryToolArchive()


@pytest.fixture
def compactor(archive: MemoryToolArchive) -> Compactor:
    return Compactor(COUNTER, archive)


async def compact(compactor: Compactor, messages: Sequence[Message], summary: str = "", **kw: object) -> object:
    return await compactor.compact(
        tenant="t",
        session="s",
        messages=messages,
        summary=summary,
        limits=kw.pop("limits", LIMITS),  # type: ignore[arg-type]
        summarizer=kw.pop("summarizer", ExtractiveSummarizer(COUNTER)),  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )


async def test_within_budget_nothing_changes(compactor: Compactor) -> None:
    messages = transcript(1, result_words=10)
    result = await compact(compactor, messages, "old summary")

    assert result.compacted is False
    assert result.messages == tuple(messages)
    assert result.summary == "old summary"
    assert result.archived == ()
    assert result.tokens_before == result.tokens_after == compactor.transcript_tokens(messages, "old summary")


async def test_over_budget_summarizes_older_part_and_fits_the_target(
    compactor: Compactor, archive: MemoryToolArchive
) -> None:
    messages = transcript(30)
    result = await compact(compactor, messages)

    assert result.compacted is True
    assert result.tokens_before > LIMITS.max_tokens
    assert result.tokens_after <= LIMITS.context_token_limit
    assert 0 < result.summary_tokens <= LIMITS.summary_token_limit
    assert result.summarized_messages + len(result.messages) == len(messages)
    # The kept part is the newest messages, in order, starting at a user message.
    assert result.messages[0].role == "user"
    for kept, original in zip(result.messages, messages[result.summarized_messages :], strict=True):
        if is_marker(kept.content):  # an archived result keeps its place and its tool_call_id
            assert (kept.role, kept.tool_call_id, kept.name) == ("tool", original.tool_call_id, original.name)
        else:
            assert kept == original
    assert result.chunks >= 2
    # Every tool result of the older part was archived and can be read back.
    older_results = [m for m in messages[: result.summarized_messages] if m.role == "tool"]
    assert len(result.archived) >= len(older_results)
    for original in older_results:
        entry = next(a for a in result.archived if a.tool_call_id == original.tool_call_id)
        stored = await archive.get("t", "s", entry.execution_id)
        assert stored is not None and stored.content == original.content and stored.tool_name == "weather"
        assert entry.marker.startswith(f"{MARKER_PREFIX}'{entry.execution_id}'")
        assert entry.tokens == COUNTER.count(original.content)
    # The summary names archived results so the model can ask for them.
    assert "executionId:'call_" in result.summary
    # The opening question survives in the summary.
    assert "Question 0" in result.summary


async def test_tool_call_groups_are_never_split(compactor: Compactor) -> None:
    for n in range(2, 12):
        result = await compact(compactor, transcript(n), force=True)
        kept = result.messages
        if kept:
            assert kept[0].role != "tool"
        calls = {c.id for m in kept for c in m.tool_calls}
        answers = {m.tool_call_id for m in kept if m.role == "tool"}
        assert answers <= calls, n  # no tool result without its call
        assert calls <= answers, n  # no call without its result


async def test_current_exchange_is_kept_and_its_big_results_become_markers(
    compactor: Compactor, archive: MemoryToolArchive
) -> None:
    messages = [*transcript(3, result_words=10), *exchange(99, result_words=3000)]
    result = await compact(compactor, messages)

    assert result.compacted
    assert [m.role for m in result.messages] == ["user", "assistant", "tool", "assistant"]
    assert result.messages[0].content.startswith("Question 99")
    tool = result.messages[2]
    assert is_marker(tool.content) and tool.tool_call_id == "call_99"
    stored = await archive.get("t", "s", "call_99")
    assert stored is not None and stored.content == messages[-2].content
    assert result.tokens_after <= LIMITS.context_token_limit


async def test_rolling_summary_is_merged_not_replaced(compactor: Compactor) -> None:
    first = await compact(compactor, transcript(20))
    second = await compact(compactor, [*first.messages, *transcript(40)[80:]], first.summary)

    assert second.compacted
    assert "Question 0" in second.summary  # from the first summary
    assert second.summary_tokens <= LIMITS.summary_token_limit


async def test_markers_already_in_the_transcript_are_not_archived_again(compactor: Compactor) -> None:
    big_current = [*transcript(3, result_words=10), *exchange(99, result_words=3000)]
    first = await compact(compactor, big_current)
    assert [a.execution_id for a in first.archived if a.tool_call_id == "call_99"] == ["call_99"]

    again = await compact(compactor, [*first.messages, *exchange(100, result_words=3000)], first.summary)

    # call_99's marker was folded into the summary as is; only call_100 is new in the archive.
    assert [a.tool_call_id for a in again.archived] == ["call_100"]
    assert "executionId:'call_99'" in again.summary


async def test_archive_reuses_ids_for_the_same_result_and_suffixes_collisions() -> None:
    archive = MemoryToolArchive()
    assert await archive.put("t", "s", "call_1", "calc", "call_1", "391") == "call_1"
    assert await archive.put("t", "s", "call_1", "calc", "call_1", "391") == "call_1"  # retried compaction
    assert await archive.put("t", "s", "call_1", "calc", "call_1", "42") == "call_1.2"  # id reused in a later turn
    assert await archive.put("t", "other", "call_1", "calc", "call_1", "42") == "call_1"  # per session
    assert (await archive.get("t", "s", "call_1.2")).content == "42"  # type: ignore[union-attr]
    assert await archive.get("t", "s", "nope") is None
    assert await archive.get("other-tenant", "s", "call_1") is None


async def test_memory_archive_is_bounded_by_sessions() -> None:
    archive = MemoryToolArchive(max_sessions=2)
    for session in ("a", "b", "c"):
        await archive.put("t", session, "x", "tool", "x", session)
    assert await archive.get("t", "a", "x") is None
    assert (await archive.get("t", "c", "x")).content == "c"  # type: ignore[union-attr]


def test_limits_defaults_follow_the_context_window() -> None:
    limits = CompactionLimits.derive(32768)
    assert limits == CompactionLimits(16384, 8192, 1000, 4000)
    assert CompactionLimits.derive(1000, max_tokens=400) == CompactionLimits(400, 200, 50, 200)
    assert limits.problems() == []


def test_limits_problems_name_the_field() -> None:
    assert CompactionLimits(100, 200, 10, 40).problems() == [
        ("context_token_limit", "must not exceed max_tokens (100)")
    ]
    problems = CompactionLimits(100, 50, 50, 40).problems()
    assert [field for field, _ in problems] == ["summary_token_limit"]


def test_render_names_tool_calls_and_results() -> None:
    call = ToolCallRef("c1", "calculator", '{"expression": "2+2"}')
    assert render(Message("assistant", "", (call,))) == 'assistant calls calculator {"expression":"2+2"}'
    assert render(Message("assistant", "Let me check.", (call,))) == (
        'assistant: Let me check. [calls calculator {"expression":"2+2"}]'
    )
    assert render(Message("tool", "4", tool_call_id="c1", name="calculator")) == "tool calculator: 4"


async def test_extractive_summarizer_fits_and_keeps_first_and_newest_lines() -> None:
    summarizer = ExtractiveSummarizer(COUNTER)
    text = "\n".join(f"user: fact number {i} is that the sky is blue. More words follow here." for i in range(200))

    summary = await summarizer.summarize(text, 100)

    assert COUNTER.count(summary) <= 100
    lines = summary.splitlines()
    assert lines[0].startswith("user: fact number 0 ")
    assert lines[-1].startswith("user: fact number 199 ")
    assert "earlier conversation left out" in summary
    assert "More words" not in summary  # first sentences only
    assert await summarizer.summarize(text, 0) == ""
    assert await summarizer.summarize("short line", 100) == "short line"


async def test_extractive_merge_is_deterministic_and_bounded() -> None:
    summarizer = ExtractiveSummarizer(COUNTER)
    older = "\n".join(f"older fact {i}." for i in range(50))
    newer = "\n".join(f"newer fact {i}." for i in range(50))

    one = await summarizer.merge(older, newer, 60)
    two = await summarizer.merge(older, newer, 60)

    assert one == two and COUNTER.count(one) <= 60
    assert one.startswith("older fact 0.") and one.endswith("newer fact 49.")


async def test_model_summarizer_calls_the_model_and_enforces_the_limit() -> None:
    # The local model echoes what it is given, so the summary is the echo, cut to the limit.
    summarizer = ModelSummarizer(LocalModel(), COUNTER)
    assert summarizer.name == "model:cogmesh-local"

    summary = await summarizer.summarize("user: my name is Ada and I like tea", 200)
    assert "my name is Ada and I like tea" in summary

    short = await summarizer.summarize("user: " + "word " * 500, 20)
    assert COUNTER.count(short) <= 20 and short.endswith("…")


class BrokenModel:
    name = "broken"

    async def stream(self, messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> AsyncIterator[ModelChunk]:
        raise ModelError("provider is down", kind="provider_error", retryable=True)
        yield  # pragma: no cover


async def test_a_failing_summarizing_model_fails_the_compaction(compactor: Compactor) -> None:
    with pytest.raises(SummarizerError, match="provider is down") as caught:
        await compact(compactor, transcript(30), summarizer=ModelSummarizer(BrokenModel(), COUNTER))
    assert caught.value.retryable is True


def test_summarizer_for_picks_by_provider() -> None:
    assert summarizer_for("local", "cogmesh-local", COUNTER).name == "extractive:cogmesh-local"
    fallback = summarizer_for("anthropic", "claude-sonnet-4-20250514", COUNTER)
    assert fallback.name == "extractive:fallback(no anthropic adapter for claude-sonnet-4-20250514)"
    adapted = summarizer_for("openai", "gpt-4o", COUNTER, lambda provider, model_id: LocalModel())
    assert isinstance(adapted, ModelSummarizer)


# --- Redis archive, against the real server -------------------------------------


async def test_redis_archive_shares_results_and_suffixes_collisions(any_redis: RedisUnderTest) -> None:
    import redis.asyncio as redis

    from services.context.archive import ArchiveUnavailable, RedisToolArchive
    from services.kit.redis_pool import pooled_client
    from services.lib.redis_keys import SessionKeys

    client = pooled_client(any_redis.url, 2.0)
    prefix = any_redis.prefix
    try:
        one, two = RedisToolArchive(client, prefix, ttl_s=60), RedisToolArchive(client, prefix, ttl_s=60)
        assert await one.put("t", "s", "call_1", "calc", "call_1", "391") == "call_1"
        assert await two.put("t", "s", "call_1", "calc", "call_1", "391") == "call_1"  # same result, same id
        assert await two.put("t", "s", "call_1", "calc", "call_1", "42") == "call_1.2"
        got = await one.get("t", "s", "call_1.2")
        assert got is not None and (got.content, got.tool_name) == ("42", "calc")
        assert await one.get("t", "s", "missing") is None
        assert 0 < await client.ttl(SessionKeys(prefix, "s").key("archive:t")) <= 60, "in the session's slot"
    finally:
        await client.aclose()

    down = redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.5)
    try:
        with pytest.raises(ArchiveUnavailable, match="Redis"):
            await RedisToolArchive(down).get("t", "s", "x")
    finally:
        await down.aclose()
