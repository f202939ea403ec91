"""Converse when the transport refuses the call's headers (over grpc's 16 KiB metadata limit).

grpc still runs a bidi handler for such a call, on a stream already closed with
RESOURCE_EXHAUSTED. Found by fuzzing: the guard's UNAUTHENTICATED abort failed to send on
that closed stream and escaped as an exception, which the servers' metrics counted as UNKNOWN.
"""

from __future__ import annotations

import asyncio

import grpc
import pytest

from cogmesh.gateway.v1 import gateway_pb2
from tests.fuzz.calls import invoke
from tests.fuzz.conftest import CALL_TIMEOUT_S, KEYS, Harness
from tests.fuzz.test_fuzz_gateway import SERVICE

CONVERSE = SERVICE.methods_by_name["Converse"]
PATH = f"/{SERVICE.full_name}/Converse"
OVER_LIMIT = ("padding", "v" * 20_000)  # above the hard limit, so always refused (8-16 KiB: sometimes)
AUTHORIZATION = {
    "none": (),
    "wrong": (("authorization", "Bearer not-a-key"),),
    "valid": (("authorization", f"Bearer {KEYS['acme']}"),),
}


@pytest.mark.parametrize("key", list(AUTHORIZATION))
def test_converse_with_refused_headers_ends_cancelled(key: str, harness: Harness) -> None:
    frame = gateway_pb2.ConverseRequest(
        open=gateway_pb2.ConverseOpen(session_id=harness.resources.sessions["acme"])
    ).SerializeToString()
    before, faults = harness.rpc_codes(PATH), harness.server_faults()

    outcome = harness.run(invoke(harness.channel, CONVERSE, [frame], (*AUTHORIZATION[key], OVER_LIMIT), CALL_TIMEOUT_S))
    assert outcome.code == grpc.StatusCode.RESOURCE_EXHAUSTED, (outcome.code, outcome.details)

    async def handler_ended() -> None:
        # The handler runs on after the client has the transport's answer; polled, as metrics have no event.
        for _ in range(500):
            if harness.rpc_codes(PATH).total() > before.total():
                return
            await asyncio.sleep(0.01)

    harness.run(handler_ended())
    assert harness.rpc_codes(PATH) - before == {"CANCELLED": 1}
    assert harness.server_faults() == faults
    assert harness.open_streams() == {}
