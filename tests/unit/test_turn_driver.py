"""The gateway's turn driver under faults, with a real in-memory event log and scripted peers:
whatever the runtime's stream or the event log does, a turn gets exactly one end and its lease
is given back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc
import pytest

from cogmesh.common.v1 import events_pb2
from cogmesh.runtime.v1 import runtime_pb2
from cogmesh.sessions.v1 import sessions_pb2
from gateway.event_log import MemoryEventLog, OpenTurn
from gateway.interrupts import TurnDriver
from services.kit.config import Settings
from services.kit.errors import Unavailable

SESSION, TURN = "s1", "t1"


class Rpc(grpc.aio.AioRpcError):
    def __init__(self, code: grpc.StatusCode, details: str = "scripted"):
        super().__init__(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


class Sessions:
    """A sessions stub whose ReleaseTurnLease fails `failures` times first."""

    def __init__(self, failures: int = 0):
        self.failures, self.releases = failures, 0
        self.release_seen = asyncio.Event()

    async def ReleaseTurnLease(self, request: Any, **_: Any) -> sessions_pb2.ReleaseTurnLeaseResponse:
        self.releases += 1
        if self.failures:
            self.failures -= 1
            raise Rpc(grpc.StatusCode.UNAVAILABLE, "sessions restarting")
        self.release_seen.set()
        return sessions_pb2.ReleaseTurnLeaseResponse()

    async def RenewTurnLease(self, request: Any, **_: Any) -> sessions_pb2.RenewTurnLeaseResponse:
        return sessions_pb2.RenewTurnLeaseResponse()


class Clients:
    def __init__(self, sessions: Sessions):
        self.sessions = sessions


class FlakyLog(MemoryEventLog):
    """The memory log, unavailable for its first `failures` appends (or until `back` is set)."""

    def __init__(self, failures: int = 0):
        super().__init__()
        self.failures, self.attempts = failures, 0
        self.back = asyncio.Event()
        self.down = failures < 0  # down until `back` is set
        self.batches: list[str] = []

    async def append(
        self,
        session_id: str,
        events: Sequence[events_pb2.RuntimeEvent],
        opened: OpenTurn | None = None,
        batch_id: str = "",
    ) -> None:
        self.attempts += 1
        if self.down and not self.back.is_set():
            raise Unavailable("event log unavailable (append): Connection refused")
        if self.failures > 0:
            self.failures -= 1
            raise Unavailable("event log unavailable (append): Connection reset by peer")
        self.batches.append(batch_id)
        await super().append(session_id, events, opened)


class Stream:
    """A RunTurn call: yields the scripted responses (None: one grpc could not decode), then raises `error`."""

    def __init__(self, responses: list[runtime_pb2.RunTurnResponse | None], error: BaseException | None = None):
        self.responses, self.error = responses, error
        self.cancelled = False

    def cancel(self) -> bool:
        self.cancelled = True
        return True

    async def _iterate(self) -> AsyncIterator[runtime_pb2.RunTurnResponse | None]:
        for response in self.responses:
            yield response
        if self.error is not None:
            raise self.error

    def __aiter__(self) -> AsyncIterator[runtime_pb2.RunTurnResponse | None]:
        return self._iterate()


def response(*events: events_pb2.RuntimeEvent) -> runtime_pb2.RunTurnResponse:
    return runtime_pb2.RunTurnResponse(events=events)


def delta(text: str) -> events_pb2.RuntimeEvent:
    return events_pb2.RuntimeEvent(assistant_delta=events_pb2.AssistantDelta(text=text))


FINAL = events_pb2.RuntimeEvent(final=events_pb2.FinalResult(text="done"))
REQUEST = runtime_pb2.RunTurnRequest(tenant_id="default", session_id=SESSION, turn_id=TURN, lease_token=7)


async def drive(
    stream: Stream, log: MemoryEventLog, sessions: Sessions, **settings: Any
) -> tuple[TurnDriver, list[events_pb2.RuntimeEvent]]:
    driver = TurnDriver(Settings(call_timeout_s=1.0, **settings), Clients(sessions), log)  # type: ignore[arg-type]
    try:
        await asyncio.wait_for(driver._pump(REQUEST, stream, []), 30)
        await asyncio.wait_for(asyncio.gather(*driver._releasing), 30)
    finally:
        await driver.close()
    return driver, list(log._logs[SESSION].events) if SESSION in log._logs else []


def ends(events: list[events_pb2.RuntimeEvent]) -> list[str]:
    return [e.WhichOneof("payload") or "" for e in events if e.WhichOneof("payload") in ("final", "error")]


async def test_a_message_that_did_not_decode_ends_the_turn_with_an_internal_error() -> None:
    stream = Stream([response(delta("a")), None, response(delta("never read"))])
    sessions = Sessions()
    _, events = await drive(stream, MemoryEventLog(), sessions)
    assert [e.WhichOneof("payload") for e in events] == ["assistant_delta", "error"]
    assert events[-1].error.kind == events_pb2.ERROR_KIND_INTERNAL and "could not decode" in events[-1].error.message
    assert stream.cancelled and sessions.release_seen.is_set()


async def test_a_bug_while_driving_still_ends_the_turn_and_frees_the_lease() -> None:
    stream = Stream([response(delta("a"))], error=RuntimeError("boom"))
    sessions = Sessions()
    _, events = await drive(stream, MemoryEventLog(), sessions)
    assert ends(events) == ["error"] and "gateway failed" in events[-1].error.message
    assert stream.cancelled and sessions.releases == 1


async def test_a_runtime_failure_after_the_final_adds_no_second_end() -> None:
    stream = Stream([response(delta("a"), FINAL)], error=Rpc(grpc.StatusCode.UNAVAILABLE))
    _, events = await drive(stream, MemoryEventLog(), Sessions())
    assert ends(events) == ["final"]


async def test_appends_ride_out_a_short_outage_in_order_and_once() -> None:
    log = FlakyLog(failures=3)
    stream = Stream([response(delta("a")), response(delta("b")), response(FINAL)])
    _, events = await drive(stream, log, Sessions())
    assert [e.WhichOneof("payload") for e in events] == ["assistant_delta", "assistant_delta", "final"]
    assert [e.assistant_delta.text for e in events[:2]] == ["a", "b"]
    assert [e.seq for e in events] == [1, 2, 3]
    assert log.attempts == 6 and len(set(log.batches)) == 3  # each retry repeated its batch id


async def test_an_outage_past_the_bound_stops_the_turn_then_ends_it_naming_redis_once_back() -> None:
    log = FlakyLog(failures=-1)
    sessions = Sessions()
    stream = Stream([response(delta("a")), response(delta("b"))])
    driver = TurnDriver(Settings(call_timeout_s=1.0, event_log_outage_s=0.2), Clients(sessions), log)  # type: ignore[arg-type]
    try:
        await asyncio.wait_for(driver._pump(REQUEST, stream, []), 30)
        assert stream.cancelled  # the runtime is told to stop at once
        finishing = list(driver._releasing)
        assert finishing, "nothing left to end the turn once the log is back"
        await asyncio.wait_for(sessions.release_seen.wait(), 30)  # the lease goes back first ...
        assert not log._log(SESSION).events
        log.back.set()  # ... and the end is logged once the log is back
        await asyncio.wait_for(asyncio.gather(*finishing), 30)
    finally:
        await driver.close()
    events = log._log(SESSION).events
    assert [e.WhichOneof("payload") for e in events] == ["error"]
    error = events[0].error
    assert error.kind == events_pb2.ERROR_KIND_UNAVAILABLE and error.retryable
    assert "event log (Redis) unavailable" in error.message and "send the message again" in error.message


async def test_a_failed_release_is_retried_until_it_goes_through() -> None:
    sessions = Sessions(failures=3)
    _, events = await drive(Stream([response(delta("a"), FINAL)]), MemoryEventLog(), sessions)
    assert ends(events) == ["final"]
    assert sessions.releases == 4 and sessions.release_seen.is_set()


@pytest.mark.parametrize("code", [grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND])
async def test_a_release_refused_for_good_is_not_retried(code: grpc.StatusCode) -> None:
    class Gone(Sessions):
        async def ReleaseTurnLease(self, request: Any, **_: Any) -> sessions_pb2.ReleaseTurnLeaseResponse:
            self.releases += 1
            raise Rpc(code)

    sessions = Gone()
    await drive(Stream([response(FINAL)]), MemoryEventLog(), sessions)
    assert sessions.releases == 1


async def test_a_deleted_session_stops_the_turn_quietly() -> None:
    """DeleteSession drops the log; the turn's next append is NotFound: stop the runtime, log no end."""
    log = MemoryEventLog()
    await log.drop(SESSION)
    stream = Stream([response(delta("a")), response(delta("never logged"))])
    sessions = Sessions()
    await drive(stream, log, sessions)
    assert stream.cancelled and sessions.releases == 1
