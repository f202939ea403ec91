"""The once-per-event encoding the gateway streams: byte-for-byte the normal responses."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc

from cogmesh.common.v1 import events_pb2
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from gateway.streams import encoded
from services.kit.server import ObservabilityInterceptor
from services.lib.event_log import Batch, SessionLog, tail, wire_entry


def varied_events() -> list[events_pb2.RuntimeEvent]:
    """Payload sizes that need 1, 2 and 3 length-varint bytes, and several payload kinds."""
    events = [
        events_pb2.RuntimeEvent(turn_id="t", assistant_delta=events_pb2.AssistantDelta(text="hi")),
        events_pb2.RuntimeEvent(turn_id="t", assistant_delta=events_pb2.AssistantDelta(text="é" * 200)),
        events_pb2.RuntimeEvent(turn_id="t", assistant_delta=events_pb2.AssistantDelta(text="x" * 20_000)),
        events_pb2.RuntimeEvent(turn_id="t", status=events_pb2.StatusUpdate(state=events_pb2.TURN_STATE_QUEUED)),
        events_pb2.RuntimeEvent(),  # an empty message still takes an entry (length 0)
        events_pb2.RuntimeEvent(turn_id="t", final=events_pb2.FinalResult(text="done")),
    ]
    for seq, event in enumerate(events, 1):
        event.seq = seq
    return events


def test_entries_concatenate_to_every_event_response_byte_for_byte() -> None:
    events = varied_events()
    wire = b"".join(wire_entry(e) for e in events)
    for response in (
        gateway_pb2.SubscribeResponse,
        gateway_pb2.SendMessageResponse,
        gateway_pb2.ResolveApprovalResponse,
        gateway_pb2.AnswerInterruptResponse,
    ):
        assert wire == response(events=events).SerializeToString(), response.__name__
        assert list(response.FromString(wire).events) == events


def test_an_empty_batch_is_an_empty_response() -> None:
    assert encoded(Batch()) == b"" == gateway_pb2.SubscribeResponse().SerializeToString()
    assert encoded([events_pb2.RuntimeEvent()]) == b""  # a plain list carries no encoding


async def test_log_reads_carry_the_encoding_of_exactly_their_events_across_trims() -> None:
    log = SessionLog(retention=8)
    for i in range(30):  # several retention trims
        text = events_pb2.AssistantDelta(text=f"w{i}")
        log.add([events_pb2.RuntimeEvent(seq=i + 1, turn_id="t", assistant_delta=text)])
    seen = 0
    async for batch in tail("s", log, 24, 5, max_lag=5_000, max_batch=3):
        assert isinstance(batch, Batch) and 0 < len(batch) <= 3
        assert batch.wire == gateway_pb2.SubscribeResponse(events=batch).SerializeToString()
        assert [e.assistant_delta.text for e in gateway_pb2.SubscribeResponse.FromString(batch.wire).events] == [
            f"w{e.seq - 1}" for e in batch
        ]
        seen = batch[-1].seq
        if seen == 30:
            break
    assert seen == 30


class BytesSubscribe(gateway_pb2_grpc.GatewayServiceServicer):
    """Streams pre-encoded bytes both ways a handler can: context.write and yield."""

    def __init__(self, wire: bytes) -> None:
        self.wire = wire

    async def Subscribe(self, request: Any, context: Any) -> AsyncIterator[Any]:
        await context.write(self.wire)
        await context.write(gateway_pb2.SubscribeResponse(heartbeat=True))  # messages still serialize
        yield self.wire


async def test_a_plain_client_decodes_pre_encoded_responses_through_the_kit_server() -> None:
    events = varied_events()
    wire = b"".join(wire_entry(e) for e in events)
    server = grpc.aio.server(interceptors=[ObservabilityInterceptor("test", metrics=False)])
    gateway_pb2_grpc.add_GatewayServiceServicer_to_server(BytesSubscribe(wire), server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = gateway_pb2_grpc.GatewayServiceStub(channel)  # type: ignore[no-untyped-call]
            got = [r async for r in stub.Subscribe(gateway_pb2.SubscribeRequest(session_id="s"), timeout=10)]
    finally:
        await server.stop(None)
    assert [list(r.events) for r in got] == [events, [], events]
    assert [r.heartbeat for r in got] == [False, True, False]
