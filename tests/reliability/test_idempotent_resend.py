"""The runtime's resend of an idempotent write to sessions (`send_idempotent`), against a fake
call: no cluster needed. The process-level cases are in test_network_faults.py."""

from __future__ import annotations

import time
from typing import Any

import grpc
import pytest

from services.kit.errors import DependencyError, from_dependency
from services.runtime.turn_store import send_idempotent


def failed(code: grpc.StatusCode, details: str) -> DependencyError:
    """A failed call as the typed sessions client raises it."""
    return from_dependency(
        grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details), "sessions"
    )


class FakeCall:
    """Answers each attempt with the next outcome: an exception to raise or a reply."""

    def __init__(self, *outcomes: Any) -> None:
        self.outcomes = list(outcomes)
        self.attempts: list[tuple[Any, dict[str, Any]]] = []

    async def __call__(self, request: Any, **kwargs: Any) -> Any:
        self.attempts.append((request, kwargs))
        outcome = self.outcomes.pop(0) if len(self.outcomes) > 1 else self.outcomes[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


async def test_a_write_whose_connection_dropped_twice_is_resent_until_it_goes_through() -> None:
    # The first resend goes down the dead connection the channel still reads as READY.
    rpc = FakeCall(
        failed(grpc.StatusCode.UNAVAILABLE, "Socket closed"),
        failed(grpc.StatusCode.UNAVAILABLE, "Delayed close due to in-progress write (Socket closed)"),
        "stored",
    )
    request = object()
    assert await send_idempotent(rpc, request, budget_s=3.0) == "stored"
    assert [r for r, _ in rpc.attempts] == [request] * 3  # the same request, so the same request id
    assert "wait_for_ready" not in rpc.attempts[0][1]  # the first attempt fails fast as usual
    assert all(kwargs["wait_for_ready"] for _, kwargs in rpc.attempts[1:])
    timeouts = [kwargs["timeout"] for _, kwargs in rpc.attempts]
    assert timeouts == sorted(timeouts, reverse=True) and timeouts[0] == 3.0  # what is left of one deadline


@pytest.mark.parametrize(
    "code", [grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.INTERNAL]
)
async def test_only_unavailable_is_resent(code: grpc.StatusCode) -> None:
    rpc = FakeCall(failed(code, "no"), "stored")
    with pytest.raises(DependencyError) as caught:
        await send_idempotent(rpc, object(), budget_s=3.0)
    assert caught.value.status_code == code
    assert len(rpc.attempts) == 1


async def test_sessions_down_ends_within_the_budget_with_the_last_unavailable() -> None:
    rpc = FakeCall(failed(grpc.StatusCode.UNAVAILABLE, "Connection refused"))
    started = time.monotonic()
    with pytest.raises(DependencyError) as caught:
        await send_idempotent(rpc, object(), budget_s=0.8)
    assert time.monotonic() - started < 0.8 + 0.5
    assert caught.value.status_code == grpc.StatusCode.UNAVAILABLE
    assert caught.value.status_message == "Connection refused"
    assert 2 <= len(rpc.attempts) < 10  # resent with a growing pause, not in a tight loop


async def test_a_resend_that_runs_out_of_time_reports_why_the_connection_failed() -> None:
    # With wait_for_ready a resend to a service that stays down ends with DEADLINE_EXCEEDED.
    rpc = FakeCall(
        failed(grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses"),
        failed(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"),
    )
    with pytest.raises(DependencyError) as caught:
        await send_idempotent(rpc, object(), budget_s=3.0)
    assert caught.value.status_code == grpc.StatusCode.UNAVAILABLE
    assert caught.value.status_message == "failed to connect to all addresses"
    assert len(rpc.attempts) == 2
