"""One generic call of any RPC with raw request bytes, and the checks every answer must pass."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf import descriptor as pb
from google.protobuf import message_factory
from google.protobuf.message import DecodeError, Message

from cogmesh.common.v1 import events_pb2
from tests.integration.conftest import DOMAIN, status_details

NEVER = (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)
CLIENT_WRITE_FAILED = "Internal error from Core"
# Codes the services raise themselves: each must carry an ErrorInfo in the cogmesh domain.
# (RESOURCE_EXHAUSTED may come from the transport, e.g. oversized metadata, without one.)
APP_CODES = (
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.OUT_OF_RANGE,
)


def _identity(data: bytes) -> bytes:
    return data


@dataclass
class Outcome:
    code: grpc.StatusCode
    details: str = ""
    error: grpc.aio.AioRpcError | None = None
    responses: list[Message] = field(default_factory=list)
    # grpc's client reports its own INTERNAL when it writes a frame after the server ended the
    # stream (the server's status is lost); the server-side fault counters still see the truth.
    lost_to_late_write: bool = False


async def invoke(
    channel: grpc.aio.Channel,
    method: pb.MethodDescriptor,
    frames: Sequence[bytes],
    metadata: Sequence[tuple[str, str | bytes]],
    timeout_s: float,
    read_limit: int | None = None,
) -> Outcome:
    """Send `frames` (one for a unary request) as raw bytes; read the answer (all of it, or `read_limit` messages)."""
    path = f"/{method.containing_service.full_name}/{method.name}"
    parse = message_factory.GetMessageClass(method.output_type).FromString
    outcome = Outcome(grpc.StatusCode.OK)
    call: Any = None
    try:
        if not method.server_streaming:
            unary = channel.unary_unary(path, request_serializer=_identity, response_deserializer=parse)
            outcome.responses.append(await unary(frames[0], metadata=tuple(metadata), timeout=timeout_s))
            return outcome
        if method.client_streaming:
            streaming = channel.stream_stream(path, request_serializer=_identity, response_deserializer=parse)
            call = streaming(metadata=tuple(metadata), timeout=timeout_s)
            # Lock-step: the next frame goes only once this one is answered. A frame written after the
            # server ended the stream makes grpc's client report its own INTERNAL in place of the status.
            try:
                for frame in frames:
                    await call.write(frame)
                    if not await _read_until_answered(call, outcome):
                        break
                else:
                    await call.done_writing()
            except grpc.aio.AioRpcError as err:
                outcome.lost_to_late_write = err.details() == CLIENT_WRITE_FAILED
                raise
        else:
            server_stream = channel.unary_stream(path, request_serializer=_identity, response_deserializer=parse)
            call = server_stream(frames[0], metadata=tuple(metadata), timeout=timeout_s)
        while read_limit is None or len(outcome.responses) < read_limit:
            message = await call.read()  # raises the stream's error status, if it ends with one
            if message is grpc.aio.EOF:
                break
            outcome.responses.append(message)
    except grpc.aio.AioRpcError as err:
        outcome.code, outcome.details, outcome.error = err.code(), err.details() or "", err
    finally:
        if call is not None:
            call.cancel()
    return outcome


async def _read_until_answered(call: Any, outcome: Outcome) -> bool:
    """Read a Converse stream up to the ack or rejection of the frame just sent; False once it ended."""
    while True:
        message = await call.read()
        if message is grpc.aio.EOF:
            return False
        outcome.responses.append(message)
        if message.WhichOneof("kind") in ("ack", "rejected"):
            return True


def decodes(method: pb.MethodDescriptor, frame: bytes) -> bool:
    try:
        message_factory.GetMessageClass(method.input_type).FromString(frame)
    except DecodeError:
        return False
    return True


def check_status(outcome: Outcome) -> None:
    """Never INTERNAL/UNKNOWN; a service's own errors name what is wrong and carry ErrorInfo."""
    if outcome.lost_to_late_write:
        return  # not the server's answer; the test checks the server's own fault counters
    assert outcome.code not in NEVER, f"{outcome.code.name}: {outcome.details}"
    assert outcome.code != grpc.StatusCode.DEADLINE_EXCEEDED, f"the call hung: {outcome.details}"
    if outcome.code == grpc.StatusCode.OK:
        return
    assert outcome.details, "an error must say what is wrong"
    if outcome.code in APP_CODES:
        assert outcome.error is not None
        info, violations = status_details(outcome.error)
        assert info is not None and info.domain == DOMAIN, f"no ErrorInfo: {outcome.code.name} {outcome.details}"
        if outcome.code == grpc.StatusCode.INVALID_ARGUMENT:
            assert violations, f"INVALID_ARGUMENT without field violations: {outcome.details}"
            assert all(f in outcome.details for f, _ in violations), outcome.details


def events_of(response: Message) -> list[events_pb2.RuntimeEvent]:
    """The events a response carries, whichever RPC it answers."""
    if response.DESCRIPTOR.name == "ConverseResponse":
        return list(response.events.events) if response.WhichOneof("kind") == "events" else []  # type: ignore[attr-defined]
    return list(getattr(response, "events", []))


def check_responses(outcome: Outcome) -> None:
    """A turn that failed says why with a specific kind; a refused Converse frame never says INTERNAL."""
    for response in outcome.responses:
        for event in events_of(response):
            if event.WhichOneof("payload") == "error":
                kind = events_pb2.ErrorKind.Name(event.error.kind)
                assert kind not in ("ERROR_KIND_INTERNAL", "ERROR_KIND_UNSPECIFIED"), (kind, event.error.message)
        if response.DESCRIPTOR.name == "ConverseResponse" and response.WhichOneof("kind") == "rejected":
            rejected = response.rejected  # type: ignore[attr-defined]
            assert rejected.code not in ("INTERNAL", "UNKNOWN"), (rejected.code, rejected.message)
            assert rejected.message, "a refused frame must say why"
