"""The runtime replica's background loops over its turns' leases: renewals and takeovers.

The sessions service is a fake in process; each test waits on what the loops did, never on time.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from cogmesh.runtime.v1 import runtime_pb2
from cogmesh.sessions.v1 import sessions_pb2
from services.runtime.runner import Running, TurnRunner
from services.runtime.settings import RuntimeSettings

TIMEOUT_S = 30


def unavailable() -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), "away")


class FakeSessions:
    def __init__(self) -> None:
        self.claims = 0
        self.journal_reads = 0
        self.appended: list[sessions_pb2.AppendEventsRequest] = []
        self.on_renew: Any = None
        self.changed = asyncio.Condition()

    async def _notify(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    async def until(self, done: Any) -> None:
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(done), TIMEOUT_S)

    async def ClaimOrphanedTurns(self, request: Any, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        self.claims += 1
        await self._notify()
        turn = sessions_pb2.ClaimedTurn(tenant_id="t", session_id=f"s{self.claims}", turn_id="turn", lease_token=9)
        return sessions_pb2.ClaimOrphanedTurnsResponse(turns=[turn])

    async def GetJournal(self, request: Any) -> Any:
        self.journal_reads += 1
        await self._notify()
        if self.journal_reads == 1:
            raise unavailable()  # sessions restarting just as turns are orphaned
        # An unreadable request entry: the turn cannot go on and is ended rather than claimed forever.
        return sessions_pb2.GetJournalResponse(entries=[sessions_pb2.JournalEntry(kind="request", state=b"\xff\xff")])

    async def AppendEvents(self, request: Any, timeout: float | None = None, wait_for_ready: bool = False) -> Any:  # noqa: ASYNC109
        self.appended.append(request)
        await self._notify()
        return sessions_pb2.AppendEventsResponse(last_seq=len(self.appended))

    async def RenewTurnLeases(self, request: Any, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        return await self.on_renew(request)


class FakeRuntime:
    """The replica that held a claimed lease: it answers AdoptTurn."""

    def __init__(self, answer: bool | grpc.StatusCode) -> None:
        self.answer = answer  # adopted or not, or the status the call fails with
        self.asked: list[Any] = []

    async def AdoptTurn(self, request: Any, timeout: float | None = None, wait_for_ready: bool = True) -> Any:  # noqa: ASYNC109
        self.asked.append(request)
        if isinstance(self.answer, grpc.StatusCode):
            raise grpc.aio.AioRpcError(self.answer, grpc.aio.Metadata(), grpc.aio.Metadata(), "no answer")
        return runtime_pb2.AdoptTurnResponse(adopted=self.answer)


class FakeClients:
    def __init__(self, sessions: FakeSessions, runtimes: dict[str, FakeRuntime] | None = None) -> None:
        self.sessions = sessions
        self.runtimes = runtimes or {}

    def stub_at(self, address: str, stub_class: Any) -> FakeRuntime:
        return self.runtimes[address]


def runner(sessions: FakeSessions, runtimes: dict[str, FakeRuntime] | None = None, **settings: Any) -> TurnRunner:
    clients = FakeClients(sessions, runtimes)
    return TurnRunner(clients, RuntimeSettings(**settings), None, None, None)  # type: ignore[arg-type]


class ClaimedFromAnother(FakeSessions):
    async def ClaimOrphanedTurns(self, request: Any, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        self.claims += 1
        await self._notify()
        turn = sessions_pb2.ClaimedTurn(
            tenant_id="t", session_id=f"s{self.claims}", turn_id="turn", lease_token=9, previous_holder="runtime-2:1"
        )
        return sessions_pb2.ClaimOrphanedTurnsResponse(turns=[turn])


@pytest.mark.parametrize(
    ("answer", "left"),
    [
        (True, True),  # it still runs the turn: it goes on there under the new token
        (False, False),  # it does not: taken over
        (grpc.StatusCode.UNAVAILABLE, False),  # it is gone (connection refused): taken over
        (grpc.StatusCode.DEADLINE_EXCEEDED, True),  # unclear (it may have adopted): the lease decides later
    ],
)
async def test_a_claimed_turn_is_left_to_its_runtime_unless_that_says_it_does_not_run_it(
    answer: bool | grpc.StatusCode, left: bool
) -> None:
    """Issue 31: Redis away for 5 s let a healthy turn's lease lapse; the other replica claimed it and redid
    the model step. It now asks the last holder first, and takes the turn over only on a clear no: after a
    timeout the holder may have adopted the new token, and two replicas must never write under one."""
    still_runs = left
    sessions = ClaimedFromAnother()

    async def renew(request: Any) -> Any:  # the hand-over at close
        return sessions_pb2.RenewTurnLeasesResponse()

    sessions.on_renew = renew
    holder = FakeRuntime(answer)
    replica = runner(
        sessions, {"runtime-2:1": holder}, takeover_poll_s=0.001, turn_lease_renew_s=3600, turn_lease_ttl_s=7200
    )
    replica.serving("runtime-1:1")
    try:
        await sessions.until(lambda: sessions.claims >= 3 if still_runs else sessions.journal_reads >= 2)
    finally:
        await replica.close()
    assert holder.asked and holder.asked[0].lease_token == 9 and holder.asked[0].turn_id == "turn"
    if still_runs:
        assert sessions.journal_reads == 0 and sessions.appended == [], "nothing was taken over"


async def test_a_failed_journal_read_does_not_end_the_replicas_takeovers() -> None:
    sessions = FakeSessions()
    replica = runner(sessions, takeover_poll_s=0.001, turn_lease_renew_s=3600, turn_lease_ttl_s=7200)
    replica.serving("runtime-1:1")
    try:
        # The first claimed turn's journal cannot be read; the loop goes on and claims the next.
        await sessions.until(lambda: sessions.claims >= 3)
        # The unreadable journal's turn ends with an error under the claimed lease, releasing it.
        await sessions.until(lambda: any(r.release_lease for r in sessions.appended))
        assert not replica._loops[1].done(), "the takeover loop is still running"
    finally:
        await replica.close()
    ends = [r for r in sessions.appended if r.release_lease]
    assert all(r.lease_token == 9 for r in ends)
    assert all(r.events[-1].error.message.startswith("the turn's journal is unreadable") for r in ends)


class TooLargeJournal(FakeSessions):
    async def GetJournal(self, request: Any) -> Any:
        self.journal_reads += 1
        await self._notify()
        raise grpc.aio.AioRpcError(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            grpc.aio.Metadata(),
            grpc.aio.Metadata(),
            "Received message larger than max (70000000 vs. 67108864)",
        )


async def test_a_journal_too_large_to_read_ends_its_turn_instead_of_being_claimed_forever() -> None:
    """Issue 31: a 1.5 MB tool result grew a journal past gRPC's limit; every takeover failed to read it and
    the session answered "busy with turn" for good. Such a failure is not sessions being away: the turn ends."""
    sessions = TooLargeJournal()
    replica = runner(sessions, takeover_poll_s=0.001, turn_lease_renew_s=3600, turn_lease_ttl_s=7200)
    replica.serving("runtime-1:1")
    try:
        await sessions.until(lambda: any(r.release_lease for r in sessions.appended))
    finally:
        await replica.close()
    end = next(r for r in sessions.appended if r.release_lease)
    error = end.events[-1].error
    assert end.lease_token == 9 and not error.retryable
    assert error.message.startswith("the turn's journal is unreadable") and "larger than max" in error.message


async def test_a_renewal_answered_under_the_old_token_leaves_a_turn_taken_back_running() -> None:
    sessions = FakeSessions()
    replica = runner(sessions, takeover_poll_s=3600, turn_lease_renew_s=0.001, turn_lease_ttl_s=7200)
    taken_back = asyncio.Event()

    async def renew(request: Any) -> Any:
        # While the first renewal is out, this replica claims the lapsed lease back (a new token):
        # that renewal, sent under the old one, comes back not held. Later ones hold.
        held = taken_back.is_set()
        if not held:
            running.adopt(10)
            taken_back.set()
        return sessions_pb2.RenewTurnLeasesResponse(leases=[sessions_pb2.RenewedTurnLease(held=held)])

    sessions.on_renew = renew
    work = asyncio.create_task(asyncio.Event().wait())
    running = Running("t", "s", "turn", 9, replica._log("t", "s", "turn", 9, None, "test"), task=work)
    replica._running[("s", "turn")] = running
    replica.serving("runtime-1:1")
    try:
        await asyncio.wait_for(taken_back.wait(), TIMEOUT_S)
        # The loop handles the answer before it next yields, so before this test runs again.
        assert not work.cancelling() and not work.done()
        assert not replica._loops[0].done(), "the renewal loop is still running"
    finally:
        work.cancel()
        del replica._running[("s", "turn")]
        await running.log.close()
        await replica.close()


async def test_a_renewal_that_finds_the_lease_claimed_waits_for_the_hand_back() -> None:
    """The holder's renewal may hear of the claim before the claimer's AdoptTurn arrives: the turn goes on
    if the new token comes within the grace (one check per turn, however many renewals hear it)."""
    sessions = FakeSessions()
    replica = runner(
        sessions, takeover_poll_s=3600, turn_lease_renew_s=3600, turn_lease_ttl_s=7200, call_timeout_s=3600
    )
    lost: list[Any] = []
    replica._lost = lambda running, why: lost.append(why)  # type: ignore[method-assign]
    running = replica._track("StartTurn", "t", "s1", "turn", 9)
    try:
        replica._spawn_check(running, 9)
        replica._spawn_check(running, 9)
        assert running.checking and len(replica._tasks) == 1
        assert replica.adopt("s1", "turn", 10), "the claimer's AdoptTurn finds the turn running"
        async with asyncio.timeout(TIMEOUT_S):
            while running.checking:  # noqa: ASYNC110 - the check runs on a task of its own
                await asyncio.sleep(0)
        assert lost == [] and running.lease_token == 10
    finally:
        await replica._forget(running)
        await replica.close()


async def test_an_idle_replica_looks_for_orphaned_turns_less_often_up_to_half_a_lease() -> None:
    """Issue 32: every runtime worker asked for orphaned turns every second, whatever ran (an idle suite's
    Redis commands and CPU). Looks that find nothing now back off, doubling, up to half the lease TTL; a look
    that finds turns, or turns running here, bring them back to `takeover_poll_s`."""
    replica = runner(FakeSessions(), takeover_poll_s=1.0, turn_lease_ttl_s=6)
    waits = [1.0]
    for _ in range(4):
        waits.append(replica.takeover_poll_after(waits[-1], found=False))
    assert waits == [1.0, 2.0, 3.0, 3.0, 3.0], "a takeover still comes within the lease TTL and half of it"
    assert replica.takeover_poll_after(3.0, found=True) == 1.0
    running = replica._track("StartTurn", "t", "s1", "turn", 9)
    try:
        assert replica.takeover_poll_after(3.0, found=False) == 1.0, "a replica with work looks at the usual pace"
    finally:
        await replica._forget(running)
    slow = runner(FakeSessions(), takeover_poll_s=5.0, turn_lease_ttl_s=6)
    assert slow.takeover_poll_after(5.0, found=False) == 5.0, "never more often than configured"
