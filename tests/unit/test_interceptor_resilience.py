"""Failover, the CircuitBreaker interceptor and the breaker state machine the policy and the runtime share."""

from __future__ import annotations

from typing import Any

import pytest

from services.kit.metrics import CIRCUIT_STATES
from services.lib.policy.domain import ModelFailure, Phase, Scope, TurnContext
from services.lib.policy.interceptors import Action, Chain, CircuitBreaker, Failover
from services.lib.policy.resilience import CircuitBreaker as Breaker
from services.lib.policy.resilience import CircuitBreakerRegistry, CircuitState
from services.runtime.tools.breaker import BreakerRegistry


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def ctx(**fields: Any) -> TurnContext:
    return TurnContext(scope=Scope("default"), **fields)


# --------------------------------------------------------------------------- seed breaker


def test_breaker_opens_after_threshold_and_probes_after_cooldown() -> None:
    clock = Clock()
    cb = Breaker(failure_threshold=3, cooldown_s=30.0, clock=clock)
    assert cb.state is CircuitState.CLOSED and cb.allow_request()
    cb.record_failure()
    cb.record_failure()
    assert cb.state is CircuitState.CLOSED
    cb.record_failure()
    assert cb.state is CircuitState.OPEN and not cb.allow_request()
    clock.now = 29.9
    assert not cb.allow_request()
    clock.now = 30.0
    assert cb.state is CircuitState.HALF_OPEN
    assert cb.allow_request()  # the probe
    assert not cb.allow_request()  # one probe at a time
    cb.record_success()
    assert cb.state is CircuitState.CLOSED and cb.failures == 0


def test_failed_probe_reopens_and_success_resets_the_count() -> None:
    clock = Clock()
    cb = Breaker(2, 10.0, clock)
    cb.record_failure()
    cb.record_success()
    cb.record_failure()
    assert cb.state is CircuitState.CLOSED  # failures must be consecutive
    cb.record_failure()
    clock.now = 10
    assert cb.allow_request()
    cb.record_failure()
    assert cb.state is CircuitState.OPEN
    assert cb.retry_in_s() == 10
    clock.now = 20
    assert cb.state is CircuitState.HALF_OPEN


def test_a_lost_probe_does_not_block_forever() -> None:
    clock = Clock()
    cb = Breaker(1, 5.0, clock)
    cb.record_failure()
    clock.now = 5
    assert cb.allow_request()  # probe sent, its outcome never arrives
    clock.now = 9
    assert not cb.allow_request()
    clock.now = 10
    assert cb.allow_request()


def test_registry_gives_one_breaker_per_server() -> None:
    registry = CircuitBreakerRegistry(failure_threshold=1, cooldown_s=60.0)
    a = registry.get("finuslugi-mcp")
    assert registry.get("finuslugi-mcp") is a
    a.record_failure()
    assert not a.allow_request()
    assert registry.get("other").allow_request()


def test_a_threshold_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="failure_threshold must be >= 1, got 0"):
        Breaker(failure_threshold=0)


def test_retry_in_counts_down_only_while_open() -> None:
    clock = Clock()
    cb = Breaker(1, 30.0, clock)
    clock.now = 100
    assert cb.retry_in_s() == 0  # closed: nothing to wait for
    cb.record_failure()
    clock.now = 110
    assert cb.retry_in_s() == 20
    clock.now = 130
    assert cb.retry_in_s() == 0 and cb.state is CircuitState.HALF_OPEN


def test_the_runtime_registry_gives_a_server_its_own_settings_on_the_shared_breaker() -> None:
    clock = Clock()
    registry = BreakerRegistry(failure_threshold=3, cooldown_s=30, clock=clock)
    registry.configure("fragile", failure_threshold=1, cooldown_s=5)
    fragile, sturdy = registry.get("fragile"), registry.get("sturdy")
    assert isinstance(fragile, Breaker) and registry.get("fragile") is fragile
    fragile.record_failure()
    sturdy.record_failure()
    assert (fragile.state, sturdy.state) == (CircuitState.OPEN, CircuitState.CLOSED)
    clock.now = 5
    assert fragile.state is CircuitState.HALF_OPEN
    assert [name for name, _ in registry.items()] == ["fragile", "sturdy"]


def test_metrics_export_every_state_the_breaker_has() -> None:
    # BreakerCollector reports `state.value` against this list: a new state must be added there.
    assert tuple(state.value for state in CircuitState) == CIRCUIT_STATES


# --------------------------------------------------------------------------- interceptor


async def test_circuit_breaker_interceptor_skips_a_failing_tool() -> None:
    chain = Chain([CircuitBreaker(CircuitBreakerRegistry(2, 30.0), tools=["database_query"])])
    for _ in range(2):
        assert (await chain.run(Phase.PRE_ACT, ctx(tool_name="database_query"))).action is Action.OK
        await chain.run(Phase.POST_ACT, ctx(tool_name="database_query", tool_result="boom", tool_error="boom"))
    skipped = await chain.run(Phase.PRE_ACT, ctx(tool_name="database_query"))
    assert skipped.action is Action.SKIP
    assert "circuit open for tool 'database_query' after 2 consecutive failures" in skipped.reason
    # Unprotected tools are not counted or blocked.
    for _ in range(3):
        await chain.run(Phase.POST_ACT, ctx(tool_name="search", tool_error="x"))
    assert (await chain.run(Phase.PRE_ACT, ctx(tool_name="search"))).action is Action.OK


async def test_circuit_breaker_interceptor_success_closes() -> None:
    chain = Chain([CircuitBreaker(CircuitBreakerRegistry(2, 30.0))])
    await chain.run(Phase.POST_ACT, ctx(tool_name="t", tool_error="x"))
    await chain.run(Phase.POST_ACT, ctx(tool_name="t", tool_result="fine"))
    await chain.run(Phase.POST_ACT, ctx(tool_name="t", tool_error="x"))
    assert (await chain.run(Phase.PRE_ACT, ctx(tool_name="t"))).action is Action.OK


# --------------------------------------------------------------------------- Failover


async def fail(chain: Chain, state: dict[str, Any], model: str, kind: str = "rate_limit") -> tuple[Any, TurnContext]:
    c = ctx(model=model, state=state, error=ModelFailure(kind, "429 too many requests"))  # type: ignore[arg-type]
    return await chain.run(Phase.ON_ERROR, c), c


async def test_failover_walks_the_fallbacks_with_retries_per_model() -> None:
    chain = Chain([Failover(["gpt-5.4-mini", "claude-sonnet-4-20250514"], max_retries_per_model=2)])
    state: dict[str, Any] = {}
    models = []
    model = "gpt4"
    for _ in range(5):
        outcome, c = await fail(chain, state, model)
        state = c.state
        models.append(outcome.model)
        model = outcome.model or model
    assert models == ["gpt-5.4-mini", "gpt-5.4-mini", "claude-sonnet-4-20250514", "claude-sonnet-4-20250514", None]
    assert "no fallback model left" in c.notices[0].text


async def test_failover_keeps_later_calls_on_the_switched_model() -> None:
    chain = Chain([Failover(["backup"])])
    outcome, c = await fail(chain, {}, "primary", "timeout")
    assert outcome.model == "backup" and outcome.state_changed
    assert "primary failed (timeout" in c.notices[0].text
    think = await chain.run(Phase.PRE_THINK, ctx(model="primary", state=c.state))
    assert think.model == "backup"
    assert (await chain.run(Phase.PRE_THINK, ctx(model="primary"))).model is None  # a fresh turn starts on primary


async def test_failover_ignores_failures_it_is_not_for() -> None:
    chain = Chain([Failover(["backup"], on=["rate_limit"])])
    outcome, _ = await fail(chain, {}, "primary", "context_length")
    assert outcome.model is None and outcome.action is Action.OK
