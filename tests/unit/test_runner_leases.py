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
from services.lib import journal_kinds
from services.runtime.journal import encode_state
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
        self.on_renew: Any = self._renewed  # a test may answer renewals otherwise
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

    async def _renewed(self, request: Any) -> Any:  # e.g. the hand-over at close of a takeover still running
        return sessions_pb2.RenewTurnLeasesResponse()


class FakeRuntime:
    """The replica that held a claimed lease: it answers AdoptTurn."""

    def __init__(self, *answers: bool | grpc.StatusCode | tuple[grpc.StatusCode, str]) -> None:
        # Adopted or not, or the status (and message) the call fails with: one per call, the last repeated.
        self.answers = answers
        self.asked: list[Any] = []

    async def AdoptTurn(self, request: Any, timeout: float | None = None, wait_for_ready: bool = True) -> Any:  # noqa: ASYNC109
        self.asked.append(request)
        answer = self.answers[min(len(self.asked), len(self.answers)) - 1]
        if isinstance(answer, grpc.StatusCode):
            answer = (answer, "no answer")
        if isinstance(answer, tuple):
            raise grpc.aio.AioRpcError(answer[0], grpc.aio.Metadata(), grpc.aio.Metadata(), answer[1])
        return runtime_pb2.AdoptTurnResponse(adopted=answer)


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


REFUSED = (grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses; last error: Connection refused")
LOST = (grpc.StatusCode.UNAVAILABLE, "Socket closed")  # the call may have reached it; its answer did not come


@pytest.mark.parametrize(
    ("answers", "left", "asks"),
    [
        ((True,), True, 1),  # it still runs the turn: it goes on there under the new token
        ((False,), False, 1),  # it does not: taken over
        ((REFUSED,), False, 1),  # it is gone (connection refused): taken over
        ((grpc.StatusCode.DEADLINE_EXCEEDED,), True, 1),  # unclear (it may have adopted): the lease decides later
        ((LOST, True), True, 2),  # a lost answer is asked again (issue 32: two wrote under one token)
        ((LOST, LOST, LOST), False, 3),  # never answering, however asked: gone
    ],
)
async def test_a_claimed_turn_is_left_to_its_runtime_unless_that_says_it_does_not_run_it(
    answers: tuple[Any, ...], left: bool, asks: int
) -> None:
    """Issue 31: Redis away for 5 s let a healthy turn's lease lapse; the other replica claimed it and redid
    the model step. It now asks the last holder first, and takes the turn over only on a clear no: after a
    timeout the holder may have adopted the new token, and two replicas must never write under one."""
    still_runs = left
    sessions = ClaimedFromAnother()

    async def renew(request: Any) -> Any:  # the hand-over at close
        return sessions_pb2.RenewTurnLeasesResponse()

    sessions.on_renew = renew
    holder = FakeRuntime(*answers)
    replica = runner(
        sessions, {"runtime-2:1": holder}, takeover_poll_s=0.001, turn_lease_renew_s=3600, turn_lease_ttl_s=7200
    )
    replica.serving("runtime-1:1")
    try:
        await sessions.until(lambda: sessions.claims >= 3 if still_runs else sessions.journal_reads >= 2)
    finally:
        await replica.close()
    assert holder.asked and holder.asked[0].lease_token == 9 and holder.asked[0].turn_id == "turn"
    first = holder.asked[0].session_id
    assert sum(r.session_id == first for r in holder.asked) == asks, f"the first claim's holder is asked {asks} times"
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


async def taken_over_end(sessions: FakeSessions, **settings: Any) -> sessions_pb2.AppendEventsRequest:
    """The append that ended the turn a replica claimed from `sessions` (looking at once, renewing never)."""
    replica = runner(sessions, takeover_poll_s=0.001, turn_lease_renew_s=3600, turn_lease_ttl_s=7200, **settings)
    replica.serving("runtime-1:1")
    try:
        await sessions.until(lambda: any(r.release_lease for r in sessions.appended))
    finally:
        await replica.close()
    return next(r for r in sessions.appended if r.release_lease)


async def test_a_journal_too_large_to_read_ends_its_turn_instead_of_being_claimed_forever() -> None:
    """Issue 31: a 1.5 MB tool result grew a journal past gRPC's limit; every takeover failed to read it and
    the session answered "busy with turn" for good. Such a failure is not sessions being away: the turn ends."""
    end = await taken_over_end(TooLargeJournal())
    error = end.events[-1].error
    assert end.lease_token == 9 and not error.retryable
    assert error.message.startswith("the turn's journal is unreadable") and "larger than max" in error.message


class MovedOften(FakeSessions):
    """A turn claimed for its 7th takeover; its journal says how many came since its last recorded step."""

    def __init__(self, stalled: int) -> None:
        super().__init__()
        self.stalled = stalled

    async def ClaimOrphanedTurns(self, request: Any, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        self.claims += 1
        await self._notify()
        turn = sessions_pb2.ClaimedTurn(
            tenant_id="t", session_id=f"s{self.claims}", turn_id="turn", lease_token=9, takeovers=7
        )
        return sessions_pb2.ClaimOrphanedTurnsResponse(turns=[turn])

    async def GetJournal(self, request: Any) -> Any:
        self.journal_reads += 1
        await self._notify()
        # Past its deadline: a turn that goes on ends at once as expired, with no model to call.
        run = runtime_pb2.RunTurnRequest(tenant_id="t", session_id=request.session_id, turn_id="turn", content="hi")
        run.deadline.FromSeconds(1)
        step = encode_state({"v": 1, "phase": "think", "messages": [], "new_messages": []}, None)
        entries = [
            journal_kinds.entry(journal_kinds.REQUEST, run.SerializeToString(), seq=1),
            *[journal_kinds.entry(journal_kinds.TAKEOVER, b"{}", seq=2) for _ in range(3)],
            journal_kinds.entry(journal_kinds.START, step, seq=3),
            *[journal_kinds.entry(journal_kinds.TAKEOVER, b"{}", seq=4) for _ in range(self.stalled)],
        ]
        return sessions_pb2.GetJournalResponse(entries=entries)


@pytest.mark.parametrize(
    ("stalled", "ends_with"),
    [
        (2, "the turn ran past its deadline"),  # a 3rd stop at this step: it goes on (and finds its deadline past)
        (3, "the turn's runtime stopped 4 times at the same step; it is not tried again"),
    ],
)
async def test_only_takeovers_since_a_turns_last_recorded_step_count_towards_its_limit(
    stalled: int, ends_with: str
) -> None:
    """CI run 40: a chaos run's stream turn, moved between runtimes all along, ended for having been moved."""
    end = await taken_over_end(MovedOften(stalled), max_takeovers=3)
    assert end.events[-1].error.message == ends_with


class MovedTooOften(MovedOften):
    """Claimed for its 31st takeover: ten times the limit of 3, in all."""

    async def ClaimOrphanedTurns(self, request: Any, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        reply = await super().ClaimOrphanedTurns(request, timeout)
        reply.turns[0].takeovers = 31
        return reply


async def test_a_turn_taken_over_ten_times_its_limit_in_all_ends_without_its_journal_being_read() -> None:
    """A runtime that dies reading a turn's journal (or before it records its takeover) would otherwise pass
    the turn on from replica to replica for good: the limit at one step never sees those takeovers."""
    sessions = MovedTooOften(stalled=0)
    end = await taken_over_end(sessions, max_takeovers=3)
    assert end.events[-1].error.message == "the turn was taken over 31 times; it is not tried again"
    assert sessions.journal_reads == 0


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


async def test_a_look_that_found_no_open_turn_waits_a_whole_lease_ttl() -> None:
    """No turn open anywhere: none can come due within a lease TTL (a first lease is two, a resume's one), so an
    idle replica looks once a TTL; an open turn found later brings back the half-TTL backoff."""
    replica = runner(FakeSessions(), takeover_poll_s=1.0, turn_lease_ttl_s=6)
    assert replica.takeover_poll_after(1.0, found=False, none_open=True) == 6.0
    assert replica.takeover_poll_after(6.0, found=False) == 3.0, "open turns, none due yet: half a TTL"
    running = replica._track("StartTurn", "t", "s1", "turn", 9)
    try:
        assert replica.takeover_poll_after(6.0, found=False, none_open=True) == 1.0, "its own turns: the usual pace"
    finally:
        await replica._forget(running)
    slow = runner(FakeSessions(), takeover_poll_s=10.0, turn_lease_ttl_s=6)
    assert slow.takeover_poll_after(10.0, found=False, none_open=True) == 10.0, "never more often than configured"


class NoneOpen(FakeSessions):
    """Sessions with no turn open anywhere: it answers at once and records what each look asked."""

    def __init__(self) -> None:
        super().__init__()
        self.looks: list[tuple[int, float | None]] = []

    async def ClaimOrphanedTurns(self, request: Any, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        self.looks.append((request.wait_seconds, timeout))
        await self._notify()
        return sessions_pb2.ClaimOrphanedTurnsResponse(none_open=True)


async def test_after_a_look_that_found_no_open_turn_the_next_waits_at_sessions_for_one() -> None:
    """An idle replica's next look asks sessions to hold its answer until a turn opens (takeover_idle_wait_s),
    with a deadline that long past the usual one: it looks when there is work, not on a clock."""
    sessions = NoneOpen()
    replica = runner(sessions, takeover_poll_s=0.01, turn_lease_ttl_s=2, turn_lease_renew_s=1, call_timeout_s=5)
    replica.serving("10.0.0.7:50052")
    try:
        await sessions.until(lambda: len(sessions.looks) >= 2)
    finally:
        await replica.close()
    assert sessions.looks[:2] == [(0, 5.0), (30, 35.0)], "the first look knows nothing yet: it waits for no turn"


async def test_a_copy_another_replica_wrote_after_is_stale_and_not_adopted_by_its_own_claim() -> None:
    """Issue 32 item 6, seen at 1,000 turns at once: replica A ran a turn, its lease lapsed, B took the turn
    over and streamed part of the answer, then B's lease lapsed and A claimed it. A still held its own copy
    and went on with it under the new token: the watchers got B's half answer, then A's whole one, nothing
    voided. A copy is adopted only when no other replica has written since (the claim names who wrote last);
    otherwise that replica is asked, and the stale copy here stops."""
    sessions = ClaimedFromAnother()  # each claim names runtime-2:1 as the last to write
    other = FakeRuntime(True)  # it still runs the turn: it goes on there
    replica = runner(
        sessions, {"runtime-2:1": other}, takeover_poll_s=3600, turn_lease_renew_s=3600, turn_lease_ttl_s=7200
    )
    replica.address = "runtime-1:1"
    stale = replica._track("StartTurn", "t", "s1", "turn", 9)
    work = asyncio.create_task(asyncio.Event().wait())
    stale.task = work
    try:
        claimed = sessions_pb2.ClaimedTurn(
            tenant_id="t", session_id="s1", turn_id="turn", lease_token=11, previous_holder="runtime-2:1"
        )
        await replica.take_over(claimed)
        assert other.asked and other.asked[0].lease_token == 11, "the replica that wrote last was asked"
        assert stale.lease_token == 9, "the stale copy did not take the new token"
        async with asyncio.timeout(TIMEOUT_S):
            while not work.done():  # noqa: ASYNC110 - cancelled by the takeover, on its own task
                await asyncio.sleep(0)
        assert work.cancelled(), "the stale copy stopped"
        # Had this replica written last, its own claim would go on with its copy.
        mine = sessions_pb2.ClaimedTurn(
            tenant_id="t", session_id="s2", turn_id="turn", lease_token=12, previous_holder="runtime-1:1"
        )
        own = replica._track("StartTurn", "t", "s2", "turn", 10)
        own.task = asyncio.create_task(asyncio.Event().wait())
        await replica.take_over(mine)
        assert own.lease_token == 12 and len(other.asked) == 1
        own.task.cancel()
        await replica._forget(own)
    finally:
        work.cancel()
        await replica._forget(stale)
        await replica.close()


async def test_a_start_read_after_its_lease_lapsed_leaves_the_turns_takeover_alone() -> None:
    """Seen at 1,000 turns at once: a replica too busy to read a StartTurn before its lease lapsed took the
    turn over itself, then read the StartTurn and ran a second copy under the older token, which replaced
    the takeover among its turns; the next claim handed the turn to that copy, and it streamed the answer
    again from its start. The late start now finds the turn running under a newer lease and leaves it."""
    replica = runner(FakeSessions(), takeover_poll_s=3600, turn_lease_renew_s=3600, turn_lease_ttl_s=7200)
    taken_over = replica._track("takeover", "t", "s1", "turn", 11)
    taken_over.task = asyncio.create_task(asyncio.Event().wait())
    try:
        late = runtime_pb2.RunTurnRequest(tenant_id="t", session_id="s1", turn_id="turn", lease_token=9)
        assert await replica.start(late, None) is taken_over
        assert replica._running[("s1", "turn")] is taken_over and taken_over.lease_token == 11
    finally:
        taken_over.task.cancel()
        await replica._forget(taken_over)
        await replica.close()
