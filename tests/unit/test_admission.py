"""Admission control's decision (services/runtime/admission.py) from its measurements, on a fake clock,
and the runner's answer to StartTurn (RESOURCE_EXHAUSTED with RetryInfo) and to its takeover looks."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from cogmesh.sessions.v1 import sessions_pb2
from services.kit.errors import RateLimited
from services.runtime.admission import Admission
from services.runtime.runner import TurnRunner
from services.runtime.settings import RuntimeSettings

TIMEOUT_S = 30


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def admission(clock: Clock, max_turns: int = 0) -> Admission:
    # The defaults: a 6 s lease renewed every 2 s may be renewed 4 s late before it lapses; half that is the limit.
    return Admission(lease_ttl_s=6, renew_s=2, max_turns=max_turns, clock=clock)


def test_a_worker_that_keeps_time_takes_turns() -> None:
    clock = Clock()
    gate = admission(clock)
    assert gate.late_limit_s == 2.0
    gate.renewal_due(clock.now + 2)
    clock.now += 2.5
    gate.renewed(due=clock.now - 0.5, done=clock.now)  # half a second late: within the limit
    gate.loop_lag(0.3)
    assert gate.refusal(running=500) is None, "no fixed limit by default"
    assert gate.grace_s() == 1, "a lagging holder renews for a little longer (whole seconds)"


def test_a_worker_running_no_turn_takes_one_whatever_its_last_renewals_were() -> None:
    # A sessions outage made the last renewal very late, then the turn ended (or was given up): with no
    # lease left to keep there is no renewal to come that could lift a refusal, so none is made.
    clock = Clock()
    gate = admission(clock)
    gate.renewal_due(clock.now)
    clock.now += 5
    gate.renewed(due=clock.now - 5, done=clock.now)
    assert gate.refusal(running=1) is not None
    assert gate.refusal(running=0) is None


def test_renewals_late_past_half_the_slack_refuse_new_turns_until_they_keep_time_again() -> None:
    clock = Clock()
    gate = admission(clock)
    gate.renewal_due(clock.now)
    clock.now += 2.5  # answered 2.5 s after it was due
    gate.renewed(due=clock.now - 2.5, done=clock.now)
    refusal = gate.refusal(running=3)
    assert refusal is not None and refusal.cause == "lease_renewals_late"
    assert refusal.measured_s == 2.5 and refusal.limit_s == 2.0 and refusal.retry_after_s == 2.0
    assert "2.50s late" in refusal.message
    assert gate.grace_s() == 3, "meanwhile its leases are renewed for 3 s longer (at most half the TTL)"
    gate.renewal_due(clock.now + 2)
    clock.now += 1.9
    assert gate.refusal(running=3) is not None, "refused until a renewal shows it keeps time again"
    clock.now += 0.2
    gate.renewed(due=clock.now - 0.1, done=clock.now)
    assert gate.refusal(running=3) is None, "a renewal on time: it takes turns again (one interval lost, not more)"
    assert gate.grace_s() == 3, "the grace remembers the late renewal for two intervals"
    clock.now += 4.1
    gate.renewed(due=clock.now, done=clock.now)
    assert gate.grace_s() == 0


def test_a_renewal_still_under_way_counts_as_late_as_it_is_already() -> None:
    """A loop too busy to send the renewal, or a store too slow to answer it: nothing was measured yet,
    but the lease is at risk all the same."""
    clock = Clock()
    gate = admission(clock)
    gate.renewal_due(clock.now + 2)
    clock.now += 1
    assert not gate.renewal_overdue() and gate.refusal(running=1) is None
    clock.now += 2
    assert gate.renewal_overdue(), "due: a StartTurn now wakes it first"
    assert gate.refusal(running=1) is None, "1 s late is within the limit"
    clock.now += 1.5
    refusal = gate.refusal(running=1)
    assert refusal is not None and refusal.cause == "lease_renewals_late" and refusal.measured_s == 2.5
    gate.renewal_due(None)  # nothing to renew any more
    assert gate.refusal(running=0) is None


def test_event_loop_lag_refuses_new_turns_and_holds_claims_back() -> None:
    clock = Clock()
    gate = admission(clock)
    gate.loop_lag(2.4)
    refusal = gate.refusal(running=1)
    assert refusal is not None and refusal.cause == "event_loop_lag" and refusal.measured_s == 2.4
    assert gate.claim_limit(running=1, most=10) == 0, "a lagging worker claims no orphaned turn"
    assert gate.grace_s() == 3, "twice the lag, at most half the lease TTL"
    clock.now += 4.1  # two renewal intervals of a loop that kept time
    gate.loop_lag(0.01)
    assert gate.refusal(running=1) is None and gate.claim_limit(running=1, most=10) == 10
    assert gate.grace_s() == 1


def test_renewals_late_for_the_stores_sake_do_not_hold_claims_back() -> None:
    """Every worker's renewals are late when the sessions store is: claiming is how a worker gets its own
    lapsed turn back, so only its own loop lag and its turn limit stop its claims."""
    clock = Clock()
    gate = admission(clock)
    gate.renewal_due(clock.now - 3)
    assert gate.refusal(running=1) is not None
    assert gate.claim_limit(running=1, most=10) == 10


def test_a_turn_limit_refuses_past_it_and_bounds_claims() -> None:
    clock = Clock()
    gate = admission(clock, max_turns=4)
    assert gate.refusal(running=3) is None
    refusal = gate.refusal(running=4)
    assert refusal is not None and refusal.cause == "max_turns" and "COGMESH_RUNTIME_MAX_TURNS=4" in refusal.message
    assert gate.claim_limit(running=1, most=10) == 3
    assert gate.claim_limit(running=4, most=10) == 0


def test_an_idle_worker_forgets_what_it_measured_under_load() -> None:
    clock = Clock()
    gate = admission(clock)
    gate.loop_lag(5.0)
    gate.renewal_due(clock.now - 5)
    gate.forget()
    assert gate.refusal(running=0) is None and gate.grace_s() == 0


# ---------------------------------------------------------------------------- the runner


class Renewals:
    """A sessions fake whose RenewTurnLeases waits until released: a store (or a loop) too slow to renew."""

    def __init__(self) -> None:
        self.requests: list[sessions_pb2.RenewTurnLeasesRequest] = []
        self.release = asyncio.Event()
        self.claims: list[sessions_pb2.ClaimOrphanedTurnsRequest] = []

    async def RenewTurnLeases(self, request: Any, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        self.requests.append(request)
        await self.release.wait()
        return sessions_pb2.RenewTurnLeasesResponse(
            leases=[sessions_pb2.RenewedTurnLease(held=True) for _ in request.leases]
        )

    async def ClaimOrphanedTurns(self, request: Any, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        self.claims.append(request)
        return sessions_pb2.ClaimOrphanedTurnsResponse()

    async def AppendEvents(self, request: Any, timeout: float | None = None, wait_for_ready: bool = False) -> Any:  # noqa: ASYNC109
        return sessions_pb2.AppendEventsResponse(last_seq=1)


class FakeClients:
    def __init__(self, sessions: Renewals) -> None:
        self.sessions = sessions


async def test_a_runner_whose_renewal_is_late_refuses_start_turn_with_retry_info_and_renews_first() -> None:
    sessions = Renewals()
    settings = RuntimeSettings(turn_lease_ttl_s=6, turn_lease_renew_s=2, takeover_poll_s=3600)
    runner = TurnRunner(FakeClients(sessions), settings, None, None, None)  # type: ignore[arg-type]
    clock = Clock()
    runner.admission.clock = clock
    running = runner._track("StartTurn", "t", "s1", "turn", 9)
    try:
        runner.admit()  # on time: taken
        runner.admission.renewal_due(clock.now - 2.5)  # the renewal was due 2.5 s ago and has not been answered
        renewing = asyncio.create_task(runner._keep_leases())
        runner._loops.append(renewing)
        with pytest.raises(RateLimited) as refused:
            runner.admit()
        assert runner._renew_now.is_set(), "the overdue renewal is woken before the new turn could be"
        error = refused.value
        assert error.retry_after_s == 2 and error.metadata["admission"] == "lease_renewals_late"
        assert error.metadata["measured"] == "2.5" and error.metadata["limit"] == "2"
        status = error.to_status()
        assert status.code == 8  # RESOURCE_EXHAUSTED
        assert any(d.TypeName() == "google.rpc.RetryInfo" for d in status.details)
        async with asyncio.timeout(TIMEOUT_S):
            while not sessions.requests:  # noqa: ASYNC110 - the renewal runs on its own task
                await asyncio.sleep(0)
        assert runner.refused == 1
    finally:
        sessions.release.set()
        await runner._forget(running)
        await runner.close()


async def test_a_lagging_runner_renews_for_longer_and_claims_nothing() -> None:
    sessions = Renewals()
    sessions.release.set()
    settings = RuntimeSettings(turn_lease_ttl_s=6, turn_lease_renew_s=0.01, takeover_poll_s=0.01)
    runner = TurnRunner(FakeClients(sessions), settings, None, None, None)  # type: ignore[arg-type]
    clock = Clock()
    runner.admission = Admission(6, 2, clock=clock)  # its limits as with the defaults, measured on a fake clock
    runner.admission.loop_lag(2.5)
    running = runner._track("StartTurn", "t", "s1", "turn", 9)
    runner.serving("runtime-1:1")
    runner._loops[2].cancel()  # the lag is the test's to say (a jump of the fake clock would read as lag)
    try:
        async with asyncio.timeout(TIMEOUT_S):
            while len(sessions.requests) < 3:  # noqa: ASYNC110 - renewals run on the runner's task
                await asyncio.sleep(0.01)
        assert sessions.requests[-1].leases[0].ttl_seconds == 6 + 3, "the lease TTL plus the grace"
        assert sessions.claims == [], "a worker whose loop lags claims no orphaned turn"
        clock.now += 5  # the lag is forgotten: it claims again
        async with asyncio.timeout(TIMEOUT_S):
            while not sessions.claims:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        assert sessions.claims[0].max_turns == 10
    finally:
        await runner._forget(running)
        await runner.close()
