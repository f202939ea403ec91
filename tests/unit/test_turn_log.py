"""TurnLog, a running turn's one writer to the session's event log, against an in-process AppendEvents.

`FakeSessions` answers AppendEvents the way the sessions service does (seqs stamped in
order, journal entries recorded at the append's last seq, a retried append_id answered
as a duplicate), and can be told to fail with a status or to hang until released.
Time is the event loop's: tests that coalesce deltas move the loop's clock
(`LoopClock`) instead of sleeping, and nothing asserts how long anything took.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest

from cogmesh.common.v1 import events_pb2, messages_pb2
from cogmesh.sessions.v1 import sessions_pb2
from services.lib import journal_kinds as K
from services.lib.event_log import MAX_APPEND_BYTES, MAX_EVENTS_PER_APPEND
from services.runtime.journal import decode_state, encode_state, replay
from services.runtime.turn_log import DURABLE, HandedOver, TurnLog, TurnLost

TENANT, SESSION, TURN, TOKEN = "acme", "s1", "t1", 7
RECORDED_NOT_DURABLE = (K.START, K.COMPACTION, K.MODEL, K.STEP)  # redoing these after a crash has no effect outside


class FakeSessions:
    """SessionsService.AppendEvents in process: stamps, dedupes, fails or hangs on request."""

    def __init__(self) -> None:
        self.calls: list[tuple[sessions_pb2.AppendEventsRequest, bool]] = []  # as sent, with wait_for_ready
        self.stored: list[sessions_pb2.AppendEventsRequest] = []  # the appends applied, in order
        self.log: list[events_pb2.RuntimeEvent] = []  # stamped with their seq
        self.journal: list[sessions_pb2.JournalEntry] = []  # with their seq
        self.messages = 0
        self.fail_next: list[grpc.StatusCode] = []  # the next calls fail with these, one each
        self.fail_always: grpc.StatusCode | None = None
        self.lose_next_reply = False  # apply the next append, then answer UNAVAILABLE
        self.gate = asyncio.Event()  # cleared: calls hang until it is set
        self.gate.set()
        self._applied: dict[str, int] = {}
        self._changed = asyncio.Condition()

    async def AppendEvents(
        self,
        request: sessions_pb2.AppendEventsRequest,
        timeout: float | None = None,  # noqa: ASYNC109 - the gRPC stub's signature
        wait_for_ready: bool = False,
    ) -> sessions_pb2.AppendEventsResponse:
        sent = sessions_pb2.AppendEventsRequest()
        sent.CopyFrom(request)
        self.calls.append((sent, bool(wait_for_ready)))
        await self._notify()
        await self.gate.wait()
        if self.fail_next or self.fail_always is not None:
            raise rpc_error(self.fail_next.pop(0) if self.fail_next else self.fail_always)  # type: ignore[arg-type]
        if sent.append_id in self._applied:
            return sessions_pb2.AppendEventsResponse(
                last_seq=self._applied[sent.append_id], duplicate=True, message_count=self.messages
            )
        before = len(self.log)
        for event in sent.events:
            stamped = events_pb2.RuntimeEvent()
            stamped.CopyFrom(event)
            stamped.seq, stamped.session_id = len(self.log) + 1, sent.session_id
            self.log.append(stamped)
        for entry in sent.entries:  # where its step ended: after `position` of the append's events
            seq = before + min(entry.position, len(sent.events))
            self.journal.append(sessions_pb2.JournalEntry(kind=entry.kind, state=entry.state, seq=seq))
        self.messages += len(sent.messages)
        self._applied[sent.append_id] = len(self.log)
        self.stored.append(sent)
        await self._notify()
        if self.lose_next_reply:
            self.lose_next_reply = False
            raise rpc_error(grpc.StatusCode.UNAVAILABLE)
        return sessions_pb2.AppendEventsResponse(last_seq=len(self.log), message_count=self.messages)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def until(self, done: Callable[[], bool]) -> None:
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(done), 10)

    async def until_stored(self, count: int) -> None:
        await self.until(lambda: len(self.stored) >= count)


def rpc_error(code: grpc.StatusCode) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), f"the fake says {code.name}")


class LoopClock:
    """The running event loop's clock, moved forward by the test (timers due by then fire at once)."""

    def __init__(self, real: Callable[[], float]) -> None:
        self.real, self.offset = real, 0.0

    def time(self) -> float:
        return self.real() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds


@pytest.fixture
async def loop_clock(monkeypatch: pytest.MonkeyPatch) -> LoopClock:
    loop = asyncio.get_running_loop()
    clock = LoopClock(loop.time)
    monkeypatch.setattr(loop, "time", clock.time)
    return clock


@pytest.fixture
def sessions() -> FakeSessions:
    return FakeSessions()


MakeLog = Callable[..., TurnLog]


@pytest.fixture
async def make_log(sessions: FakeSessions) -> AsyncIterator[MakeLog]:
    made: list[TurnLog] = []

    def make(**options: Any) -> TurnLog:
        log = TurnLog(sessions, TENANT, SESSION, TURN, TOKEN, call_timeout_s=5.0, **options)
        made.append(log)
        return log

    yield make
    for log in made:
        await log.close()


async def idle() -> None:
    """Let every task that can go on do so (the writer takes a few loop iterations to send)."""
    for _ in range(50):
        await asyncio.sleep(0)


def status(text: str) -> events_pb2.RuntimeEvent:
    return events_pb2.RuntimeEvent(status=events_pb2.StatusUpdate(state=events_pb2.TURN_STATE_RUNNING, text=text))


def delta(text: str) -> events_pb2.RuntimeEvent:
    return events_pb2.RuntimeEvent(assistant_delta=events_pb2.AssistantDelta(text=text))


def final(text: str) -> events_pb2.RuntimeEvent:
    return events_pb2.RuntimeEvent(final=events_pb2.FinalResult(text=text))


def texts(request: sessions_pb2.AppendEventsRequest) -> list[str]:
    """What each event of an append says: its delta, status or final text."""
    out = []
    for event in request.events:
        kind = event.WhichOneof("payload")
        out.append(getattr(event, kind or "").text if kind in ("assistant_delta", "status", "final") else str(kind))
    return out


def kinds(requests: list[sessions_pb2.AppendEventsRequest]) -> list[str]:
    """The kinds of the entries sent, by name; each carries its enum and the same name."""
    entries = [entry for request in requests for entry in request.entries]
    assert all(entry.entry_kind == K.kind_named(entry.kind) != 0 for entry in entries), entries
    return [entry.kind for entry in entries]


def state(step: int, messages: list[str], new: list[str]) -> dict[str, Any]:
    """A loop state as the journal sees it: scalars, and the two lists that grow."""
    return {
        "v": 1,
        "iteration": step,
        "phase": "think",
        "messages": [{"role": "user", "content": m} for m in messages],
        "new_messages": [{"role": "assistant", "content": m} for m in new],
    }


# --------------------------------------------------------------------------- order and coalescing


async def test_everything_goes_out_in_order_under_the_turns_lease(sessions: FakeSessions, make_log: MakeLog) -> None:
    log = make_log()
    log.emit(status("running"))
    log.emit(delta("Hel"))
    await log.record(K.MODEL, state(1, ["q"], []))
    log.emit(status("tool"))
    await log.record(K.TOOL, state(1, ["q", "r"], ["r"]))
    question = messages_pb2.Message(role=messages_pb2.ROLE_USER, content="q")
    last_seq = await log.end([delta("lo"), final("Hello")], [question])

    assert [t for request in sessions.stored for t in texts(request)] == ["running", "Hel", "tool", "lo", "Hello"]
    assert kinds(sessions.stored) == ["model", "tool"]
    assert [e.seq for e in sessions.log] == [1, 2, 3, 4, 5] and last_seq == 5
    assert all(e.turn_id == TURN for e in sessions.log), "every event is marked with the turn"
    for request in sessions.stored:
        assert (request.tenant_id, request.session_id, request.turn_id, request.lease_token) == (
            TENANT,
            SESSION,
            TURN,
            TOKEN,
        )
    ids = [request.append_id for request in sessions.stored]
    assert len(set(ids)) == len(ids) and all(ids), "every append has an id of its own"
    assert [r.release_lease for r in sessions.stored] == [False] * (len(ids) - 1) + [True], "only the end frees it"


async def test_deltas_within_flush_s_wait_for_company(
    sessions: FakeSessions, make_log: MakeLog, loop_clock: LoopClock
) -> None:
    log = make_log(flush_s=3600.0)
    log.emit(delta("a"))  # the turn's first delta: nothing to wait for
    await sessions.until_stored(1)
    assert texts(sessions.stored[0]) == ["a"]

    log.emit(delta("b"))
    log.emit(delta("c"))
    await idle()
    assert len(sessions.calls) == 1, "deltas right after an append are held"
    log.emit(status("calling a tool"))  # anything else goes at once, with what is held
    await sessions.until_stored(2)
    assert texts(sessions.stored[1]) == ["b", "c", "calling a tool"]

    log.emit(delta("d"))  # a reply's first delta (after another event) goes at once: the first token
    await sessions.until_stored(3)
    assert texts(sessions.stored[2]) == ["d"]
    log.emit(delta("d2"))
    await idle()
    assert len(sessions.calls) == 3, "the reply's next deltas are held"
    loop_clock.advance(3600.0)  # the window ends: what is held goes by itself
    await sessions.until_stored(4)
    assert texts(sessions.stored[3]) == ["d2"]

    loop_clock.advance(3600.0)  # a quiet spell: the next delta goes at once
    log.emit(delta("e"))
    await sessions.until_stored(5)
    assert texts(sessions.stored[4]) == ["e"]

    log.emit(delta("f"))
    await log.record(K.MODEL, state(1, ["q"], []))  # no side effect follows this step: its record waits too
    await idle()
    assert len(sessions.calls) == 5, "a step's record without a side effect after it is held with the delta"
    loop_clock.advance(3600.0)
    await sessions.until_stored(6)
    assert (texts(sessions.stored[5]), kinds(sessions.stored[5:])) == (["f"], ["model"])

    log.emit(delta("g"))
    await idle()
    assert len(sessions.calls) == 6
    await log.end([final("abcdefg")])  # the end takes what is held with it
    assert texts(sessions.stored[6]) == ["g", "abcdefg"] and sessions.stored[6].release_lease


async def test_a_long_replys_window_widens_up_to_flush_max_s(
    sessions: FakeSessions, make_log: MakeLog, loop_clock: LoopClock
) -> None:
    """Issue 32 item 5: a reply streaming for seconds costs a few appends a second, not one per flush_s."""
    hour = 3600.0  # the unit of the test's clock, far above the real time the test takes
    log = make_log(flush_s=hour, flush_max_s=4 * hour)
    log.emit(delta("0"))  # the reply's first delta goes at once
    await sessions.until_stored(1)
    # After k appends of the reply, a delta waits flush_s * 2 ** (k // 4), at most flush_max_s.
    for k in range(1, 12):
        window = min(4, 2 ** (k // 4)) * hour
        log.emit(delta(str(k)))
        loop_clock.advance(window - hour / 2)
        await idle()
        assert len(sessions.calls) == k, f"after {k} appends the window is {window / hour:g} units: still held"
        loop_clock.advance(hour / 2)
        await sessions.until_stored(k + 1)
    log.emit(status("calling a tool"))  # the reply ended: the next one starts at flush_s again
    await sessions.until_stored(13)
    log.emit(delta("a"))
    await sessions.until_stored(14)
    log.emit(delta("b"))
    loop_clock.advance(hour)
    await sessions.until_stored(15)
    assert texts(sessions.stored[14]) == ["b"]


async def test_deltas_queued_while_an_append_is_out_wait_for_the_window_after_it(
    sessions: FakeSessions, make_log: MakeLog, loop_clock: LoopClock
) -> None:
    """On a slow store the window still counts: appends do not go back to back with a delta or two each."""
    hour = 3600.0
    log = make_log(flush_s=hour)
    sessions.gate.clear()  # the store is slow: the first append stays out
    log.emit(delta("a"))
    await sessions.until(lambda: len(sessions.calls) == 1)
    loop_clock.advance(2 * hour)  # longer than a window since the last append ended
    log.emit(delta("b"))
    log.emit(delta("c"))
    sessions.gate.set()
    await sessions.until_stored(1)
    await idle()
    assert len(sessions.calls) == 1, "deltas queued while an append was out wait for the window after it"
    loop_clock.advance(hour)
    await sessions.until_stored(2)
    assert texts(sessions.stored[1]) == ["b", "c"]


def usage() -> events_pb2.RuntimeEvent:
    return events_pb2.RuntimeEvent(usage=events_pb2.UsageReport(input_tokens=3, output_tokens=5))


async def test_a_steps_usage_rides_with_the_next_append(
    sessions: FakeSessions, make_log: MakeLog, loop_clock: LoopClock
) -> None:
    log = make_log(flush_s=3600.0)
    log.emit(usage())
    loop_clock.advance(2 * 3600.0)
    await idle()
    assert sessions.calls == [], "a usage report alone is not an append"
    log.emit(status("calling a tool"))  # what follows it goes at once, with it
    await sessions.until_stored(1)
    assert texts(sessions.stored[0]) == ["usage", "calling a tool"]

    log.emit(delta("a"))
    await sessions.until_stored(2)
    log.emit(delta("b"))
    log.emit(usage())
    await idle()
    assert len(sessions.calls) == 2
    await log.end([final("ab")])  # the reply's last delta, its usage and the end: one append
    assert texts(sessions.stored[2]) == ["b", "usage", "ab"] and len(sessions.stored) == 3


# --------------------------------------------------------------------------- the journal


@pytest.mark.parametrize("kind", sorted(DURABLE), ids=K.kind_name)
async def test_a_step_followed_by_side_effects_is_stored_before_record_returns(
    sessions: FakeSessions, make_log: MakeLog, kind: K.Kind
) -> None:
    log = make_log()
    sessions.gate.clear()
    recording = asyncio.create_task(log.record_raw(kind, b"{}"))
    await sessions.until(lambda: len(sessions.calls) == 1)
    await idle()
    assert not recording.done(), f"{kind!r} returned before its entry was stored"
    sessions.gate.set()
    await asyncio.wait_for(recording, 10)
    assert kinds(sessions.stored) == [K.kind_name(kind)]


@pytest.mark.parametrize("kind", RECORDED_NOT_DURABLE, ids=K.kind_name)
async def test_a_step_without_side_effects_returns_at_once_and_goes_with_the_next_append(
    sessions: FakeSessions, make_log: MakeLog, kind: K.Kind
) -> None:
    log = make_log()
    sessions.gate.clear()  # nothing can be stored
    log.emit(status("step"))
    await sessions.until(lambda: len(sessions.calls) == 1)  # the event's append went out, and hangs
    recorded = asyncio.create_task(log.record(kind, state(1, ["q"], [])))
    await idle()
    assert recorded.done(), f"{kind!r} waited for its entry to be stored"
    log.emit(status("next step"))
    recording = asyncio.create_task(log.record(K.TOOL, state(1, ["q", "r"], ["r"])))
    sessions.gate.set()
    await asyncio.wait_for(recording, 10)
    assert [texts(r) for r in sessions.stored] == [["step"], ["next step"]]
    assert kinds(sessions.stored) == [K.kind_name(kind), "tool"], "in the order recorded"
    assert [len(r.entries) for r in sessions.stored] == [0, 2], "the record went with the next append"


@pytest.mark.parametrize("kind", RECORDED_NOT_DURABLE, ids=K.kind_name)
async def test_a_step_without_side_effects_is_never_an_append_of_its_own(
    sessions: FakeSessions, make_log: MakeLog, loop_clock: LoopClock, kind: K.Kind
) -> None:
    """Say a model that takes seconds to answer: its step's record waits for the first delta, not the window."""
    log = make_log(flush_s=0.05, flush_max_s=0.4)
    log.emit(status("thinking"))
    await sessions.until_stored(1)
    await log.record(kind, state(1, ["q"], []))
    loop_clock.advance(3600.0)  # every window is long over
    await idle()
    assert len(sessions.calls) == 1, "the record went alone"
    log.emit(delta("Hi"))
    await sessions.until_stored(2)
    assert (texts(sessions.stored[1]), kinds(sessions.stored)) == (["Hi"], [K.kind_name(kind)])


async def test_states_are_stored_as_deltas_of_the_growing_lists(sessions: FakeSessions, make_log: MakeLog) -> None:
    before = state(2, ["q0", "a0"], ["a0"])  # the last state of the run this one goes on from (a takeover)
    states = [
        state(3, ["q0", "a0", "q1"], ["a0", "q1"]),  # the transcript grows
        state(3, ["q0", "a0", "q1", "tool"], ["a0", "q1", "tool"]),
        state(4, ["summary", "tool"], ["a0", "q1", "tool"]),  # a compaction replaces the transcript
        state(4, ["summary"], ["a0", "q1", "tool", "a1"]),  # shrinks
    ]
    log = make_log(previous_state=before)
    for index, step in enumerate(states):
        await log.record(K.TOOL if index % 2 else K.MODEL, step)
    await log.end([final("done")])

    payloads = [json.loads(entry.state) for entry in sessions.journal]
    assert [(p["messages"]["keep"], len(p["messages"]["add"])) for p in payloads] == [(2, 1), (3, 1), (0, 2), (1, 0)]
    assert [(p["new_messages"]["keep"], len(p["new_messages"]["add"])) for p in payloads] == [
        (1, 1),
        (2, 1),
        (3, 0),
        (3, 1),
    ]
    previous: dict[str, Any] | None = before
    for entry, expected in zip(sessions.journal, states, strict=True):
        previous = decode_state(entry.state, previous)
        assert previous == expected
    with pytest.raises(ValueError, match="previous state that is missing"):
        decode_state(sessions.journal[0].state, None)  # a delta needs the state it continues
    whole = sessions_pb2.JournalEntry(kind="model", state=encode_state(before, None))
    assert replay([whole, *sessions.journal]).state == states[-1]


async def test_the_first_state_of_a_fresh_turn_is_stored_whole(sessions: FakeSessions, make_log: MakeLog) -> None:
    first = state(1, ["q"], [])
    log = make_log()
    await log.record(K.START, first)
    await log.end([final("ok")])
    assert decode_state(sessions.journal[0].state, None) == first
    assert replay(sessions.journal).state == first


# --------------------------------------------------------------------------- sessions away or refusing


async def test_an_append_is_resent_with_the_same_id_while_sessions_is_away(
    sessions: FakeSessions, make_log: MakeLog
) -> None:
    log = make_log(outage_s=60.0)
    sessions.fail_next = [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED]
    log.emit(status("running"))
    await log.record(K.TOOL, state(1, ["q"], []))
    assert len(sessions.calls) == 3 and len(sessions.stored) == 1
    sent = [request.SerializeToString(deterministic=True) for request, _ in sessions.calls]
    assert sent == [sent[0]] * 3, "the very same append, id included"
    assert [ready for _, ready in sessions.calls] == [False, True, True], "resends wait for sessions to be back"
    assert log.failure is None


async def test_a_resend_whose_first_try_landed_is_not_logged_twice(sessions: FakeSessions, make_log: MakeLog) -> None:
    log = make_log(outage_s=60.0)
    log.emit(status("one"))
    await sessions.until_stored(1)
    sessions.lose_next_reply = True
    log.emit(status("two"))
    log.emit(status("three"))
    await log.record(K.TOOL, state(1, ["q"], []))
    assert len(sessions.calls) == 3
    assert [(e.seq, e.status.text) for e in sessions.log] == [(1, "one"), (2, "two"), (3, "three")]
    assert kinds(sessions.stored) == ["tool"]


@pytest.mark.parametrize(
    "code", [grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INTERNAL]
)
async def test_a_refused_append_loses_the_turn_for_good(
    sessions: FakeSessions, make_log: MakeLog, code: grpc.StatusCode
) -> None:
    lost: list[TurnLost] = []
    log = make_log(on_lost=lost.append)
    sessions.fail_next = [code]
    with pytest.raises(TurnLost) as failed:
        await log.record(K.TOOL, state(1, ["q"], []))
    assert failed.value.retryable is False, "another replica holds the turn, or there is no turn to go on with"
    assert lost == [failed.value] and log.failure is failed.value
    calls = len(sessions.calls)
    assert calls == 1, "a refusal is not retried"
    log.emit(status("ignored"))
    for later in (log.record(K.MODEL, state(2, ["q"], [])), log.record_raw(K.ANSWER, b"{}"), log.end([final("x")])):
        with pytest.raises(TurnLost) as again:
            await later
        assert again.value is failed.value
    await idle()
    assert len(sessions.calls) == calls and sessions.stored == [], "nothing more is written"


@pytest.mark.parametrize("code", [grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED])
async def test_output_the_log_refuses_ends_the_turn_with_an_error_and_frees_the_lease(
    sessions: FakeSessions, make_log: MakeLog, code: grpc.StatusCode
) -> None:
    """Run again anywhere the turn would write the same: no takeover, it ends here (issue 31)."""
    lost: list[TurnLost] = []
    log = make_log(on_lost=lost.append)
    log.emit(status("before"))
    sessions.fail_next = [code]
    with pytest.raises(TurnLost) as failed:
        await log.record(K.TOOL, state(1, ["q"], []))
    assert failed.value.retryable is False and failed.value.refused
    assert lost == [failed.value]
    (ending,) = sessions.stored
    assert ending.release_lease and not ending.entries and not ending.messages
    (error,) = [e.error for e in ending.events]
    assert not error.retryable and error.kind == events_pb2.ERROR_KIND_INTERNAL
    assert "cannot be stored" in error.message and f"{code.name}: the fake says {code.name}" in error.message
    calls = len(sessions.calls)
    with pytest.raises(TurnLost):
        await log.end([final("x")])
    await idle()
    assert len(sessions.calls) == calls, "nothing more is written"


async def test_an_append_refused_under_a_token_the_log_since_replaced_is_resent_under_the_new_one(
    sessions: FakeSessions, make_log: MakeLog
) -> None:
    """The replica claimed its own lapsed lease back while an append was in flight (Running.adopt)."""
    log = make_log()
    sessions.gate.clear()  # the append waits at sessions ...
    recording = asyncio.create_task(log.record(K.TOOL, state(1, ["q"], [])))
    await idle()
    assert [call.lease_token for call, _ in sessions.calls] == [TOKEN]
    log.lease_token = TOKEN + 1  # ... while the lease changes hands, to this same replica
    sessions.fail_next = [grpc.StatusCode.FAILED_PRECONDITION]  # the old token is refused
    sessions.gate.set()
    await asyncio.wait_for(recording, 5)
    assert [call.lease_token for call, _ in sessions.calls] == [TOKEN, TOKEN + 1]
    assert [stored.lease_token for stored in sessions.stored] == [TOKEN + 1]
    assert log.failure is None and kinds(sessions.stored) == ["tool"]


async def test_a_lease_handed_back_by_its_claimer_keeps_the_turn_going(
    sessions: FakeSessions, make_log: MakeLog
) -> None:
    """Issue 31: a store outage let the lease lapse and another replica claimed it; it asks this one
    (AdoptTurn), which still runs the turn: a write refused meanwhile waits for the new token."""
    lost: list[TurnLost] = []
    log = make_log(on_lost=lost.append, adopt_grace_s=3600)
    log.named = True  # the lease names this replica (a renewal or an earlier append did): a claimer asks it
    sessions.fail_next = [grpc.StatusCode.FAILED_PRECONDITION]
    recording = asyncio.create_task(log.record(K.TOOL, state(1, ["q"], [])))
    await sessions.until(lambda: len(sessions.calls) == 1)
    await idle()
    assert not recording.done(), "the refused write waits for the claimer's answer"
    log.adopt(TOKEN + 5)
    await asyncio.wait_for(recording, 30)
    assert [call.lease_token for call, _ in sessions.calls] == [TOKEN, TOKEN + 5]
    assert log.failure is None and not lost and kinds(sessions.stored) == ["tool"]


async def test_a_copy_the_lease_never_named_gives_the_turn_up_at_once(
    sessions: FakeSessions, make_log: MakeLog
) -> None:
    """Issue 32 item 6: a runtime that read its StartTurn after the lease lapsed, which another replica
    claimed meanwhile without asking it (nothing had named it the holder), would wait for a hand-back
    nobody sends while its model call streams for nothing. It stops at its first refused write."""
    log = make_log(adopt_grace_s=3600, holder="10.0.0.1:50052")
    sessions.fail_next = [grpc.StatusCode.FAILED_PRECONDITION]
    with pytest.raises(TurnLost) as failed:
        await asyncio.wait_for(log.record(K.TOOL, state(1, ["q"], [])), 30)
    assert "taken over" in str(failed.value) and len(sessions.calls) == 1
    assert sessions.calls[0][0].holder == "10.0.0.1:50052" and not log.named, "its first write was refused"


async def test_a_write_that_names_the_replica_makes_it_wait_for_a_hand_back(
    sessions: FakeSessions, make_log: MakeLog
) -> None:
    log = make_log(adopt_grace_s=3600, holder="10.0.0.1:50052")
    await log.record(K.TOOL, state(1, ["q"], []))  # stored, saying who runs the turn
    assert log.named
    sessions.fail_next = [grpc.StatusCode.FAILED_PRECONDITION]
    recording = asyncio.create_task(log.record(K.TOOL, state(2, ["q", "r"], [])))
    await sessions.until(lambda: len(sessions.calls) == 2)
    await idle()
    assert not recording.done(), "a claimer will ask this replica: the refused write waits"
    log.adopt(TOKEN + 1)
    await asyncio.wait_for(recording, 30)
    assert log.failure is None


async def test_a_lease_nobody_hands_back_within_the_grace_loses_the_turn(
    sessions: FakeSessions, make_log: MakeLog
) -> None:
    log = make_log(adopt_grace_s=0.01)
    log.named = True
    sessions.fail_next = [grpc.StatusCode.FAILED_PRECONDITION]
    with pytest.raises(TurnLost) as failed:
        await log.record(K.TOOL, state(1, ["q"], []))
    assert "taken over" in str(failed.value) and len(sessions.calls) == 1


async def test_a_failure_behind_a_record_that_did_not_wait_reaches_the_next_one(
    sessions: FakeSessions, make_log: MakeLog
) -> None:
    lost: list[TurnLost] = []
    log = make_log(on_lost=lost.append)
    sessions.fail_next = [grpc.StatusCode.FAILED_PRECONDITION]
    await log.record(K.MODEL, state(1, ["q"], []))  # returns before its append is refused
    log.emit(status("next step"))  # the append that takes it
    await sessions.until(lambda: len(sessions.calls) == 1)
    await idle()
    assert len(lost) == 1
    with pytest.raises(TurnLost):
        await log.record(K.TOOL, state(1, ["q", "r"], []))


async def test_sessions_away_longer_than_outage_s_loses_the_turn_for_another_replica(
    sessions: FakeSessions, make_log: MakeLog
) -> None:
    lost: list[TurnLost] = []
    log = make_log(outage_s=0.3, on_lost=lost.append)
    sessions.fail_always = grpc.StatusCode.UNAVAILABLE
    with pytest.raises(TurnLost) as failed:
        await asyncio.wait_for(log.record(K.TOOL, state(1, ["q"], [])), 30)
    assert failed.value.retryable is True, "the turn is taken over once sessions is back"
    assert lost == [failed.value]
    assert len(sessions.calls) >= 2 and len({request.append_id for request, _ in sessions.calls}) == 1


# --------------------------------------------------------------------------- the end, a pause, a hand-over


async def test_the_end_frees_the_lease_with_the_turns_messages(sessions: FakeSessions, make_log: MakeLog) -> None:
    log = make_log()
    said = [
        messages_pb2.Message(role=messages_pb2.ROLE_USER, content="what is 2 + 2?"),
        messages_pb2.Message(role=messages_pb2.ROLE_ASSISTANT, content="4"),
    ]
    last_seq = await log.end([final("4")], said)
    (end,) = sessions.stored
    assert (end.release_lease, end.HasField("pause"), list(end.messages)) == (True, False, said)
    assert texts(end) == ["4"] and last_seq == 1 and log.message_count == 2


async def test_a_pause_keeps_the_turn_and_stores_what_it_waits_for(sessions: FakeSessions, make_log: MakeLog) -> None:
    log = make_log()
    approval = events_pb2.ApprovalRequired(action_name="calculator", interrupt_id="int_1", correlation_id="c0")
    paused = status("waiting for approval")
    paused.status.state = events_pb2.TURN_STATE_PAUSED
    await log.record(K.PAUSE, state(1, ["q"], []))
    checkpoint = sessions_pb2.Checkpoint(interrupt_id="int_1", turn_id=TURN, approval=approval)
    await log.end([events_pb2.RuntimeEvent(approval_required=approval), paused], pause=checkpoint)
    end = sessions.stored[-1]
    assert (end.release_lease, end.pause, list(end.messages)) == (False, checkpoint, [])
    assert [e.WhichOneof("payload") for e in end.events] == ["approval_required", "status"]
    assert kinds(sessions.stored) == ["pause"]


async def test_handing_over_stops_the_turn_once_its_step_is_stored(sessions: FakeSessions, make_log: MakeLog) -> None:
    log = make_log()
    log.emit(status("running"))
    log.handing_over = True
    with pytest.raises(HandedOver):
        await log.record(K.MODEL, state(1, ["q"], []))  # even a step that would not wait
    assert kinds(sessions.stored) == ["model"], "stored before the turn stopped"
    assert log.failure is None, "not lost: another replica goes on from that step"


async def test_without_step_records_only_a_pause_is_journaled_as_a_delta_of_what_was_stored(
    sessions: FakeSessions, make_log: MakeLog
) -> None:
    """COGMESH_JOURNAL_STEPS=false (bench.journal's baseline): steps are not recorded, a pause still is,
    whole, since no state before it was stored."""
    log = make_log(record_steps=False)
    for kind in (K.START, K.MODEL, K.DECIDE, K.TOOL, K.STEP):
        await log.record(kind, state(1, ["q"], []))
    await log.record(K.PAUSE, state(2, ["q", "a"], ["a"]))
    await idle()
    assert kinds(sessions.stored) == ["pause"]
    assert replay(sessions.journal).state == state(2, ["q", "a"], ["a"])


async def test_events_emitted_after_a_record_come_after_its_seq(sessions: FakeSessions, make_log: MakeLog) -> None:
    log = make_log()
    log.emit(status("thinking"))
    await log.record(K.MODEL, state(1, ["q"], []))
    log.emit(status("deciding on the calls"))  # the next step's first event, before it awaits anything
    await log.end([final("ok")])
    (model,) = [entry for entry in sessions.journal if entry.kind == "model"]
    seq_of = {e.status.text: e.seq for e in sessions.log if e.HasField("status")}
    assert seq_of["thinking"] <= model.seq < seq_of["deciding on the calls"]


async def test_a_backlog_over_one_appends_cap_goes_in_several(sessions: FakeSessions, make_log: MakeLog) -> None:
    # Under load an append can take long enough for a long reply to queue more events than one
    # AppendEvents may carry (MAX_EVENTS_PER_APPEND): they go in several appends, none refused.
    log = make_log()
    sessions.gate.clear()
    log.emit(status("running"))
    await sessions.until(lambda: len(sessions.calls) == 1)  # the first append hangs; everything else queues
    for i in range(MAX_EVENTS_PER_APPEND):
        log.emit(delta(f"a{i} "))
    await log.record(K.MODEL, state(1, ["q"], []))  # recorded after the first cap's worth of deltas
    for i in range(MAX_EVENTS_PER_APPEND // 2):
        log.emit(delta(f"b{i} "))
    ending = asyncio.create_task(log.end([final("done")]))
    sessions.gate.set()
    last_seq = await ending

    assert all(len(request.events) <= MAX_EVENTS_PER_APPEND for request in sessions.stored)
    assert len(sessions.stored) >= 3
    sent = [t for request in sessions.stored for t in texts(request)]
    expected = ["running", *(f"a{i} " for i in range(MAX_EVENTS_PER_APPEND))]
    expected += [*(f"b{i} " for i in range(MAX_EVENTS_PER_APPEND // 2)), "done"]
    assert sent == expected and last_seq == len(expected)
    (model,) = sessions.journal
    assert model.seq == 1 + MAX_EVENTS_PER_APPEND, "the step's entry keeps its place among the events"
    assert sessions.stored[-1].release_lease and not any(r.release_lease for r in sessions.stored[:-1])


async def test_a_backlog_over_one_appends_bytes_goes_in_several(sessions: FakeSessions, make_log: MakeLog) -> None:
    # A few large events (tool results, long finals) behind a slow append would make one request over
    # gRPC's 4 MiB default, which the sessions server refuses: appends stay under MAX_APPEND_BYTES.
    log = make_log()
    sessions.gate.clear()
    log.emit(status("running"))
    await sessions.until(lambda: len(sessions.calls) == 1)
    big = 700_000  # under the 1 MiB a single event may be
    for i in range(6):
        log.emit(delta(f"a{i}" + "x" * big))
    await log.record(K.MODEL, state(1, ["y" * big], []))  # a large entry, after the sixth event
    for i in range(6):
        log.emit(delta(f"b{i}" + "x" * big))
    ending = asyncio.create_task(log.end([final("done")]))
    sessions.gate.set()
    last_seq = await ending

    assert all(request.ByteSize() <= MAX_APPEND_BYTES + 1024 for request in sessions.stored)  # + ids, lease
    sent = [t[:2] for request in sessions.stored for t in texts(request)]
    expected = ["ru", *(f"a{i}" for i in range(6)), *(f"b{i}" for i in range(6)), "do"]
    assert sent == expected and last_seq == len(expected)
    (model,) = sessions.journal
    assert model.seq == 7, "the step's entry keeps its place among the events"
    assert sessions.stored[-1].release_lease and not any(r.release_lease for r in sessions.stored[:-1])
