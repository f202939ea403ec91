"""Bytes that are not the method's message, sent to every RPC of every service: INVALID_ARGUMENT
naming `request` (grpc's own answer to an undecodable request would be UNKNOWN)."""

from __future__ import annotations

import grpc
import pytest

from tests.fuzz import strategies
from tests.fuzz.calls import check_status, invoke
from tests.fuzz.conftest import CALL_TIMEOUT_S, Harness, bearer
from tests.integration.conftest import status_details
from tests.integration.test_bad_input import SERVICES

CORRUPT = {
    "truncated": b"\x0a\x05ab",  # field 1 claims 5 bytes, 2 follow
    "overlong_varint": b"\x08" + b"\xff" * 11,  # a varint longer than 10 bytes
    "wire_type_7": b"\x0f",
}
RPCS = [(service, method.name) for service, descriptor in SERVICES.items() for method in descriptor.methods]


@pytest.mark.parametrize(("service", "name"), RPCS, ids=[f"{s}.{m}" for s, m in RPCS])
def test_undecodable_request_is_invalid_argument(service: str, name: str, harness: Harness) -> None:
    method = SERVICES[service].methods_by_name[name]
    corrupt = dict(CORRUPT)
    if any(f.type == f.TYPE_STRING for f in method.input_type.fields):  # else the bytes are just an unknown field
        corrupt["bad_utf8"] = strategies.bad_utf8_field(method.input_type)
    metadata = bearer("acme") if service == "gateway" else ()

    async def attempts() -> None:
        async with grpc.aio.insecure_channel(harness.suite.servers[service].address) as channel:
            for what, frame in corrupt.items():
                outcome = await invoke(channel, method, [frame], metadata, CALL_TIMEOUT_S)
                check_status(outcome)
                assert outcome.code == grpc.StatusCode.INVALID_ARGUMENT, (what, outcome.code, outcome.details)
                assert outcome.error is not None
                _, violations = status_details(outcome.error)
                assert [field for field, _ in violations] == ["request"], (what, violations)

    harness.run(attempts(), 60)
