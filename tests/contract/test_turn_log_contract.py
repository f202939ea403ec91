"""The event log, the turns' journals and the leases of durable turns: one contract for every SessionStore.

What a runtime replica and a gateway rely on (issue 16): a session's events get
contiguous seqs; a turn's acceptance is logged with its lease grant; every append is
fenced by the lease token and deduplicated by its id; a turn's end frees the lease in
the same write; a pause stores its checkpoint and frees the lease; the journal of an
open or paused turn is never dropped; an open turn whose runtime stopped keeps its
lease until another replica claims it with a new token.

Every test runs against the memory store and the Redis store on each form of Redis
(standalone, Sentinel, a 6-node cluster). Time is the harness's: `lapse(seconds)` moves
the store's clock (the memory store takes a clock; the Redis store adds an offset to
Redis's clock in every script), so no test waits for a lease to run out.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass

import grpc
import pytest

from cogmesh.common.v1 import errors_pb2, events_pb2
from cogmesh.sessions.v1 import sessions_pb2
from services.kit.errors import CogmeshError, InvalidArgument, NotFound, OutOfRange
from services.sessions import leases
from services.sessions.model import (
    JOURNALS_KEPT,
    Acquired,
    Appended,
    CheckpointExists,
    LeaseHeld,
    NewCheckpoint,
    NewEvents,
    NewSession,
    Queued,
    Renewal,
    SessionError,
    SessionNotFound,
    StaleLease,
    Strategy,
)
from services.sessions.redis_lua import SESSION_KEYS
from services.sessions.redis_store import RedisSessionStore
from services.sessions.servicer import SessionsServicer, status_of
from services.sessions.store import MemorySessionStore, SessionStore
from tests.support.redis_topologies import REDIS_TOPOLOGIES, redis_for

ACME, GLOBEX = "acme", "globex"
TTL = 30.0  # lease lifetime in these tests: they lapse it on purpose, never by waiting
STORES = ["memory", *REDIS_TOPOLOGIES]


class Clock:
    """A clock the test moves. It starts an hour before the real time, so that every expiry the store
    reports is in the past for code that compares it with time.time() (leases.acquire does)."""

    def __init__(self) -> None:
        self.now = time.time() - 3600

    def __call__(self) -> float:
        return self.now


@dataclass
class Harness:
    store: SessionStore
    lapse: Callable[[float], Awaitable[None]]  # let this much of the store's time pass

    async def new_session(self, tenant: str = ACME) -> str:
        record, _ = await self.store.create(tenant, NewSession("", "", "default"))
        return record.session_id

    async def start_turn(self, sid: str, turn_id: str, request: bytes = b"") -> Acquired:
        """What the gateway does: take the lease and log the turn's acceptance and request with it."""
        granted = await self.store.try_acquire(ACME, sid, turn_id, TTL, Strategy.REJECT, opening(turn_id, request))
        assert isinstance(granted, Acquired)
        return granted

    async def append(
        self,
        sid: str,
        turn_id: str,
        token: int,
        *events: events_pb2.RuntimeEvent,
        journal: Sequence[tuple[str, bytes] | tuple[str, bytes, int]] = (),
        append_id: str = "",
        release: bool = False,
        pause: NewCheckpoint | None = None,
        messages: Sequence[bytes] = (),
        holder: str = "",
    ) -> Appended:
        """Append; a journal entry without a position comes after all of the append's events."""
        entries = [(e[0], e[1], e[2] if len(e) == 3 else len(events)) for e in journal]
        new = NewEvents(turn_id, token, list(events), entries, append_id, release, pause, messages, holder)
        return await self.store.append_events(ACME, sid, new)

    async def log(self, sid: str, after: int = 0) -> list[events_pb2.RuntimeEvent]:
        """The log's events after `after`, replayed (no follow)."""
        return [e async for batch in self.store.read_events(ACME, sid, after, False, 60.0) if batch for e in batch]


MakeHarness = Callable[..., Awaitable[Harness]]


@pytest.fixture(params=STORES)
async def make_harness(request: pytest.FixtureRequest) -> AsyncIterator[MakeHarness]:
    made: list[SessionStore] = []
    with contextlib.ExitStack() as stack:
        redis = None if request.param == "memory" else stack.enter_context(redis_for(request, request.param))

        async def make(event_retention: int = 10_000, session_ttl_s: float = 0.0) -> Harness:
            if redis is None:
                clock = Clock()
                memory = MemorySessionStore(clock=clock, event_retention=event_retention, session_ttl_s=session_ttl_s)

                async def lapse(seconds: float) -> None:
                    clock.now += seconds

                made.append(memory)
                return Harness(memory, lapse)
            store = RedisSessionStore.from_url(
                redis.url, redis.prefix, session_ttl_s, 2.0, event_retention=event_retention
            )
            # Its clock starts an hour back too (see Clock), and moves only when the test says so.
            store.clock_offset_ms = -3600_000

            async def lapse_redis(seconds: float) -> None:
                store.clock_offset_ms += int(seconds * 1000)

            made.append(store)
            return Harness(store, lapse_redis)

        yield make
        for store in made:
            await store.close()


@pytest.fixture
async def h(make_harness: MakeHarness) -> Harness:
    return await make_harness()


# --------------------------------------------------------------------------- events


def status(text: str, state: int = events_pb2.TURN_STATE_RUNNING, turn_id: str = "") -> events_pb2.RuntimeEvent:
    return events_pb2.RuntimeEvent(turn_id=turn_id, status=events_pb2.StatusUpdate(state=state, text=text))  # type: ignore[arg-type]


def delta(text: str, turn_id: str = "") -> events_pb2.RuntimeEvent:
    return events_pb2.RuntimeEvent(turn_id=turn_id, assistant_delta=events_pb2.AssistantDelta(text=text))


def final(text: str, turn_id: str = "") -> events_pb2.RuntimeEvent:
    return events_pb2.RuntimeEvent(turn_id=turn_id, final=events_pb2.FinalResult(text=text))


def failure(text: str, turn_id: str = "") -> events_pb2.RuntimeEvent:
    error = events_pb2.TurnError(kind=events_pb2.ERROR_KIND_INTERNAL, message=text)
    return events_pb2.RuntimeEvent(turn_id=turn_id, error=error)


def opening(turn_id: str, request: bytes = b"") -> NewEvents:
    """A turn's acceptance: its `accepted` status and the journal entry of its request."""
    accepted = status("accepted", events_pb2.TURN_STATE_QUEUED, turn_id)
    return NewEvents(turn_id, 0, [accepted], [("request", request or f"request of {turn_id}".encode(), 1)])


def approval(interrupt_id: str) -> events_pb2.ApprovalRequired:
    return events_pb2.ApprovalRequired(action_name="calculator", interrupt_id=interrupt_id, correlation_id="c0")


def paused_at(interrupt_id: str, turn_id: str) -> NewCheckpoint:
    """The pause of `turn_id`: what it waits for, without a payload (its journal holds its state)."""
    return NewCheckpoint(interrupt_id, turn_id, "approval", approval(interrupt_id).SerializeToString(), b"")


def pause_events(interrupt_id: str, turn_id: str) -> list[events_pb2.RuntimeEvent]:
    paused = status("waiting for approval", events_pb2.TURN_STATE_PAUSED, turn_id)
    paused.status.interrupt_id = interrupt_id
    return [events_pb2.RuntimeEvent(turn_id=turn_id, approval_required=approval(interrupt_id)), paused]


def seqs(events: Sequence[events_pb2.RuntimeEvent]) -> list[int]:
    return [e.seq for e in events]


def code_of(error: BaseException) -> grpc.StatusCode:
    """The status a client would get for this error (domain errors through the servicer's table)."""
    if isinstance(error, SessionError):
        return status_of(error).code
    assert isinstance(error, CogmeshError), error
    return error.code


async def logged_nothing(h: Harness, sid: str, last_seq: int, turn_id: str, journal_size: int) -> None:
    """The log still ends at `last_seq` and the turn's journal still has `journal_size` entries."""
    assert (await h.store.log_state(ACME, sid)).last_seq == last_seq
    assert len(await h.store.journal(ACME, sid, turn_id)) == journal_size


# --------------------------------------------------------------------------- seq stamping


async def test_events_get_the_sessions_next_seqs_contiguous_across_appends(h: Harness) -> None:
    sid = await h.new_session()
    grant = await h.start_turn(sid, "t1")
    assert (grant.start_seq, grant.last_seq) == (0, 1)
    stamped = events_pb2.RuntimeEvent(turn_id="t1", status=events_pb2.StatusUpdate(text="timed"))
    stamped.create_time.FromSeconds(1_700_000_000)
    first = await h.append(sid, "t1", grant.token, delta("a", "t1"), delta("b", "t1"), stamped)
    second = await h.append(sid, "t1", grant.token, delta("c", "t1"), final("abc", "t1"), release=True)
    assert (first.last_seq, second.last_seq) == (4, 6)
    other = await h.new_session()  # every session counts on its own
    assert (await h.start_turn(other, "t2")).last_seq == 1

    events = await h.log(sid)
    assert seqs(events) == [1, 2, 3, 4, 5, 6]
    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds == ["status", "assistant_delta", "assistant_delta", "status", "assistant_delta", "final"]
    assert all(e.session_id == sid for e in events)
    assert all(e.HasField("create_time") for e in events), "the store stamps a time where none was set"
    assert events[3].create_time.seconds == 1_700_000_000, "a time that was set is kept"
    assert seqs(await h.log(sid, after=4)) == [5, 6]
    assert await h.log(sid, after=6) == []


async def test_the_store_stamps_each_event_with_its_turn(h: Harness) -> None:
    sid = await h.new_session()
    grant = await h.start_turn(sid, "t1")
    await h.append(sid, "t1", grant.token, delta("no turn id set"))
    assert [e.turn_id for e in await h.log(sid)] == ["t1", "t1"]


# --------------------------------------------------------------------------- the grant logs the opening


async def test_an_opening_is_logged_with_the_grant_and_opens_the_turn(h: Harness) -> None:
    sid = await h.new_session()
    earlier = await h.start_turn(sid, "t0")
    await h.append(sid, "t0", earlier.token, final("hi", "t0"), release=True)

    grant = await h.start_turn(sid, "t1", request=b"the RunTurnRequest")
    assert (grant.start_seq, grant.last_seq, grant.pending_interrupt_ids) == (2, 3, ())
    accepted = (await h.log(sid, after=2))[0]
    assert (accepted.seq, accepted.turn_id, accepted.status.text) == (3, "t1", "accepted")
    journal = await h.store.journal(ACME, sid, "t1")
    assert [(r.kind, r.state, r.seq) for r in journal] == [("request", b"the RunTurnRequest", 3)]
    state = await h.store.log_state(ACME, sid)
    assert (state.last_seq, state.ends_with_turn_end) == (3, False)
    assert (await h.store.get(ACME, sid)).active_turn_id == "t1"


async def test_a_paused_turn_waiting_for_an_answer_gets_nothing_logged_with_the_grant(h: Harness) -> None:
    sid = await h.new_session()
    grant = await h.start_turn(sid, "t1")
    await h.append(sid, "t1", grant.token, *pause_events("int_1", "t1"), pause=paused_at("int_1", "t1"))

    waiting = await h.store.try_acquire(ACME, sid, "t2", TTL, Strategy.REJECT, opening("t2"))
    assert isinstance(waiting, Acquired), "the lease is granted: the caller decides to refuse the turn"
    assert waiting.pending_interrupt_ids == ("int_1",)
    assert waiting.start_seq == 3
    await logged_nothing(h, sid, 3, "t2", 0)
    # Not opened: when its holder lets it lapse, it is simply free again, and nobody claims it.
    await h.lapse(TTL + 1)
    assert await h.store.claim_orphans("runtime-b", 10, TTL) == []
    assert isinstance(await h.store.try_acquire(ACME, sid, "t3", TTL, Strategy.REJECT), Acquired)


async def test_last_seq_is_zero_when_the_grant_logged_nothing(h: Harness) -> None:
    sid = await h.new_session()
    grant = await h.start_turn(sid, "t1")
    await h.append(sid, "t1", grant.token, *pause_events("int_1", "t1"), pause=paused_at("int_1", "t1"))
    waiting = await h.store.try_acquire(ACME, sid, "t2", TTL, Strategy.REJECT, opening("t2"))
    assert isinstance(waiting, Acquired)
    assert (waiting.start_seq, waiting.last_seq) == (3, 0)


async def test_a_retried_acquire_gets_the_same_lease_and_logs_nothing_more(h: Harness) -> None:
    sid = await h.new_session()
    grant = await h.start_turn(sid, "t1")
    await h.append(sid, "t1", grant.token, delta("on its way", "t1"))
    again = await h.store.try_acquire(ACME, sid, "t1", TTL, Strategy.REJECT, opening("t1"))
    assert isinstance(again, Acquired)
    assert (again.token, again.start_seq, again.last_seq) == (grant.token, 0, 1), "the first grant's seqs"
    await logged_nothing(h, sid, 2, "t1", 1)


async def test_a_refused_acquire_logs_nothing(h: Harness) -> None:
    sid = await h.new_session()
    await h.start_turn(sid, "t1")
    with pytest.raises(LeaseHeld) as held:
        await h.store.try_acquire(ACME, sid, "t2", TTL, Strategy.REJECT, opening("t2"))
    assert held.value.turn_id == "t1"
    queued = await h.store.try_acquire(ACME, sid, "t3", TTL, Strategy.ENQUEUE, opening("t3"))
    assert isinstance(queued, Queued) and queued.holder_turn_id == "t1"
    await logged_nothing(h, sid, 1, "t2", 0)
    assert await h.store.journal(ACME, sid, "t3") == []


# --------------------------------------------------------------------------- appends: fencing and retries


async def test_an_append_with_a_stale_token_writes_nothing(h: Harness) -> None:
    sid = await h.new_session()
    grant = await h.start_turn(sid, "t1")
    await h.lapse(TTL + 1)
    (claimed,) = await h.store.claim_orphans("runtime-b", 10, TTL)
    assert claimed.token > grant.token
    with pytest.raises(StaleLease) as stale:
        await h.append(
            sid, "t1", grant.token, delta("late", "t1"), journal=[("model", b"{}")], release=True, messages=[b"m"]
        )
    error = status_of(stale.value)
    assert (error.code, error.reason) == (grpc.StatusCode.FAILED_PRECONDITION, errors_pb2.ERROR_REASON_TURN_NOT_FOUND)
    await logged_nothing(h, sid, 1, "t1", 1)
    assert (await h.store.get(ACME, sid)).message_count == 0
    assert (await h.store.lease_state(ACME, sid)).lease is not None, "the stale end freed nothing"
    assert (await h.append(sid, "t1", claimed.token, delta("resumed", "t1"))).last_seq == 2

    idle = await h.new_session()  # no lease at all: nothing is fenced open
    with pytest.raises(StaleLease):
        await h.append(idle, "t9", 1, delta("nobody holds this"))
    assert (await h.store.log_state(ACME, idle)).last_seq == 0


async def test_a_retried_append_answers_the_same_seq_even_after_the_lease_was_released(h: Harness) -> None:
    sid = await h.new_session()
    grant = await h.start_turn(sid, "t1")
    first = await h.append(sid, "t1", grant.token, delta("a", "t1"), journal=[("model", b"s1")], append_id="t1:1")
    await h.append(sid, "t1", grant.token, status("tool", turn_id="t1"), append_id="t1:2")
    end = await h.append(
        sid, "t1", grant.token, final("a", "t1"), append_id="t1:3", release=True, messages=[b"user", b"assistant"]
    )
    assert (first.last_seq, end.last_seq, end.message_count, end.duplicate) == (2, 4, 2, False)

    retried = await h.append(sid, "t1", grant.token, delta("a", "t1"), journal=[("model", b"s1")], append_id="t1:1")
    assert (retried.last_seq, retried.duplicate) == (2, True), "the seq of its first try, not the log's end"
    retried_end = await h.append(
        sid, "t1", grant.token, final("a", "t1"), append_id="t1:3", release=True, messages=[b"user", b"assistant"]
    )
    assert (retried_end.last_seq, retried_end.message_count, retried_end.duplicate) == (4, 2, True)
    next_turn = await h.start_turn(sid, "t2")  # even once another turn holds the lease
    assert next_turn.last_seq == 5
    assert (await h.append(sid, "t1", grant.token, final("a", "t1"), append_id="t1:3", release=True)).duplicate

    assert seqs(await h.log(sid)) == [1, 2, 3, 4, 5]
    assert [r.kind for r in await h.store.journal(ACME, sid, "t1")] == ["request", "model"]
    assert (await h.store.list_messages(ACME, sid, 0, 10)).items == [b"user", b"assistant"]


async def test_the_end_frees_the_lease_in_the_same_write(h: Harness) -> None:
    sid = await h.new_session()
    grant = await h.start_turn(sid, "t1")
    seen: list[object] = []
    reading = asyncio.Event()

    async def read_to_the_end() -> None:
        async for batch in h.store.read_events(ACME, sid, 0, True, 60.0):
            reading.set()
            if batch and any(e.HasField("final") for e in batch):
                seen.append((await h.store.lease_state(ACME, sid)).lease)  # no await in between for the writer
                return

    reader = asyncio.create_task(read_to_the_end())
    await asyncio.wait_for(reading.wait(), 10)
    await h.append(sid, "t1", grant.token, delta("done", "t1"), final("done", "t1"), release=True)
    await asyncio.wait_for(reader, 10)
    assert seen == [None], "whoever reads the end finds the lease free"
    assert (await h.store.log_state(ACME, sid)).ends_with_turn_end
    assert isinstance(await h.store.try_acquire(ACME, sid, "t2", TTL, Strategy.REJECT), Acquired)

    other = await h.new_session()  # an error ends a turn the same way
    grant = await h.start_turn(other, "t3")
    await h.append(other, "t3", grant.token, failure("model down", "t3"), release=True)
    assert (await h.store.lease_state(ACME, other)).lease is None
    await h.lapse(TTL + 1)
    assert await h.store.claim_orphans("runtime-b", 10, TTL) == [], "an ended turn is no orphan"


async def test_messages_are_stored_with_the_end_only(h: Harness) -> None:
    sid = await h.new_session()
    grant = await h.start_turn(sid, "t1")
    step = await h.append(sid, "t1", grant.token, delta("thinking", "t1"), journal=[("model", b"{}")])
    assert step.message_count == 0
    end = await h.append(sid, "t1", grant.token, final("ok", "t1"), release=True, messages=[b"question", b"answer"])
    assert end.message_count == 2
    assert (await h.store.get(ACME, sid)).message_count == 2
    assert (await h.store.list_messages(ACME, sid, 0, 10)).items == [b"question", b"answer"]


# --------------------------------------------------------------------------- pause


async def test_a_pause_stores_its_checkpoint_frees_the_lease_and_waits(h: Harness) -> None:
    sid = await h.new_session()
    grant = await h.start_turn(sid, "t1")
    appended = await h.append(
        sid,
        "t1",
        grant.token,
        *pause_events("int_1", "t1"),
        journal=[("pause", b'{"waiting":"approval"}')],
        pause=paused_at("int_1", "t1"),
    )
    assert appended.last_seq == 3
    record = await h.store.get(ACME, sid)
    assert (record.active_turn_id, record.pending_interrupt_ids) == ("", ("int_1",))
    assert (await h.store.lease_state(ACME, sid)).lease is None
    (checkpoint,) = await h.store.list_checkpoints(ACME, sid)
    assert (checkpoint.interrupt_id, checkpoint.turn_id, checkpoint.kind) == ("int_1", "t1", "approval")
    assert checkpoint.request == paused_at("int_1", "t1").request
    assert (checkpoint.payload, checkpoint.decision, checkpoint.lease_token) == (b"", None, grant.token)
    assert not (await h.store.log_state(ACME, sid)).ends_with_turn_end, "a pause is not a turn's end"
    assert [r.kind for r in await h.store.journal(ACME, sid, "t1")] == ["request", "pause"]
    await h.lapse(TTL + 1)
    assert await h.store.claim_orphans("runtime-b", 10, TTL) == [], "a paused turn waits for its answer, not a runtime"


async def test_a_pause_whose_interrupt_exists_writes_nothing(h: Harness) -> None:
    sid = await h.new_session()
    grant = await h.start_turn(sid, "t1")
    await h.append(sid, "t1", grant.token, *pause_events("int_1", "t1"), pause=paused_at("int_1", "t1"))
    resume = await h.store.try_acquire(ACME, sid, "t1", TTL, Strategy.REJECT, resume="a")
    assert isinstance(resume, Acquired)
    with pytest.raises(CheckpointExists):
        await h.append(
            sid,
            "t1",
            resume.token,
            *pause_events("int_1", "t1"),
            journal=[("pause", b"{}")],
            pause=paused_at("int_1", "t1"),
        )
    await logged_nothing(h, sid, 3, "t1", 1)
    assert (await h.store.lease_state(ACME, sid)).lease is not None


async def test_a_resumed_turn_is_open_under_its_resume_lease(h: Harness) -> None:
    sid = await h.new_session()
    grant = await h.start_turn(sid, "t1")
    await h.append(sid, "t1", grant.token, *pause_events("int_1", "t1"), pause=paused_at("int_1", "t1"))
    await h.store.decide_checkpoint(ACME, sid, "int_1", b"approve")
    resume = await h.store.try_acquire(ACME, sid, "t1", TTL, Strategy.REJECT, resume="a")
    assert isinstance(resume, Acquired)
    await h.store.consume_checkpoint(ACME, sid, "int_1", resume.token, False)
    await h.append(sid, "t1", resume.token, status("resuming", turn_id="t1"), journal=[("answer", b"{}")])
    assert [r.kind for r in await h.store.journal(ACME, sid, "t1")] == ["request", "answer"]
    await h.lapse(TTL + 1)
    (claimed,) = await h.store.claim_orphans("runtime-b", 10, TTL)
    assert (claimed.turn_id, claimed.resume, claimed.last_seq, claimed.takeovers) == ("t1", "a", 4, 1)
    info = await h.store.interrupt_turn(ACME, sid, "t1", "cancel")
    assert info is not None and (info.turn_id, info.resume) == ("t1", "a"), "the resume lease answers for its turn"


async def test_a_resume_lease_is_its_own_holder(h: Harness) -> None:
    sid = await h.new_session()
    grant = await h.start_turn(sid, "t1")
    await h.append(sid, "t1", grant.token, *pause_events("int_1", "t1"), pause=paused_at("int_1", "t1"))
    first = await h.store.try_acquire(ACME, sid, "t1", TTL, Strategy.REJECT, resume="a")
    assert isinstance(first, Acquired)
    again = await h.store.try_acquire(ACME, sid, "t1", TTL, Strategy.REJECT, resume="a")
    assert isinstance(again, Acquired) and again.token == first.token, "a retried resume gets the same grant"
    for turn_id, resume in (("t1", "b"), ("t1", "")):  # another attempt, or the turn itself: refused
        with pytest.raises(LeaseHeld):
            await h.store.try_acquire(ACME, sid, turn_id, TTL, Strategy.REJECT, resume=resume)
    lease = (await h.store.lease_state(ACME, sid)).lease
    assert lease is not None and (lease.turn_id, lease.resume, lease.token) == ("t1", "a", first.token)
    assert (await h.store.get(ACME, sid)).active_turn_id == "t1"


# --------------------------------------------------------------------------- journals


async def test_journal_entries_are_recorded_in_order_at_the_logs_seq(h: Harness) -> None:
    sid = await h.new_session()
    grant = await h.start_turn(sid, "t1")
    await h.lapse(1)
    await h.append(
        sid, "t1", grant.token, status("running", turn_id="t1"), delta("x", "t1"), journal=[("start", b"s0")]
    )
    await h.lapse(1)
    await h.append(sid, "t1", grant.token, journal=[("model", b"s1")])  # an entry alone: at the log's end
    await h.append(sid, "t1", grant.token, status("tool", turn_id="t1"), journal=[("decide", b"s2"), ("tool", b"s3")])
    journal = await h.store.journal(ACME, sid, "t1")
    assert [(r.kind, r.state, r.seq) for r in journal] == [
        ("request", b"request of t1", 1),
        ("start", b"s0", 3),
        ("model", b"s1", 3),
        ("decide", b"s2", 4),
        ("tool", b"s3", 4),
    ]
    times = [r.recorded_at for r in journal]
    assert times == sorted(times) and times[0] < times[1] < times[2], "each entry records when it was written"
    assert await h.store.journal(ACME, sid, "never-ran") == []


async def test_journals_are_bounded_but_an_open_or_paused_turns_is_kept(h: Harness) -> None:
    sid = await h.new_session()
    grant = await h.start_turn(sid, "paused")
    await h.append(
        sid,
        "paused",
        grant.token,
        *pause_events("int_p", "paused"),
        journal=[("pause", b"p")],
        pause=paused_at("int_p", "paused"),
    )
    ended = [f"ended-{i}" for i in range(JOURNALS_KEPT + 2)]
    for turn in ended:  # turns that write while the paused one waits (the store does not refuse them)
        lease = await h.store.try_acquire(ACME, sid, turn, TTL, Strategy.REJECT)
        assert isinstance(lease, Acquired)
        await h.append(sid, turn, lease.token, final("ok", turn), journal=[("step", turn.encode())], release=True)
    lease = await h.store.try_acquire(ACME, sid, "open", TTL, Strategy.REJECT)
    assert isinstance(lease, Acquired)
    await h.append(sid, "open", lease.token, delta("x", "open"), journal=[("model", b"o")])

    async def kept(turn: str) -> bool:
        return bool(await h.store.journal(ACME, sid, turn))

    assert await kept("paused"), "the oldest journal, but its turn still waits for an answer"
    assert await kept("open")
    assert [t for t in ended if await kept(t)] == ended[-JOURNALS_KEPT:], f"the last {JOURNALS_KEPT} ended turns"
    if isinstance(h.store, RedisSessionStore):  # the count the hash keeps (so a turn reads no ZCARD) is right
        keys = dict(zip(SESSION_KEYS, h.store._keys(sid), strict=False))
        assert int(await h.store._redis.hget(keys["s"], "jtn")) == await h.store._redis.zcard(keys["jt"])


# --------------------------------------------------------------------------- orphans and takeovers


async def test_a_look_for_orphans_says_when_no_turn_is_open_at_all(h: Harness) -> None:
    """An idle runtime waits a whole lease TTL after a look that found no open turn (none can come due sooner),
    so the store must never say so while a turn is open, due or not."""
    first = await h.store.claim_orphans("runtime-b", 10, TTL)
    assert first == [] and first.none_open, "nothing was ever opened"
    sid = await h.new_session()
    grant = await h.start_turn(sid, "t1")
    looked = await h.store.claim_orphans("runtime-b", 10, TTL)
    assert looked == [] and not looked.none_open, "an open turn whose lease is live"
    await h.lapse(TTL + 1)
    (claimed,) = await h.store.claim_orphans("runtime-b", 10, TTL)
    assert claimed.session_id == sid
    await h.append(sid, "t1", claimed.token, final("done", "t1"), release=True)
    await h.lapse(TTL + 1)
    looks = [await h.store.claim_orphans("runtime-b", 10, TTL) for _ in range(2)]  # the first may drop the entry
    assert looks == [[], []] and looks[-1].none_open, "the turn ended: nothing is open"
    assert grant.token < claimed.token


async def test_an_open_turns_expired_lease_waits_for_a_takeover(h: Harness) -> None:
    sid = await h.new_session()
    grant = await h.start_turn(sid, "t1")
    await h.append(sid, "t1", grant.token, delta("half an answer", "t1"))
    await h.lapse(TTL + 1)  # its runtime stopped renewing

    with pytest.raises(LeaseHeld) as held:
        await h.store.try_acquire(ACME, sid, "t2", TTL, Strategy.REJECT, opening("t2"))
    assert held.value.turn_id == "t1"
    queued = await h.store.try_acquire(ACME, sid, "t3", TTL, Strategy.ENQUEUE)
    assert isinstance(queued, Queued) and queued.holder_turn_id == "t1"
    assert (await h.store.get(ACME, sid)).active_turn_id == "t1"
    # Until someone claims it, its runtime may still write (it was only slow).
    assert (await h.append(sid, "t1", grant.token, delta(" and a bit", "t1"))).last_seq == 3

    (claimed,) = await h.store.claim_orphans("10.0.0.2:50052", 10, TTL)
    assert (claimed.tenant_id, claimed.session_id, claimed.turn_id) == (ACME, sid, "t1")
    assert (claimed.takeovers, claimed.last_seq) == (1, 3)
    assert claimed.token > grant.token
    with pytest.raises(StaleLease):
        await h.append(sid, "t1", grant.token, delta("from the old runtime", "t1"))
    with pytest.raises(StaleLease):
        await h.store.renew_lease(ACME, sid, grant.token, TTL)
    with pytest.raises(LeaseHeld):  # still not free: the new holder runs it
        await h.store.try_acquire(ACME, sid, "t2", TTL, Strategy.REJECT)
    state = await h.store.lease_state(ACME, sid)
    assert state.lease is not None
    # The claimer is its holder once it runs the turn: its first write names it (a claim alone does not).
    assert (state.lease.token, state.lease.holder, state.lease.takeovers) == (claimed.token, "", 1)
    await h.append(sid, "t1", claimed.token, delta(" taken over", "t1"), holder="10.0.0.2:50052")
    assert (await h.store.lease_state(ACME, sid)).lease.holder == "10.0.0.2:50052"  # type: ignore[union-attr]
    await h.append(sid, "t1", claimed.token, final("whole answer", "t1"), release=True)
    assert isinstance(await h.store.try_acquire(ACME, sid, "t3", TTL, Strategy.ENQUEUE), Acquired), "the waiter's turn"


async def test_a_claim_names_the_replica_that_last_wrote_the_turn(h: Harness) -> None:
    """The runtime's first append records it as the holder, so a replica that claims the lapsed lease can
    ask it whether it still runs the turn (RuntimeService.AdoptTurn) before redoing a step (issue 31)."""
    sid = await h.new_session()
    grant = await h.start_turn(sid, "t1")
    await h.append(sid, "t1", grant.token, delta("half", "t1"), holder="10.0.0.1:50052")
    await h.append(sid, "t1", grant.token, delta(" an answer", "t1"))  # "" keeps the holder
    assert (await h.store.lease_state(ACME, sid)).lease.holder == "10.0.0.1:50052"  # type: ignore[union-attr]
    await h.lapse(TTL + 1)
    (claimed,) = await h.store.claim_orphans("10.0.0.2:50052", 10, TTL)
    assert claimed.previous_holder == "10.0.0.1:50052"
    assert claimed.interrupt_requested_by == "", "nobody asked it to stop"
    # The first replica goes on under the new token and says so with its next append.
    await h.append(sid, "t1", claimed.token, delta(" and more", "t1"), holder="10.0.0.1:50052")
    assert (await h.store.lease_state(ACME, sid)).lease.holder == "10.0.0.1:50052"  # type: ignore[union-attr]


async def test_a_claim_that_runs_nothing_leaves_the_next_claimer_asking_the_last_runtime(h: Harness) -> None:
    """A claimer that got no clear answer from the turn's runtime (it was too busy to answer AdoptTurn in
    time) lets its claim lapse; the next claim must still name that runtime, not the claimer, or the turn
    would be taken over while its runtime still runs it (issue 32, item 6)."""
    sid = await h.new_session()
    grant = await h.start_turn(sid, "t1")
    await h.append(sid, "t1", grant.token, delta("half", "t1"), holder="10.0.0.1:50052")
    await h.lapse(TTL + 1)
    (first,) = await h.store.claim_orphans("10.0.0.2:50052", 10, TTL)
    assert first.previous_holder == "10.0.0.1:50052"
    await h.lapse(TTL + 1)  # the first claimer decided nothing
    (second,) = await h.store.claim_orphans("10.0.0.3:50052", 10, TTL)
    assert (second.previous_holder, second.takeovers) == ("10.0.0.1:50052", 2)
    assert second.token > first.token


async def test_a_claim_says_the_turn_was_asked_to_stop_while_nobody_ran_it(h: Harness) -> None:
    """CancelTurn whose runtime is gone records the interrupt on the lease; whoever claims the turn ends it
    as cancelled instead of going on (issue 31: CancelTurn always frees the session)."""
    sid = await h.new_session()
    grant = await h.start_turn(sid, "t1")
    await h.append(sid, "t1", grant.token, delta("half", "t1"), holder="10.0.0.1:50052")
    await h.lapse(TTL + 1)  # its runtime died
    assert await h.store.interrupt_turn(ACME, sid, "t1", "cancel") is not None
    (claimed,) = await h.store.claim_orphans("10.0.0.2:50052", 10, TTL)
    assert (claimed.turn_id, claimed.interrupt_requested_by) == ("t1", "cancel")


async def test_claims_take_only_expired_open_turns_and_respect_the_limit(h: Harness) -> None:
    async def turn_in(state: str) -> str:
        sid = await h.new_session()
        if state == "not opened":  # a lease taken without an opening and never written under
            assert isinstance(await h.store.try_acquire(ACME, sid, "t", TTL, Strategy.REJECT), Acquired)
            return sid
        grant = await h.start_turn(sid, "t")
        if state == "ended":
            await h.append(sid, "t", grant.token, final("ok", "t"), release=True)
        elif state == "paused":
            await h.append(sid, "t", grant.token, *pause_events("int_1", "t"), pause=paused_at("int_1", "t"))
        elif state == "released":
            assert await h.store.release_lease(ACME, sid, grant.token)
        return sid

    others = [await turn_in(s) for s in ("not opened", "ended", "paused", "released")]
    orphans = {await turn_in("open") for _ in range(3)}
    assert await h.store.claim_orphans("runtime-b", 10, TTL) == [], "no lease has expired yet"
    deleted = await turn_in("open")
    await h.lapse(TTL + 1)
    assert await h.store.delete(ACME, deleted)
    late = await turn_in("open")  # opened after the lapse: its lease is still good

    first = await h.store.claim_orphans("runtime-b", 2, TTL)
    second = await h.store.claim_orphans("runtime-c", 2, TTL)
    assert (len(first), len(second)) == (2, 1)
    assert {c.session_id for c in first + second} == orphans
    assert all(c.takeovers == 1 for c in first + second)
    assert await h.store.claim_orphans("runtime-c", 10, TTL) == [], "claimed leases run for their new ttl"
    for sid in others:
        assert (await h.store.lease_state(ACME, sid)).lease is None, "not opened or over: simply free"

    await h.lapse(TTL + 1)  # the claimers stopped too: the turns are claimed again, with a count
    again = await h.store.claim_orphans("runtime-d", 10, TTL)
    assert {c.session_id for c in again} == orphans | {late}
    assert {c.session_id: c.takeovers for c in again} == {sid: 2 for sid in orphans} | {late: 1}


async def test_a_session_that_expired_has_no_orphans_to_claim(make_harness: MakeHarness) -> None:
    h = await make_harness(session_ttl_s=3 * TTL)
    sid = await h.new_session()
    await h.start_turn(sid, "t1")
    # Nobody took the turn over (no runtime was up) and the session idled out: its TTL past the lease's end.
    await h.lapse(5 * TTL)
    assert await h.store.claim_orphans("runtime-b", 10, TTL) == []
    with pytest.raises(SessionNotFound):
        await h.store.get(ACME, sid)


async def test_renewals_say_which_leases_are_still_held(h: Harness) -> None:
    held_sid, lost_sid, foreign_sid = await h.new_session(), await h.new_session(), await h.new_session(GLOBEX)
    held = await h.start_turn(held_sid, "t1")
    lost = await h.start_turn(lost_sid, "t2")
    await h.lapse(TTL + 1)
    await h.store.claim_orphans("runtime-b", 10, TTL)  # takes both
    held_now = await h.store.lease_state(ACME, held_sid)
    assert held_now.lease is not None

    renewed = await h.store.renew_leases(
        [
            Renewal(ACME, held_sid, held_now.lease.token, TTL, holder="10.0.0.2:50052"),
            Renewal(ACME, lost_sid, lost.token, TTL, holder="10.0.0.1:50052"),  # the stale token of the stopped one
            Renewal(ACME, foreign_sid, 1, TTL),
            Renewal(ACME, "no-such-session", 1, TTL),
        ]
    )
    assert [(r.session_id, r.held) for r in renewed] == [
        (held_sid, True),
        (lost_sid, False),
        (foreign_sid, False),
        ("no-such-session", False),
    ]
    # Renewed for TTL from now (the Redis store's clock still ticks between the calls, by milliseconds).
    assert 0 <= renewed[0].expires_at - held_now.lease.expires_at < TTL / 2
    state = await h.store.lease_state(ACME, held_sid)
    assert state.lease is not None and state.lease.holder == "10.0.0.2:50052"
    await h.store.renew_leases([Renewal(ACME, held_sid, state.lease.token, TTL)])  # no holder: the recorded one stays
    state = await h.store.lease_state(ACME, held_sid)
    assert state.lease is not None and state.lease.holder == "10.0.0.2:50052"
    assert held.token < state.lease.token


async def test_a_renewal_keeps_an_open_turn_from_being_claimed(h: Harness) -> None:
    sid = await h.new_session()
    grant = await h.start_turn(sid, "t1")
    for _ in range(3):
        await h.lapse(TTL * 0.6)
        (renewed,) = await h.store.renew_leases([Renewal(ACME, sid, grant.token, TTL, holder="runtime-a")])
        assert renewed.held
        assert await h.store.claim_orphans("runtime-b", 10, TTL) == []


async def test_hand_over_expires_the_lease_at_once_and_keeps_the_turn_open(h: Harness) -> None:
    sid = await h.new_session()
    grant = await h.start_turn(sid, "t1")
    await h.store.renew_leases([Renewal(ACME, sid, grant.token, TTL, holder="runtime-a")])
    (handed,) = await h.store.renew_leases([Renewal(ACME, sid, grant.token, TTL, hand_over=True)])
    assert handed.held
    with pytest.raises(LeaseHeld):
        await h.store.try_acquire(ACME, sid, "t2", TTL, Strategy.REJECT)
    (claimed,) = await h.store.claim_orphans("runtime-b", 10, TTL)  # at once: no time passed
    assert (claimed.turn_id, claimed.takeovers, claimed.previous_holder) == ("t1", 1, ""), "nobody to ask"
    state = await h.store.lease_state(ACME, sid)
    # The claimer becomes the holder with its first write or renewal (a claim alone names nobody).
    assert state.lease is not None and state.lease.holder == ""
    await h.store.renew_leases([Renewal(ACME, sid, claimed.token, TTL, holder="runtime-b")])
    assert (await h.store.lease_state(ACME, sid)).lease.holder == "runtime-b"  # type: ignore[union-attr]


async def test_interrupt_turn_asks_the_holder_to_stop(h: Harness) -> None:
    sid = await h.new_session()
    assert await h.store.interrupt_turn(ACME, sid, "", "cancel") is None, "no turn holds the lease"
    grant = await h.start_turn(sid, "t1")
    await h.store.renew_leases([Renewal(ACME, sid, grant.token, TTL, holder="10.0.0.1:50052")])
    assert await h.store.interrupt_turn(ACME, sid, "other-turn", "cancel") is None
    info = await h.store.interrupt_turn(ACME, sid, "t1", "user-7")
    assert info is not None
    assert (info.turn_id, info.token, info.interrupt_requested_by, info.holder) == (
        "t1",
        grant.token,
        "user-7",
        "10.0.0.1:50052",
    )
    later = await h.store.interrupt_turn(ACME, sid, "", "user-8")
    assert later is not None and later.interrupt_requested_by == "user-7", "the first request stands"
    (renewed,) = await h.store.renew_leases([Renewal(ACME, sid, grant.token, TTL)])
    assert renewed.interrupt_requested_by == "user-7"
    assert (await h.store.renew_lease(ACME, sid, grant.token, TTL)).interrupt_requested_by == "user-7"


async def test_a_turn_waiting_for_a_takeover_does_not_make_a_queued_turn_spin(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = await h.new_session()
    grant = await h.start_turn(sid, "t1")
    await h.store.renew_leases([Renewal(ACME, sid, grant.token, TTL, hand_over=True)])  # no replica claimed it yet
    waits: list[float] = []

    class Stop(Exception):
        pass

    async def first_wait(session_id: str, timeout_s: float) -> None:
        waits.append(timeout_s)
        raise Stop

    monkeypatch.setattr(h.store, "wait_for_change", first_wait)
    with pytest.raises(Stop):
        await leases.acquire(h.store, ACME, sid, "t2", TTL, Strategy.ENQUEUE, 60.0)
    assert waits[0] >= leases.POLL_S / 2, f"the waiter polls again after {waits[0]:.3f}s"


# --------------------------------------------------------------------------- reading the log


async def test_follow_replays_then_tails_with_heartbeats(h: Harness) -> None:
    sid = await h.new_session()
    grant = await h.start_turn(sid, "t1")
    await h.append(sid, "t1", grant.token, delta("a", "t1"), delta("b", "t1"))
    got: asyncio.Queue[list[events_pb2.RuntimeEvent] | None] = asyncio.Queue()

    async def follow() -> None:
        async for batch in h.store.read_events(ACME, sid, 1, True, 0.01):
            got.put_nowait(list(batch) if batch is not None else None)

    async def next_events() -> list[events_pb2.RuntimeEvent]:
        while True:
            batch = await asyncio.wait_for(got.get(), 10)
            if batch is not None:
                return batch

    reader = asyncio.create_task(follow())
    try:
        assert seqs(await next_events()) == [2, 3], "the replay after the cursor"
        while await asyncio.wait_for(got.get(), 10) is not None:
            pass  # a heartbeat (None) comes while nothing is appended
        await h.append(sid, "t1", grant.token, delta("c", "t1"))
        await h.append(sid, "t1", grant.token, final("abc", "t1"), release=True)
        tailed: list[events_pb2.RuntimeEvent] = []
        while len(tailed) < 2:
            tailed += await next_events()
        assert seqs(tailed) == [4, 5] and tailed[-1].final.text == "abc"
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader


@pytest.mark.parametrize("follow", [False, True])
async def test_cursors_older_than_retention_or_ahead_of_the_log_are_refused(
    make_harness: MakeHarness, follow: bool
) -> None:
    h = await make_harness(event_retention=4)
    sid = await h.new_session()
    grant = await h.start_turn(sid, "t1")
    for i in range(9):
        await h.append(sid, "t1", grant.token, delta(str(i), "t1"))
    state = await h.store.log_state(ACME, sid)
    assert state.last_seq == 10 and 1 < state.first_seq <= 10 - 3, "at least the last `retention` are kept"

    with pytest.raises(OutOfRange) as expired:
        async for _ in h.store.read_events(ACME, sid, state.first_seq - 2, follow, 60.0):
            pass
    assert code_of(expired.value) == grpc.StatusCode.OUT_OF_RANGE
    assert expired.value.reason == errors_pb2.ERROR_REASON_CURSOR_EXPIRED
    assert expired.value.metadata["oldest_seq"] == str(state.first_seq)
    with pytest.raises(InvalidArgument) as ahead:
        async for _ in h.store.read_events(ACME, sid, 11, follow, 60.0):
            pass
    assert [name for name, _ in ahead.value.violations] == ["after_seq"]
    if not follow:
        assert seqs(await h.log(sid, state.first_seq - 1)) == list(range(state.first_seq, 11))


async def test_a_deleted_session_ends_its_readers_and_refuses_appends(h: Harness) -> None:
    sid = await h.new_session()
    grant = await h.start_turn(sid, "t1")
    reading = asyncio.Event()

    async def follow() -> None:
        async for _ in h.store.read_events(ACME, sid, 0, True, 60.0):
            reading.set()

    reader = asyncio.create_task(follow())
    await asyncio.wait_for(reading.wait(), 10)
    assert await h.store.delete(ACME, sid)
    with pytest.raises(NotFound) as gone:
        await asyncio.wait_for(reader, 10)
    assert gone.value.reason == errors_pb2.ERROR_REASON_SESSION_NOT_FOUND

    calls: list[Awaitable[object]] = [
        h.append(sid, "t1", grant.token, delta("late", "t1")),
        h.log(sid),
        h.store.log_state(ACME, sid),
        h.store.journal(ACME, sid, "t1"),
        h.store.interrupt_turn(ACME, sid, "", "cancel"),
    ]
    for call in calls:
        with pytest.raises((SessionNotFound, NotFound)) as refused:
            await call
        assert code_of(refused.value) == grpc.StatusCode.NOT_FOUND
    (renewed,) = await h.store.renew_leases([Renewal(ACME, sid, grant.token, TTL)])
    assert not renewed.held


async def test_another_tenants_session_is_not_found_by_the_log_api(h: Harness) -> None:
    sid = await h.new_session()
    grant = await h.start_turn(sid, "t1")
    foreign: list[Awaitable[object]] = [
        h.store.append_events(GLOBEX, sid, NewEvents("t1", grant.token, [delta("x", "t1")])),
        h.store.try_acquire(GLOBEX, sid, "t2", TTL, Strategy.ENQUEUE, opening("t2")),
        h.store.log_state(GLOBEX, sid),
        h.store.journal(GLOBEX, sid, "t1"),
        h.store.interrupt_turn(GLOBEX, sid, "", "cancel"),
    ]
    for call in foreign:
        with pytest.raises(SessionNotFound):
            await call
    with pytest.raises(SessionNotFound):
        async for _ in h.store.read_events(GLOBEX, sid, 0, False, 60.0):
            pass
    (renewed,) = await h.store.renew_leases([Renewal(GLOBEX, sid, grant.token, TTL)])
    assert not renewed.held
    await logged_nothing(h, sid, 1, "t2", 0)
    lease = (await h.store.lease_state(ACME, sid)).lease
    assert lease is not None and lease.interrupt_requested_by == ""


async def test_log_state_says_where_the_log_stands(h: Harness) -> None:
    sid = await h.new_session()

    async def state() -> tuple[int, int, bool]:
        s = await h.store.log_state(ACME, sid)
        return s.first_seq, s.last_seq, s.ends_with_turn_end

    assert await state() == (1, 0, True), "empty"
    grant = await h.start_turn(sid, "t1")
    assert await state() == (1, 1, False)
    await h.append(sid, "t1", grant.token, final("ok", "t1"), release=True)
    assert await state() == (1, 2, True)
    grant = await h.start_turn(sid, "t2")
    await h.append(sid, "t2", grant.token, failure("boom", "t2"), release=True)
    assert await state() == (1, 4, True), "an error ends a turn too"
    grant = await h.start_turn(sid, "t3")
    await h.append(sid, "t3", grant.token, *pause_events("int_3", "t3"), pause=paused_at("int_3", "t3"))
    assert await state() == (1, 7, False), "a pause does not"


# --------------------------------------------------------------------------- through the servicer


async def test_renew_turn_lease_hands_over_as_renew_turn_leases_does(h: Harness) -> None:
    sid = await h.new_session()
    grant = await h.start_turn(sid, "t1")
    renew = sessions_pb2.RenewTurnLeaseRequest(
        tenant_id=ACME, session_id=sid, lease_token=grant.token, holder="runtime-a", hand_over=True
    )
    await SessionsServicer(h.store).RenewTurnLease(renew, None)
    assert [c.session_id for c in await h.store.claim_orphans("runtime-b", 10, TTL)] == [sid]


async def test_a_resume_lease_written_before_lease_resume_reads_back_typed(h: Harness) -> None:
    if not isinstance(h.store, RedisSessionStore):
        pytest.skip("the memory store keeps no leases across versions")
    sid = await h.new_session()
    grant = await h.start_turn(sid, "t1")
    await h.append(sid, "t1", grant.token, *pause_events("int_1", "t1"), pause=paused_at("int_1", "t1"))
    resume = await h.store.try_acquire(ACME, sid, "t1", TTL, Strategy.REJECT, resume="a")
    assert isinstance(resume, Acquired)
    # The previous version kept a resume's holder as text in lease_turn, and no lease_resume.
    session = h.store._keys(sid)[0]
    await h.store._redis.hset(session, "lease_turn", "t1:resume:a")
    await h.store._redis.hdel(session, "lease_resume")
    lease = (await h.store.lease_state(ACME, sid)).lease
    assert lease is not None and (lease.turn_id, lease.resume, lease.token) == ("t1", "a", resume.token)
    assert (await h.store.get(ACME, sid)).active_turn_id == "t1"


async def test_a_session_written_before_its_hash_kept_the_message_count_reports_it(h: Harness) -> None:
    if not isinstance(h.store, RedisSessionStore):
        pytest.skip("the memory store keeps no sessions across versions")
    sid = await h.new_session()
    grant = await h.start_turn(sid, "t1")
    end = await h.append(sid, "t1", grant.token, final("ok", "t1"), release=True, messages=[b"question", b"answer"])
    assert end.message_count == 2
    await h.store._redis.hdel(h.store._keys(sid)[0], "mc")  # the previous version kept no count in the hash
    grant = await h.start_turn(sid, "t2")
    step = await h.append(sid, "t2", grant.token, delta("a", "t2"))
    assert step.message_count == 2  # read from the list, as before
    end = await h.append(sid, "t2", grant.token, final("b", "t2"), release=True, messages=[b"q2", b"a2"])
    assert end.message_count == 4
    grant = await h.start_turn(sid, "t3")
    assert (await h.append(sid, "t3", grant.token, delta("c", "t3"))).message_count == 4  # from the hash again
    assert (await h.store.get(ACME, sid)).message_count == 4


async def test_a_session_written_before_its_hash_kept_the_queue_and_journal_marks_reads_them(h: Harness) -> None:
    """`nq` (no turn queued since the queue was last found empty) and `jtn` (the journal's turn count) spare a
    turn's start an EXISTS and a ZCARD; a session written without them reads the keys, then keeps the marks."""
    if not isinstance(h.store, RedisSessionStore):
        pytest.skip("the memory store keeps no sessions across versions")
    sid = await h.new_session()
    keys = dict(zip(SESSION_KEYS, h.store._keys(sid), strict=False))
    redis = h.store._redis
    await redis.hdel(keys["s"], "nq", "jtn")  # the previous version kept neither
    for turn in ("t1", "t2"):
        grant = await h.start_turn(sid, turn)
        await h.append(sid, turn, grant.token, final("ok", turn), journal=[("step", b"s")], release=True)
    assert int(await redis.hget(keys["s"], "jtn")) == await redis.zcard(keys["jt"]) == 2
    assert await redis.hget(keys["s"], "nq") == b"1"  # the queue was found empty: later grants skip it
    running = await h.start_turn(sid, "t3")
    queued = await h.store.try_acquire(ACME, sid, "t4", TTL, Strategy.ENQUEUE)
    assert not isinstance(queued, Acquired)
    assert await redis.hget(keys["s"], "nq") == b""  # a turn waits: grants look at the queue again
    await h.store.release_lease(ACME, sid, running.token)
    with pytest.raises(LeaseHeld):  # the waiter keeps its place
        await h.store.try_acquire(ACME, sid, "t5", TTL, Strategy.REJECT)
    assert isinstance(await h.store.try_acquire(ACME, sid, "t4", TTL, Strategy.ENQUEUE), Acquired)


async def test_an_append_refused_leaves_its_id_free_for_the_same_append_once_it_may_write(h: Harness) -> None:
    sid = await h.new_session()
    grant = await h.start_turn(sid, "t1")
    with pytest.raises(StaleLease):  # refused: nothing written, the id not taken
        await h.append(sid, "t1", grant.token + 1, delta("a", "t1"), append_id="t1:1")
    applied = await h.append(sid, "t1", grant.token, delta("a", "t1"), append_id="t1:1")
    assert (applied.last_seq, applied.duplicate) == (2, False)
    again = await h.append(sid, "t1", grant.token, delta("a", "t1"), append_id="t1:1")
    assert (again.last_seq, again.duplicate) == (2, True)
    assert [e.assistant_delta.text for e in await h.log(sid) if e.HasField("assistant_delta")] == ["a"]
