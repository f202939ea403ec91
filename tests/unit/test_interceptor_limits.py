"""BudgetGuard, TokenLimiter, ContextCompressor, RateLimiter, ThrottleInterceptor."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import pytest_asyncio
import structlog

from services.kit.redis_pool import Client
from services.lib.policy.domain import Msg, Phase, Scope, ToolCallRef, TurnContext
from services.lib.policy.interceptors import (
    Action,
    BudgetGuard,
    Chain,
    ContextCompressor,
    RateLimiter,
    ThrottleInterceptor,
    TokenLimiter,
)
from services.lib.policy.interceptors.context import SUMMARY_PREFIX, Compaction, split_point
from services.lib.policy.ratelimit import MemoryWindowStore, RedisWindowStore, redis_client
from tests.support.redis_topologies import RedisUnderTest


def ctx(**fields: object) -> TurnContext:
    scope = fields.pop("scope", Scope("default", tenant_id="t", session_id="s"))
    return TurnContext(scope=scope, **fields)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- BudgetGuard


async def test_budget_guard_stops_model_and_tool_calls_at_the_limit() -> None:
    chain = Chain([BudgetGuard(model_calls=3, tool_calls=2)])
    assert (await chain.run(Phase.PRE_THINK, ctx(model_calls=2))).action is Action.OK
    stop = await chain.run(Phase.PRE_THINK, ctx(model_calls=3))
    assert stop.action is Action.STOP and stop.error_kind is None  # exit_behavior "stop": a final answer
    assert "3 of 3 model calls" in stop.reason
    assert (await chain.run(Phase.PRE_ACT, ctx(tool_calls=1, tool_name="x"))).action is Action.OK
    assert (await chain.run(Phase.PRE_ACT, ctx(tool_calls=2, tool_name="x"))).action is Action.STOP


async def test_budget_guard_error_behavior_and_unlimited() -> None:
    stop = await Chain([BudgetGuard(model_calls=1, exit_behavior="error")]).run(Phase.PRE_THINK, ctx(model_calls=1))
    assert stop.error_kind == "budget_exceeded"
    unlimited = Chain([BudgetGuard()])
    assert (await unlimited.run(Phase.PRE_THINK, ctx(model_calls=10_000))).action is Action.OK


async def test_budget_guard_warns_once_at_the_threshold() -> None:
    guard = BudgetGuard(model_calls=10, warning_threshold=0.8)
    chain = Chain([guard])
    state: dict[str, object] = {}
    quiet = ctx(model_calls=6, state=state)
    await chain.run(Phase.PRE_THINK, quiet)
    assert quiet.notices == []
    warned = ctx(model_calls=7, state=state)  # the 8th call is 80 % of 10
    outcome = await chain.run(Phase.PRE_THINK, warned)
    assert outcome.state_changed and "8 of 10" in warned.notices[0].text
    again = ctx(model_calls=8, state=warned.state)
    await chain.run(Phase.PRE_THINK, again)
    assert again.notices == []
    assert guard.remaining(ctx(model_calls=8)) == {"model_calls": 2, "tool_calls": None}


# --------------------------------------------------------------------------- TokenLimiter


async def test_token_limiter_hard_stops_above_the_limit() -> None:
    limiter = TokenLimiter(max_tokens=10, message="Context too large. Please start a new conversation.")
    ok = await Chain([limiter]).run(Phase.PRE_THINK, ctx(system_prompt="x" * 20, messages=[Msg("user", "y" * 20)]))
    assert ok.action is Action.OK  # 5 + 5 tokens at four characters per token
    c = ctx(system_prompt="x" * 20, messages=[Msg("user", "y" * 21)])
    stop = await Chain([limiter]).run(Phase.PRE_THINK, c)
    assert stop.action is Action.STOP and stop.error_kind == "budget_exceeded"
    assert stop.reason == "Context too large. Please start a new conversation."
    assert "11 tokens exceed the limit of 10" in c.notices[0].text


async def test_token_limiter_counts_tool_call_arguments() -> None:
    call = ToolCallRef("c1", "calc", {"expression": "1 + 1" * 20})
    c = ctx(messages=[Msg("assistant", "", (call,))])
    assert (await Chain([TokenLimiter(max_tokens=20)]).run(Phase.PRE_THINK, c)).action is Action.STOP


# --------------------------------------------------------------------------- ContextCompressor


class Summarizer:
    """A Compactor that folds messages into a one-line summary, recording what it got."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], str]] = []

    async def compact(self, scope: Scope, model: str, messages: Sequence[Msg], summary: str) -> Compaction:
        self.calls.append(([m.content for m in messages], summary))
        text = (summary + " | " if summary else "") + " / ".join(m.content[:3] for m in messages)
        return Compaction(text, [], len(messages), 100, 10, 5, 1)


def long_history(n: int) -> list[Msg]:
    return [Msg("user" if i % 2 == 0 else "assistant", f"m{i:02d} " + "x" * 100) for i in range(n)]


async def test_compressor_leaves_small_contexts_alone() -> None:
    summarizer = Summarizer()
    outcome = await Chain([ContextCompressor(summarizer, threshold_tokens=1000)]).run(
        Phase.PRE_THINK, ctx(messages=long_history(4))
    )
    assert outcome.messages is None and summarizer.calls == []


async def test_compressor_summarizes_all_but_the_recent_messages() -> None:
    summarizer = Summarizer()
    c = ctx(messages=long_history(10))
    outcome = await Chain([ContextCompressor(summarizer, threshold_tokens=100, keep_recent=4)]).run(Phase.PRE_THINK, c)
    assert outcome.messages is not None
    assert summarizer.calls[0][0] == [m.content for m in long_history(10)[:6]]
    assert outcome.messages[0].role == "system" and outcome.messages[0].content.startswith(SUMMARY_PREFIX)
    assert [m.content[:3] for m in outcome.messages[1:]] == ["m06", "m07", "m08", "m09"]
    assert c.notices[0].kind == "compacted" and c.notices[0].metadata == {"summary_tokens": 5, "archived_count": 1}

    # The next compression folds the previous summary in instead of summarizing it as a message.
    again = ctx(messages=[*outcome.messages, *long_history(10)[:4]])
    await Chain([ContextCompressor(summarizer, threshold_tokens=100, keep_recent=2)]).run(Phase.PRE_THINK, again)
    contents, previous = summarizer.calls[1]
    assert previous.startswith("m00")
    assert not any(c.startswith(SUMMARY_PREFIX) for c in contents)


def test_split_point_keeps_tool_results_with_their_call() -> None:
    call = ToolCallRef("c1", "calc", {})
    messages = [Msg("user", "q"), Msg("assistant", "", (call,)), Msg("tool", "2", tool_call_id="c1"), Msg("user", "ok")]
    assert split_point(messages, 2) == 1  # the tool result's assistant call stays in the kept tail
    assert split_point(messages, 1) == 3
    assert split_point(messages, 10) == 0


async def test_compressor_failure_continues_the_turn_with_a_notice() -> None:
    class Down:
        async def compact(self, scope: Scope, model: str, messages: Sequence[Msg], summary: str) -> Compaction:
            raise ConnectionError("context service unavailable")

    c = ctx(messages=long_history(10))
    with structlog.testing.capture_logs():
        outcome = await Chain([ContextCompressor(Down(), threshold_tokens=100)]).run(Phase.PRE_THINK, c)
    assert outcome.action is Action.OK and outcome.messages is None
    assert "context service unavailable" in c.notices[0].text


# --------------------------------------------------------------------------- RateLimiter / Throttle


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_sliding_window_reserves_the_next_slot() -> None:
    clock = Clock()
    store = MemoryWindowStore(clock)
    waits = [(await store.reserve("k", 3, 10.0, 100.0)).wait_s for _ in range(7)]
    # Three now, the next three once each of those leaves the window, the seventh a window later.
    assert waits == [0, 0, 0, 10, 10, 10, 20]
    clock.now += 10.0
    assert (await store.reserve("k", 3, 10.0, 100.0)).wait_s == 10  # reservations in the future still count


async def test_sliding_window_never_holds_more_than_the_limit_in_any_window() -> None:
    clock = Clock()
    store = MemoryWindowStore(clock)
    times = []
    for step in [0, 1, 1, 3, 0.5, 7, 2, 0, 0, 11, 0.1]:
        clock.now += step
        r = await store.reserve("k", 3, 5.0, 1000.0)
        times.append(clock.now + r.wait_s)
    times.sort()
    for i, t in enumerate(times):
        assert sum(1 for u in times if t - 5.0 < u <= t) <= 3, (i, times)


async def test_rate_limiter_wait_and_block() -> None:
    clock = Clock()
    store = MemoryWindowStore(clock)
    wait = Chain([RateLimiter(store, calls_per_window=2, window_seconds=60, action="wait")])
    waits = []
    for _ in range(3):
        c = ctx(tool_name="search")
        waits.append((await wait.run(Phase.PRE_ACT, c)).wait_s)
    assert waits == [0, 0, 60]
    assert "waiting 60.00s" in c.notices[0].text

    block = Chain([RateLimiter(store, calls_per_window=1, window_seconds=60, action="block", scope="session")])
    assert (await block.run(Phase.PRE_ACT, ctx(tool_name="x"))).action is Action.OK
    stop = await block.run(Phase.PRE_ACT, ctx(tool_name="x"))
    assert stop.action is Action.STOP and stop.error_kind == "rate_limited"
    assert "limited to 1 per 60s" in stop.reason
    clock.now += 60
    assert (await block.run(Phase.PRE_ACT, ctx(tool_name="x"))).action is Action.OK


async def test_rate_limiter_refuses_waits_longer_than_max_wait() -> None:
    store = MemoryWindowStore(Clock())
    limiter = Chain([RateLimiter(store, calls_per_window=1, window_seconds=60, max_wait_seconds=30)])
    assert (await limiter.run(Phase.PRE_ACT, ctx(tool_name="x"))).action is Action.OK
    assert (await limiter.run(Phase.PRE_ACT, ctx(tool_name="x"))).action is Action.STOP


async def test_rate_limiter_per_tool_and_scopes_keep_separate_windows() -> None:
    store = MemoryWindowStore(Clock())
    per_tool = Chain([RateLimiter(store, calls_per_window=1, window_seconds=60, action="block", per_tool=True)])
    assert (await per_tool.run(Phase.PRE_ACT, ctx(tool_name="a"))).action is Action.OK
    assert (await per_tool.run(Phase.PRE_ACT, ctx(tool_name="b"))).action is Action.OK
    assert (await per_tool.run(Phase.PRE_ACT, ctx(tool_name="a"))).action is Action.STOP

    per_session = Chain([RateLimiter(store, 1, 60, "block", scope="session", max_wait_seconds=0)])
    one, other = Scope("default", "t", "s1"), Scope("default", "t", "s2")
    assert (await per_session.run(Phase.PRE_ACT, ctx(scope=one, tool_name="a"))).action is Action.OK
    assert (await per_session.run(Phase.PRE_ACT, ctx(scope=other, tool_name="a"))).action is Action.OK
    assert (await per_session.run(Phase.PRE_ACT, ctx(scope=one, tool_name="a"))).action is Action.STOP


async def test_a_rate_limit_per_scope_key_counts_each_end_user_across_their_sessions() -> None:
    limit = Chain([RateLimiter(MemoryWindowStore(Clock()), 1, 60, "block", scope="scope:end_user")])

    def of(session: str, tenant: str = "t", **scope: str) -> TurnContext:
        return ctx(scope=Scope("default", tenant, session, session_scope=scope), tool_name="a")

    assert (await limit.run(Phase.PRE_ACT, of("s1", end_user="alice"))).action is Action.OK
    assert (await limit.run(Phase.PRE_ACT, of("s2", end_user="bob"))).action is Action.OK
    assert (await limit.run(Phase.PRE_ACT, of("s3", tenant="other", end_user="alice"))).action is Action.OK
    # Alice's other session shares her window; sessions without the key share their tenant's.
    assert (await limit.run(Phase.PRE_ACT, of("s4", end_user="alice"))).action is Action.STOP
    assert (await limit.run(Phase.PRE_ACT, of("s5"))).action is Action.OK
    assert (await limit.run(Phase.PRE_ACT, of("s6", project="x"))).action is Action.STOP


async def test_throttle_spaces_consecutive_calls() -> None:
    clock = Clock()
    throttle = Chain([ThrottleInterceptor(MemoryWindowStore(clock), min_delay=0.5, per_tool=True)])
    waits = [(await throttle.run(Phase.PRE_ACT, ctx(tool_name="a"))).wait_s for _ in range(3)]
    assert waits == [0, 0.5, 1.0]
    assert (await throttle.run(Phase.PRE_ACT, ctx(tool_name="b"))).wait_s == 0  # per tool
    clock.now += 5
    assert (await throttle.run(Phase.PRE_ACT, ctx(tool_name="a"))).wait_s == 0


@pytest_asyncio.fixture
async def redis(any_redis: RedisUnderTest) -> AsyncIterator[tuple[Client, str]]:
    """A client of each form of Redis (tests/support/redis_topologies.py) and this test's own key prefix."""
    client = redis_client(any_redis.url, 2.0)
    try:
        yield client, any_redis.prefix
    finally:
        await client.aclose()


async def test_redis_window_is_shared_between_replicas(redis: tuple[Client, str], any_redis: RedisUnderTest) -> None:
    redis_client_, prefix = redis
    # Two stores with their own clients stand for two policy replicas.
    other = redis_client(any_redis.url, 2.0)
    try:
        a, b = RedisWindowStore(redis_client_, prefix), RedisWindowStore(other, prefix)
        results = [await store.reserve("k", 3, 60.0, 120.0) for store in (a, b, a, b, a)]
        assert [r.granted for r in results] == [True] * 5
        waits = [r.wait_s for r in results]
        assert waits[:3] == [0, 0, 0]
        assert all(59 < w <= 60 for w in waits[3:])  # the window is shared: replica b waits too
        refused = await b.reserve("k", 3, 60.0, 0.0)
        assert not refused.granted and refused.wait_s > 59
        assert await redis_client_.zcard(prefix + "k") == 5  # the refusal took no slot
        assert 0 < await redis_client_.pttl(prefix + "k") <= 121_000  # windows expire on their own
    finally:
        await other.aclose()


async def test_rate_limiter_over_redis_blocks_across_replicas(redis: tuple[Client, str]) -> None:
    client, prefix = redis
    replica_a = Chain([RateLimiter(RedisWindowStore(client, prefix), 2, 60, "block", per_tool=True)])
    replica_b = Chain([RateLimiter(RedisWindowStore(client, prefix), 2, 60, "block", per_tool=True)])
    assert (await replica_a.run(Phase.PRE_ACT, ctx(tool_name="search"))).action is Action.OK
    assert (await replica_b.run(Phase.PRE_ACT, ctx(tool_name="search"))).action is Action.OK
    assert (await replica_a.run(Phase.PRE_ACT, ctx(tool_name="search"))).action is Action.STOP
    assert (await replica_b.run(Phase.PRE_ACT, ctx(tool_name="other"))).action is Action.OK


async def test_an_unreachable_redis_stops_the_turn_with_a_clear_error() -> None:
    client = redis_client("redis://127.0.0.1:1/0", 0.5)
    try:
        limiter = Chain([RateLimiter(RedisWindowStore(client, "test:policy:down:"), 2, 60)])
        with structlog.testing.capture_logs() as logs:
            outcome = await asyncio.wait_for(limiter.run(Phase.PRE_ACT, ctx(tool_name="x")), 5)
    finally:
        await client.aclose()
    assert outcome.action is Action.STOP and outcome.error_kind == "internal"
    assert "RateLimiter failed at pre_act: ConnectionError" in outcome.reason
    assert [(e["event"], e["interceptor"]) for e in logs] == [("interceptor failed", "RateLimiter")]
