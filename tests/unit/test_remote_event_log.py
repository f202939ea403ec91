"""How the gateway's RemoteEventLog hands WatchEvents responses to its mirrors (gateway/remote_event_log.py).

A batch goes to the mirror of its (tenant, session) only where it continues what the
mirror holds: a batch sent before sessions took a remove can arrive after the add that
made the mirror again at another cursor, and must neither repeat an event nor leave a
gap. A session's status closes its mirror (NOT_FOUND as the session gone), or, when it
may pass, has the session added again at the seq the mirror holds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import grpc

from cogmesh.common.v1 import errors_pb2, events_pb2
from cogmesh.sessions.v1 import sessions_pb2
from gateway.remote_event_log import RETRY_S, RemoteEventLog, _continuing, _Mirror
from services.kit.errors import NotFound, OutOfRange, Unavailable
from services.lib.event_log import SessionLog

TENANT, SESSION = "acme", "s1"


def events(*seqs: int) -> list[events_pb2.RuntimeEvent]:
    return [events_pb2.RuntimeEvent(seq=seq) for seq in seqs]


def seqs(found: Sequence[events_pb2.RuntimeEvent]) -> list[int]:
    return [e.seq for e in found]


def watched(first_seq_after: int) -> tuple[RemoteEventLog, _Mirror]:
    """A RemoteEventLog with one mirror at `first_seq_after`, fed by hand (no stream opened)."""
    remote = RemoteEventLog(None, lambda: TENANT, retention=100, max_lag=100, max_batch=10, fanout_rate=0.0)  # type: ignore[arg-type]
    mirror = _Mirror(SessionLog(100, last_seq=first_seq_after))
    remote._mirrors[TENANT, SESSION] = mirror
    return remote, mirror


def response(tenant: str = TENANT, **fields: Any) -> sessions_pb2.WatchEventsResponse:
    return sessions_pb2.WatchEventsResponse(tenant_id=tenant, session_id=SESSION, **fields)


def test_a_batch_is_taken_only_where_it_continues_the_mirror() -> None:
    log = SessionLog(100, last_seq=5)
    assert seqs(_continuing(log, events(6, 7))) == [6, 7]
    assert seqs(_continuing(log, events(4, 5, 6, 7))) == [6, 7]  # what the mirror holds is not repeated
    assert seqs(_continuing(log, events(2, 3))) == []
    assert seqs(_continuing(log, events(8, 9))) == []  # a gap: an earlier watch's batch, not this mirror's
    assert seqs(_continuing(log, [])) == []


async def test_responses_reach_the_mirror_of_their_tenant_and_session() -> None:
    remote, mirror = watched(2)
    remote._route(response(events=events(1, 2, 3, 4)))
    assert seqs(mirror.log.events) == [3, 4] and mirror.log.last_seq == 4
    remote._route(response(tenant="another", events=events(5)))  # another tenant's session of that id
    remote._route(sessions_pb2.WatchEventsResponse())  # a heartbeat
    remote._route(response(events=events(7)))  # a gap
    assert mirror.log.last_seq == 4
    remote._route(response(events=events(5, 6)))
    assert seqs(mirror.log.events) == [3, 4, 5, 6] and not mirror.log.closed


async def test_a_deleted_session_closes_its_mirror_as_gone_and_an_expired_cursor_with_its_status() -> None:
    remote, mirror = watched(0)
    deleted = NotFound("session 's1' not found", reason=errors_pb2.ERROR_REASON_SESSION_NOT_FOUND)
    remote._route(response(error=deleted.to_status().SerializeToString()))
    assert mirror.log.closed and isinstance(mirror.failure, NotFound)
    assert mirror.failure.reason == errors_pb2.ERROR_REASON_SESSION_NOT_FOUND and "deleted" in mirror.failure.message

    remote, mirror = watched(0)
    expired = OutOfRange("cursor 0 is older than the retained events", reason=errors_pb2.ERROR_REASON_CURSOR_EXPIRED)
    remote._route(response(error=expired.to_status().SerializeToString()))
    assert mirror.log.closed and mirror.failure is not None
    assert mirror.failure.code == grpc.StatusCode.OUT_OF_RANGE
    assert mirror.failure.to_status() == expired.to_status()  # the sessions service's status, details and all


async def test_a_session_whose_watch_may_recover_is_added_again_at_the_seq_its_mirror_holds() -> None:
    remote, mirror = watched(3)
    requests: asyncio.Queue[sessions_pb2.WatchEventsRequest | None] = asyncio.Queue()
    remote._requests = requests  # as if the stream were open
    remote._route(response(error=Unavailable("session store away").to_status().SerializeToString()))
    assert not mirror.log.closed and mirror.failure is None and mirror.retry_s == 2 * RETRY_S
    async with asyncio.timeout(10):
        again = await requests.get()
    assert again == sessions_pb2.WatchEventsRequest(
        add=sessions_pb2.WatchedSession(tenant_id=TENANT, session_id=SESSION, after_seq=3)
    )
