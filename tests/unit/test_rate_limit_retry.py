"""Rate limits end to end in small: the gateway's refusal names the settings that raise the limit
and spreads the callers it refuses together; the Python SDK's rule for which refusals to wait out."""

from __future__ import annotations

import grpc
import pytest

from cogmesh.client.errors import GatewayError, ResourceExhausted, Unavailable
from cogmesh.client.retry import RateLimitRetry
from gateway.limits import TenantLimits
from services.kit.errors import RateLimited


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def refusal(limits: TenantLimits, tenant: str = "default") -> RateLimited:
    with pytest.raises(RateLimited) as caught:
        limits.admit(tenant)
    return caught.value


def test_the_rate_refusal_names_the_settings_in_its_message_and_details() -> None:
    limits = TenantLimits(200, 400, 500, clock=Clock())
    for _ in range(400):
        limits.admit("default")
    error = refusal(limits)
    assert "tenant 'default' exceeded 200 requests/s (burst 400)" in error.message
    assert "COGMESH_TENANT_RATE_PER_S" in error.message and "COGMESH_TENANT_BURST" in error.message
    assert error.metadata == {
        "tenant": "default",
        "limit": "requests_per_second",
        "setting": "COGMESH_TENANT_RATE_PER_S",
        "value": "200",
        "burst_setting": "COGMESH_TENANT_BURST",
        "burst": "400",
    }
    status = error.to_status()
    assert status.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    kinds = [d.type_url.rsplit(".", 1)[-1] for d in status.details]
    assert kinds == ["ErrorInfo", "RetryInfo"]


def test_the_stream_cap_refusal_names_its_setting() -> None:
    limits = TenantLimits(200, 400, 1, clock=Clock())
    with limits.stream("acme"), pytest.raises(RateLimited) as caught, limits.stream("acme"):
        pass
    assert "COGMESH_TENANT_MAX_STREAMS" in caught.value.message
    assert caught.value.metadata["setting"] == "COGMESH_TENANT_MAX_STREAMS"
    assert caught.value.metadata["value"] == "1"
    assert caught.value.retry_after_s > 0


def test_callers_refused_together_are_sent_back_one_token_apart() -> None:
    clock = Clock()
    limits = TenantLimits(10, 5, 500, clock=clock)
    for _ in range(5):
        limits.admit("t")
    delays = [refusal(limits, "t").retry_after_s for _ in range(60)]
    assert delays[:5] == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])
    assert delays[49:] == pytest.approx([5.0] * 11)  # never further out than MAX_SPREAD_S
    # Each comes back at its time (a hair after, as any real caller) and finds its token.
    for delay in delays[:5]:
        clock.now = 100.0 + delay + 1e-6
        limits.admit("t")
    # Another tenant is not queued behind them.
    limits.admit("other")


def test_a_refusal_after_a_quiet_spell_waits_only_for_one_token() -> None:
    clock = Clock()
    limits = TenantLimits(2, 1, 500, clock=clock)
    limits.admit("t")
    assert refusal(limits, "t").retry_after_s == pytest.approx(0.5)
    clock.now += 10
    limits.admit("t")
    assert refusal(limits, "t").retry_after_s == pytest.approx(0.5)


def limited(delay: float | None = 0.5, reason: str = "RATE_LIMITED") -> GatewayError:
    return ResourceExhausted(grpc.StatusCode.RESOURCE_EXHAUSTED, "over", reason, retry_after_s=delay)


def test_reads_wait_out_any_delayed_refusal_within_the_budget() -> None:
    waiter = RateLimitRetry(attempts=3, max_wait_s=10).start()
    assert waiter.delay(limited(0.5, reason=""), idempotent=True) == 0.5
    assert waiter.delay(limited(0.5), idempotent=True) == 0.5
    assert waiter.delay(limited(0.5), idempotent=True) is None  # three attempts in all


def test_calls_that_are_not_idempotent_wait_only_for_a_refusal_at_admission() -> None:
    waiter = RateLimitRetry().start()
    assert waiter.delay(limited(0.5, reason="QUOTA_EXCEEDED"), idempotent=False) is None
    assert waiter.delay(limited(0.5), idempotent=False) == 0.5


def test_other_errors_and_refusals_without_a_delay_are_raised() -> None:
    waiter = RateLimitRetry().start()
    assert waiter.delay(limited(None), idempotent=True) is None
    assert waiter.delay(Unavailable(grpc.StatusCode.UNAVAILABLE, "down"), idempotent=True) is None
    assert waiter.delay(RuntimeError("x"), idempotent=True) is None


def test_a_delay_past_the_wait_budget_is_raised_at_once() -> None:
    waiter = RateLimitRetry(attempts=5, max_wait_s=1.0).start()
    assert waiter.delay(limited(0.75), idempotent=True) == 0.75
    assert waiter.delay(limited(0.5), idempotent=True) is None
    waiter.reset()
    assert waiter.delay(limited(0.5), idempotent=True) == 0.5
    assert RateLimitRetry(attempts=1).start().delay(limited(0.1), idempotent=True) is None
