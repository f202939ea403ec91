"""The sessions service's typed records over gRPC, on the memory store and on a real Redis.

A resume's lease is asked for with a typed `resume` (the paused turn's id and an attempt id)
and read back typed, while stores keep the `<turn>:resume:<attempt>` text they always have
(so a caller of the previous version, which sends that text as the turn id, reads the same);
journal entries carry a JournalEntryKind, and entries written by the name alone (a writer,
or a record, from before the enum) read back with both.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from cogmesh.common.v1 import events_pb2
from cogmesh.sessions.v1 import sessions_pb2 as S
from cogmesh.sessions.v1 import sessions_pb2_grpc
from services.lib import journal_kinds
from services.sessions.settings import SessionsSettings
from tests.integration.test_sessions import TENANT, TIMEOUT_S, create, expect_error, sessions_service
from tests.support.redis_topologies import redis_for


@pytest.fixture(params=["memory", "redis"])
async def stub(request: pytest.FixtureRequest) -> AsyncIterator[sessions_pb2_grpc.SessionsServiceStub]:
    settings = SessionsSettings()
    if request.param == "redis":
        with redis_for(request, "standalone") as redis:
            async with sessions_service(SessionsSettings(redis_url=redis.url, redis_key_prefix=redis.prefix)) as client:
                yield client
        return
    async with sessions_service(settings) as client:
        yield client


async def lease_of(stub: Any, sid: str) -> S.TurnLease:
    reply = await stub.GetTurnLease(S.GetTurnLeaseRequest(tenant_id=TENANT, session_id=sid), timeout=TIMEOUT_S)
    return reply.lease


async def test_a_resume_lease_is_asked_for_and_read_back_typed(stub: Any) -> None:
    sid = (await create(stub)).session.session_id
    ask = S.AcquireTurnLeaseRequest(
        tenant_id=TENANT, session_id=sid, turn_id="t1", resume=S.LeaseResume(attempt_id="a1"), ttl_seconds=30
    )
    granted = await stub.AcquireTurnLease(ask, timeout=TIMEOUT_S)
    lease = await lease_of(stub, sid)
    assert (lease.turn_id, lease.resume.attempt_id, lease.lease_token) == ("t1", "a1", granted.lease_token)

    # A second attempt to resume the same turn is refused, not handed the same token.
    other = S.AcquireTurnLeaseRequest(
        tenant_id=TENANT, session_id=sid, turn_id="t1", resume=S.LeaseResume(attempt_id="a2"), ttl_seconds=30
    )
    await expect_error(stub.AcquireTurnLease(other, timeout=TIMEOUT_S), grpc.StatusCode.FAILED_PRECONDITION)
    # The same attempt again is the same grant (safe to retry).
    assert (await stub.AcquireTurnLease(ask, timeout=TIMEOUT_S)).lease_token == granted.lease_token

    await stub.ReleaseTurnLease(
        S.ReleaseTurnLeaseRequest(tenant_id=TENANT, session_id=sid, lease_token=granted.lease_token)
    )
    plain = await stub.AcquireTurnLease(
        S.AcquireTurnLeaseRequest(tenant_id=TENANT, session_id=sid, turn_id="t2", ttl_seconds=30), timeout=TIMEOUT_S
    )
    lease = await lease_of(stub, sid)
    assert (lease.turn_id, lease.HasField("resume"), lease.lease_token) == ("t2", False, plain.lease_token)


async def test_a_resume_asked_for_as_text_by_an_older_caller_reads_the_same(stub: Any) -> None:
    sid = (await create(stub)).session.session_id
    old = S.AcquireTurnLeaseRequest(tenant_id=TENANT, session_id=sid, turn_id="t1:resume:a1", ttl_seconds=30)
    granted = await stub.AcquireTurnLease(old, timeout=TIMEOUT_S)
    lease = await lease_of(stub, sid)
    assert (lease.turn_id, lease.resume.attempt_id, lease.lease_token) == ("t1", "a1", granted.lease_token)
    typed = S.AcquireTurnLeaseRequest(
        tenant_id=TENANT, session_id=sid, turn_id="t1", resume=S.LeaseResume(attempt_id="a1"), ttl_seconds=30
    )
    assert (await stub.AcquireTurnLease(typed, timeout=TIMEOUT_S)).lease_token == granted.lease_token, "one holder"


async def test_a_resume_needs_a_plain_turn_id_and_an_attempt(stub: Any) -> None:
    sid = (await create(stub)).session.session_id
    for turn_id, attempt, field in (("t1", "", "resume.attempt_id"), ("t1:resume:x", "a1", "turn_id")):
        ask = S.AcquireTurnLeaseRequest(
            tenant_id=TENANT, session_id=sid, turn_id=turn_id, resume=S.LeaseResume(attempt_id=attempt)
        )
        _, violations, _ = await expect_error(
            stub.AcquireTurnLease(ask, timeout=TIMEOUT_S), grpc.StatusCode.INVALID_ARGUMENT
        )
        assert [f for f, _ in violations] == [field]


async def test_journal_entries_read_back_with_their_kind_however_they_were_written(stub: Any) -> None:
    sid = (await create(stub)).session.session_id
    accepted = events_pb2.RuntimeEvent(status=events_pb2.StatusUpdate(text="accepted"))
    lease = await stub.AcquireTurnLease(
        S.AcquireTurnLeaseRequest(
            tenant_id=TENANT,
            session_id=sid,
            turn_id="t1",
            ttl_seconds=30,
            events=[accepted],
            entries=[journal_kinds.entry(journal_kinds.REQUEST, b"the request")],
        ),
        timeout=TIMEOUT_S,
    )
    written = [
        S.JournalEntry(kind="start", state=b"{}"),  # an older runtime: the name only
        S.JournalEntry(entry_kind=S.JOURNAL_ENTRY_KIND_MODEL, state=b"{}"),  # the enum only
        journal_kinds.entry(journal_kinds.DECIDE, b"{}"),  # both, as this version writes
    ]
    await stub.AppendEvents(
        S.AppendEventsRequest(
            tenant_id=TENANT, session_id=sid, turn_id="t1", lease_token=lease.lease_token, entries=written
        ),
        timeout=TIMEOUT_S,
    )
    journal = await stub.GetJournal(S.GetJournalRequest(tenant_id=TENANT, session_id=sid, turn_id="t1"))
    assert [(e.entry_kind, e.kind) for e in journal.entries] == [
        (S.JOURNAL_ENTRY_KIND_REQUEST, "request"),
        (S.JOURNAL_ENTRY_KIND_START, "start"),
        (S.JOURNAL_ENTRY_KIND_MODEL, "model"),
        (S.JOURNAL_ENTRY_KIND_DECIDE, "decide"),
    ]

    nameless = S.AppendEventsRequest(
        tenant_id=TENANT, session_id=sid, turn_id="t1", lease_token=lease.lease_token, entries=[S.JournalEntry()]
    )
    _, violations, _ = await expect_error(
        stub.AppendEvents(nameless, timeout=TIMEOUT_S), grpc.StatusCode.INVALID_ARGUMENT
    )
    assert [f for f, _ in violations] == ["entries[0].entry_kind"]
