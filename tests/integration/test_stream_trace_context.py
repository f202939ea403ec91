"""A server stream cancelled while its message is being written leaves no OpenTelemetry error
behind (issue 31, item 6).

The kit's interceptor makes each RPC's span current for the handler. When a client cancels a
stream while the server waits to write a message (the client reads slower than the server
sends: the sessions service's ReadEvents replaying a long log to the gateway), grpc stops at
that write and leaves the handler's generator suspended at its `yield`. Closed later by the
garbage collector from another task, the span's context was detached in a contextvars
Context other than the one it was attached in: "Failed to detach context" and a traceback in
the sessions service's log during the plain demo.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Iterator

import grpc
import pytest
from prometheus_client import REGISTRY

from cogmesh.common.v1 import events_pb2
from cogmesh.sessions.v1 import sessions_pb2
from services.kit.server import start
from services.sessions import main as sessions_main
from tests.integration.conftest import STUB_CLASSES, SUITE_SETTINGS, TIMEOUT_S

pytestmark = pytest.mark.asyncio

TENANT = "t-detach"
SERVICE = "cogmesh.sessions.v1.SessionsService"
EVENT_TEXT = "x" * 4000
APPENDS, EVENTS_PER_APPEND = 15, 200  # 12 MB of log: far more than a stream's flow-control window
# No BDP probing: the client's window stays small, so the server soon waits to write.
CLIENT_OPTIONS = [("grpc.http2.bdp_probe", 0), ("grpc.max_receive_message_length", 64 << 20)]


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def otel_context_log() -> Iterator[Records]:
    """What OpenTelemetry's context module logs (it reports a failed detach there, with a traceback)."""
    handler = Records()
    logger = logging.getLogger("opentelemetry.context")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def read_events_metric(name: str) -> float:
    return REGISTRY.get_sample_value(name, {"grpc_service": SERVICE, "grpc_method": "ReadEvents"}) or 0.0


async def test_a_stream_cancelled_mid_write_detaches_its_trace_context(otel_context_log: Records) -> None:
    assert SUITE_SETTINGS.tracing and SUITE_SETTINGS.metrics  # the kit's interceptor traces and counts
    server = await start(sessions_main.build, SUITE_SETTINGS, "127.0.0.1:0")
    channel = grpc.aio.insecure_channel(server.address, options=CLIENT_OPTIONS)
    try:
        stub = STUB_CLASSES["sessions"](channel)
        created = await stub.CreateSession(sessions_pb2.CreateSessionRequest(tenant_id=TENANT, agent="default"))
        session_id = created.session.session_id
        lease = await stub.AcquireTurnLease(
            sessions_pb2.AcquireTurnLeaseRequest(tenant_id=TENANT, session_id=session_id, turn_id="t1", ttl_seconds=60)
        )
        delta = events_pb2.RuntimeEvent(turn_id="t1", assistant_delta=events_pb2.AssistantDelta(text=EVENT_TEXT))
        for _ in range(APPENDS):
            await stub.AppendEvents(
                sessions_pb2.AppendEventsRequest(
                    tenant_id=TENANT,
                    session_id=session_id,
                    turn_id="t1",
                    lease_token=lease.lease_token,
                    events=[delta] * EVENTS_PER_APPEND,
                )
            )

        sent_before = read_events_metric("grpc_server_msg_sent_total")
        streams_before = read_events_metric("grpc_server_active_streams")
        request = sessions_pb2.ReadEventsRequest(tenant_id=TENANT, session_id=session_id, follow=True)
        call = stub.ReadEvents(request)
        first = await call.read()
        assert len(first.events) > 0
        async with asyncio.timeout(TIMEOUT_S):
            # The server has handed grpc a message the client has not read: it waits to write it
            # (the log holds many more, the client reads no more).
            while read_events_metric("grpc_server_msg_sent_total") < sent_before + 2:  # noqa: ASYNC110 - a metric
                await asyncio.sleep(0.01)
        call.cancel()

        async with asyncio.timeout(TIMEOUT_S):
            # The server's stream ends (its recorder runs last, in the handler's cleanup); an
            # abandoned handler ends only once the collector finalizes it, hence the collect.
            while read_events_metric("grpc_server_active_streams") > streams_before:
                gc.collect()
                await asyncio.sleep(0.01)
    finally:
        await channel.close()
        await server.stop(0)

    failures = [r for r in otel_context_log.records if "Failed to detach context" in r.getMessage()]
    assert failures == [], "the span's context was detached in another task: " + "".join(
        logging.Formatter().formatException(r.exc_info) for r in failures if r.exc_info
    )
