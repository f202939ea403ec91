"""Answering a paused turn in one store step (AnswerPause), and its resume's first append consuming the
checkpoint in the same write: one contract for every SessionStore (memory, and Redis standalone,
Sentinel and a 6-node cluster), on the harness of test_turn_log_contract.py (its clock moves on demand).

What the gateway and the runtime rely on: the first answer wins (the same one again is accepted, another
refused, one of the wrong kind refused before anything is written); the answer is recorded even when the
lease is busy, and the caller learns whether the holder resumes this very turn; the resume's lease comes
with the decided checkpoint and the turn's journal; the checkpoint is consumed exactly by the write that
records the resumed turn's first step, fenced by the resume's lease.
"""

from __future__ import annotations

import grpc
import pytest

from cogmesh.common.v1 import events_pb2
from cogmesh.sessions.v1 import sessions_pb2
from services.kit import validation
from services.kit.errors import CogmeshError, InvalidArgument, NotFound
from services.sessions.model import (
    Acquired,
    CheckpointConflict,
    CheckpointNotFound,
    InvalidValue,
    LeaseHeld,
    NewEvents,
    PauseAnswer,
    PauseAnswered,
    StaleLease,
    Strategy,
)
from services.sessions.servicer import SessionsServicer
from tests.contract.test_turn_log_contract import (
    ACME,
    TTL,
    Harness,
    MakeHarness,
    make_harness,  # noqa: F401 - the fixture: every store
    pause_events,
    paused_at,
    status,
)

APPROVE, REJECT = b"\x08\x01", b"\x08\x03"  # opaque to the store: bytes of a CheckpointDecision


@pytest.fixture
async def h(make_harness: MakeHarness) -> Harness:  # noqa: F811 - the imported fixture, used here
    return await make_harness()


async def paused_turn(h: Harness, turn_id: str = "t1", interrupt_id: str = "int_1") -> str:
    """A session whose turn `turn_id` paused for an approval (its journal: request, pause)."""
    sid = await h.new_session()
    grant = await h.start_turn(sid, turn_id)
    await h.append(
        sid,
        turn_id,
        grant.token,
        *pause_events(interrupt_id, turn_id),
        journal=[("pause", b'{"waiting":"approval"}')],
        pause=paused_at(interrupt_id, turn_id),
    )
    return sid


def answer(
    decision: bytes | None = APPROVE, attempt: str = "a", kind: str = "approval", abandon: bool = False
) -> PauseAnswer:
    return PauseAnswer("int_1", attempt, TTL, kind if decision is not None else "", decision, abandon)


async def consume(h: Harness, sid: str, token: int, interrupt_id: str = "int_1", append_id: str = "") -> object:
    """The resumed turn's first append: its answer's journal entry, taking the checkpoint in the same write."""
    new = NewEvents(
        "t1",
        token,
        [status("resuming", turn_id="t1")],
        [("answer", b"{}", 1)],
        append_id=append_id,
        consume_interrupt_id=interrupt_id,
    )
    return await h.store.append_events(ACME, sid, new)


async def test_an_answer_is_recorded_and_the_resume_lease_taken_with_the_turns_journal(h: Harness) -> None:
    sid = await paused_turn(h)
    answered = await h.store.answer_pause(ACME, sid, answer())
    assert isinstance(answered, PauseAnswered)
    checkpoint = answered.checkpoint
    assert (checkpoint.interrupt_id, checkpoint.turn_id, checkpoint.kind) == ("int_1", "t1", "approval")
    assert checkpoint.decision == APPROVE and checkpoint.decided_at > 0
    assert answered.start_seq == 3, "the log's last seq (accepted, approval_required, paused)"
    assert [r.kind for r in answered.journal] == ["request", "pause"]
    assert answered.journal[1].state == b'{"waiting":"approval"}'
    lease = (await h.store.lease_state(ACME, sid)).lease
    assert lease is not None and (lease.turn_id, lease.resume, lease.token) == ("t1", "a", answered.token)
    assert (await h.store.get_checkpoint(ACME, sid, "int_1")).decision == APPROVE
    assert (await h.store.get(ACME, sid)).pending_interrupt_ids == (), "answered: no longer pending"
    # A retry of the same attempt (its reply lost) gets the same grant; nothing more is written.
    again = await h.store.answer_pause(ACME, sid, answer())
    assert (again.token, again.start_seq, again.checkpoint.decision) == (answered.token, 3, APPROVE)


async def test_the_same_answer_again_is_accepted_and_follows_the_resume_under_way(h: Harness) -> None:
    sid = await paused_turn(h)
    first = await h.store.answer_pause(ACME, sid, answer(attempt="a"))
    with pytest.raises(LeaseHeld) as held:  # another attempt at the same moment: told to follow it
        await h.store.answer_pause(ACME, sid, answer(attempt="b"))
    assert (held.value.turn_id, held.value.resuming) == ("t1", True)
    # The first resume never wrote (its runtime did not answer): its lease lapses, the turn is still paused,
    # and the same answer resumes it.
    await h.lapse(TTL + 1)
    second = await h.store.answer_pause(ACME, sid, answer(attempt="b"))
    assert second.token > first.token and second.checkpoint.decision == APPROVE
    # Without a decision: go on with the one recorded.
    await h.lapse(TTL + 1)
    third = await h.store.answer_pause(ACME, sid, answer(None, attempt="c"))
    assert third.token > second.token and third.checkpoint.decision == APPROVE


async def test_a_different_answer_is_refused_and_changes_nothing(h: Harness) -> None:
    sid = await paused_turn(h)
    await h.store.decide_checkpoint(ACME, sid, "int_1", REJECT)  # a reviewer's, through DecideCheckpoint
    with pytest.raises(CheckpointConflict) as conflict:
        await h.store.answer_pause(ACME, sid, answer(APPROVE))
    assert conflict.value.recorded == REJECT, "the caller learns the first answer (a second reviewer's may match)"
    assert (await h.store.lease_state(ACME, sid)).lease is None
    assert (await h.store.get_checkpoint(ACME, sid, "int_1")).decision == REJECT
    resumed = await h.store.answer_pause(ACME, sid, answer(REJECT))
    assert resumed.checkpoint.decision == REJECT


async def test_a_busy_lease_still_records_the_answer(h: Harness) -> None:
    sid = await paused_turn(h)
    # Another turn holds the lease (a new message's, about to learn the session is paused).
    other = await h.store.try_acquire(ACME, sid, "t2", TTL, Strategy.REJECT)
    assert isinstance(other, Acquired)
    with pytest.raises(LeaseHeld) as held:
        await h.store.answer_pause(ACME, sid, answer())
    assert (held.value.turn_id, held.value.resuming) == ("t2", False)
    assert (await h.store.get_checkpoint(ACME, sid, "int_1")).decision == APPROVE, "recorded all the same"
    assert await h.store.release_lease(ACME, sid, other.token)
    resumed = await h.store.answer_pause(ACME, sid, answer(None, attempt="b"))
    assert resumed.checkpoint.decision == APPROVE


async def test_a_resume_of_the_same_turn_holding_the_lease_is_followed(h: Harness) -> None:
    sid = await paused_turn(h)
    resume = await h.store.try_acquire(ACME, sid, "t1", TTL, Strategy.REJECT, resume="x")  # an older caller's
    assert isinstance(resume, Acquired)
    with pytest.raises(LeaseHeld) as held:
        await h.store.answer_pause(ACME, sid, answer())
    assert (held.value.turn_id, held.value.resuming) == ("t1", True)
    assert (await h.store.get_checkpoint(ACME, sid, "int_1")).decision == APPROVE


async def test_abandon_takes_the_lease_without_a_decision(h: Harness) -> None:
    sid = await paused_turn(h)
    with pytest.raises(CheckpointConflict):  # no answer given and none recorded
        await h.store.answer_pause(ACME, sid, answer(None))
    abandoned = await h.store.answer_pause(ACME, sid, answer(None, abandon=True))
    assert abandoned.checkpoint.decision is None
    assert [r.kind for r in abandoned.journal] == ["request", "pause"]
    await consume(h, sid, abandoned.token)  # undecided, taken all the same
    assert await h.store.list_checkpoints(ACME, sid) == []


async def test_an_unknown_or_consumed_interrupt_is_not_found(h: Harness) -> None:
    sid = await paused_turn(h)
    with pytest.raises(CheckpointNotFound):
        await h.store.answer_pause(ACME, sid, PauseAnswer("int_nope", "a", TTL, "approval", APPROVE))
    answered = await h.store.answer_pause(ACME, sid, answer())
    await consume(h, sid, answered.token)
    with pytest.raises(CheckpointNotFound):
        await h.store.answer_pause(ACME, sid, answer(attempt="b"))


async def test_an_answer_of_the_wrong_kind_writes_nothing(h: Harness) -> None:
    sid = await paused_turn(h)
    with pytest.raises(InvalidValue) as misfit:
        await h.store.answer_pause(ACME, sid, answer(b"\x1a\x03yes", kind="user_input"))
    assert misfit.value.field_name == "decision"
    assert "waits for an approval, not for user input" in str(misfit.value)
    assert (await h.store.get_checkpoint(ACME, sid, "int_1")).decision is None
    assert (await h.store.lease_state(ACME, sid)).lease is None


# --------------------------------------------------------------------------- the first append consumes


async def test_the_first_append_consumes_the_checkpoint_in_the_same_write(h: Harness) -> None:
    sid = await paused_turn(h)
    answered = await h.store.answer_pause(ACME, sid, answer())
    appended = await consume(h, sid, answered.token, append_id="t1:resume:1")
    assert await h.store.list_checkpoints(ACME, sid) == []
    assert [r.kind for r in await h.store.journal(ACME, sid, "t1")] == ["request", "pause", "answer"]
    # A resend of the append (its reply lost) is the same append; nothing is consumed twice.
    again = await consume(h, sid, answered.token, append_id="t1:resume:1")
    assert again.duplicate and again.last_seq == appended.last_seq  # type: ignore[attr-defined]
    # Consumed by this lease already: another append naming it goes through (as a retried consume does).
    await consume(h, sid, answered.token)
    # The resumed turn is open under its lease: a takeover goes on with it.
    await h.lapse(TTL + 1)
    (claimed,) = await h.store.claim_orphans("runtime-b", 10, TTL)
    assert (claimed.turn_id, claimed.resume) == ("t1", "a")


async def test_a_stale_token_consumes_nothing(h: Harness) -> None:
    sid = await paused_turn(h)
    first = await h.store.answer_pause(ACME, sid, answer(attempt="a"))
    await h.lapse(TTL + 1)  # that resume never wrote: its lease lapsed
    second = await h.store.answer_pause(ACME, sid, answer(attempt="b"))
    with pytest.raises(StaleLease):
        await consume(h, sid, first.token)
    assert [c.interrupt_id for c in await h.store.list_checkpoints(ACME, sid)] == ["int_1"]
    assert [r.kind for r in await h.store.journal(ACME, sid, "t1")] == ["request", "pause"]
    await consume(h, sid, second.token)
    assert await h.store.list_checkpoints(ACME, sid) == []


async def test_consuming_a_checkpoint_that_is_not_there_or_not_the_turns_writes_nothing(h: Harness) -> None:
    sid = await paused_turn(h)
    answered = await h.store.answer_pause(ACME, sid, answer())
    last = (await h.store.log_state(ACME, sid)).last_seq
    with pytest.raises(CheckpointNotFound):
        await consume(h, sid, answered.token, interrupt_id="int_nope")
    other = NewEvents("t9", answered.token, [status("x", turn_id="t9")], consume_interrupt_id="int_1")
    with pytest.raises(InvalidValue) as wrong:
        await h.store.append_events(ACME, sid, other)
    assert wrong.value.field_name == "consume_interrupt_id"
    assert (await h.store.log_state(ACME, sid)).last_seq == last
    assert [c.interrupt_id for c in await h.store.list_checkpoints(ACME, sid)] == ["int_1"]


# --------------------------------------------------------------------------- the RPC


def answer_request(
    sid: str, attempt: str, decision: sessions_pb2.CheckpointDecision | None = None, abandon: bool = False
) -> sessions_pb2.AnswerPauseRequest:
    return sessions_pb2.AnswerPauseRequest(
        tenant_id=ACME,
        session_id=sid,
        interrupt_id="int_1",
        decision=decision,
        abandon=abandon,
        resume=sessions_pb2.LeaseResume(attempt_id=attempt),
        ttl_seconds=int(TTL),
    )


def approve(by: str) -> sessions_pb2.CheckpointDecision:
    return sessions_pb2.CheckpointDecision(approval=events_pb2.APPROVAL_DECISION_APPROVE, decided_by=by)


async def test_answer_pause_answers_with_the_checkpoint_the_lease_and_the_journal(h: Harness) -> None:
    sid = await paused_turn(h)
    servicer = SessionsServicer(h.store)
    reply = await servicer.AnswerPause(answer_request(sid, "a", approve("alice")), None)
    assert reply.checkpoint.decision.approval == events_pb2.APPROVAL_DECISION_APPROVE
    assert reply.checkpoint.decision.decided_by == "alice" and reply.checkpoint.decision.HasField("decide_time")
    assert reply.checkpoint.approval.interrupt_id == "int_1" and reply.checkpoint.turn_id == "t1"
    assert (reply.start_seq, [e.kind for e in reply.entries]) == (3, ["request", "pause"])
    assert reply.entries[1].entry_kind == sessions_pb2.JOURNAL_ENTRY_KIND_PAUSE

    # Bob's same answer while Alice's resume holds the lease: told to follow it.
    with pytest.raises(CogmeshError) as busy:
        await servicer.AnswerPause(answer_request(sid, "b", approve("bob")), None)
    assert busy.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert (busy.value.metadata["resuming"], busy.value.metadata["turn_id"]) == ("true", "t1")
    # Alice's resume never wrote: Bob's same answer resumes the turn with the answer recorded first.
    await h.lapse(TTL + 1)
    again = await servicer.AnswerPause(answer_request(sid, "b", approve("bob")), None)
    assert again.lease_token > reply.lease_token and again.checkpoint.decision.decided_by == "alice"
    # A different answer is refused: the first one won.
    await h.lapse(TTL + 1)
    reject = sessions_pb2.CheckpointDecision(approval=events_pb2.APPROVAL_DECISION_REJECT, text="no")
    with pytest.raises(CogmeshError) as conflict:
        await servicer.AnswerPause(answer_request(sid, "c", reject), None)
    assert conflict.value.code == grpc.StatusCode.FAILED_PRECONDITION


async def test_answer_pause_refuses_what_does_not_fit_naming_the_field(h: Harness) -> None:
    sid = await paused_turn(h)
    servicer = SessionsServicer(h.store)
    text = sessions_pb2.CheckpointDecision(text="yes")
    with pytest.raises(InvalidArgument) as misfit:
        await servicer.AnswerPause(answer_request(sid, "a", text), None)
    assert misfit.value.violations == [("decision", "interrupt 'int_1' waits for an approval, not for user input")]

    bad = answer_request(sid, "", sessions_pb2.CheckpointDecision(approval=99), abandon=True)  # type: ignore[arg-type]
    bad.ttl_seconds = 0
    # The field rules on the proto, which the kit's server checks before any servicer runs ...
    assert [(v.field, v.rule) for v in validation.violations(bad)] == [
        ("resume.attempt_id", "string.min_len"),
        ("ttl_seconds", "int32.gte_lte"),
    ]
    # ... and what only the servicer can say (called directly here, past the server's check).
    with pytest.raises(InvalidArgument) as caught:
        await servicer.AnswerPause(bad, None)
    assert [field for field, _ in caught.value.violations] == ["decision", "decision.approval"]
    with pytest.raises(NotFound) as unknown:
        await servicer.AnswerPause(answer_request("no-such-session", "a", approve("alice")), None)
    assert unknown.value.code == grpc.StatusCode.NOT_FOUND
    assert (await h.store.get_checkpoint(ACME, sid, "int_1")).decision is None


async def test_append_events_consumes_through_the_rpc(h: Harness) -> None:
    sid = await paused_turn(h)
    servicer = SessionsServicer(h.store)
    reply = await servicer.AnswerPause(answer_request(sid, "a", abandon=True), None)
    append = sessions_pb2.AppendEventsRequest(
        tenant_id=ACME,
        session_id=sid,
        turn_id="t1",
        lease_token=reply.lease_token,
        entries=[sessions_pb2.JournalEntry(entry_kind=sessions_pb2.JOURNAL_ENTRY_KIND_ANSWER, state=b"{}")],
        consume_interrupt_id="int_1",
    )
    await servicer.AppendEvents(append, None)
    assert await h.store.list_checkpoints(ACME, sid) == []
