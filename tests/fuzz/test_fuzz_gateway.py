"""Property-based fuzzing of every public RPC (cogmesh.gateway.v1.GatewayService).

For each RPC Hypothesis draws requests from the proto descriptors (random, huge and odd
field values, unknown enum numbers, deep Structs), often aimed at real sessions and
interrupts of both tenants, sends them as raw bytes that may be corrupted (unknown fields,
invalid UTF-8, truncation, noise) with random metadata and right or wrong API keys. Every
answer must be a proper status (never INTERNAL or UNKNOWN, never a hang); afterwards every
service is SERVING and nothing leaked: no session made by a refused call, no open stream
slot, no running turn, no event log of a session that does not exist.

    COGMESH_FUZZ_EXAMPLES=10000 pytest tests/fuzz   # the nightly size (see conftest.py)
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor as pb
from hypothesis import given
from hypothesis import strategies as st

from cogmesh.gateway.v1 import gateway_pb2
from tests.fuzz import strategies
from tests.fuzz.calls import Outcome, check_responses, check_status, decodes, events_of, invoke
from tests.fuzz.conftest import CALL_TIMEOUT_S, EXAMPLES, FUZZ, KEYS, PROFILE, REPORT, TEST_TIMEOUT_S, Harness

SERVICE = gateway_pb2.DESCRIPTOR.services_by_name["GatewayService"]
OK = grpc.StatusCode.OK


@dataclass(frozen=True)
class Attempt:
    frames: tuple[bytes, ...]
    metadata: tuple[tuple[str, str | bytes], ...]

    def tenant(self) -> str | None:
        """Whose key authorizes the call, read as the gateway reads it (the first header counts)."""
        header = next((v for k, v in self.metadata if k == "authorization"), None)
        if not isinstance(header, str):
            return None
        scheme, _, key = header.partition(" ")
        if scheme.lower() != "bearer":
            return None
        return next((tenant for tenant, known in KEYS.items() if known == key.strip()), None)


def converse_frames(ids: list[str]) -> st.SearchStrategy[list[Any]]:
    """A first frame that usually opens a real session, then any frames."""
    frame = strategies.messages(gateway_pb2.ConverseRequest.DESCRIPTOR, ids)
    opening = st.builds(
        lambda session_id, after, frame_id: gateway_pb2.ConverseRequest(
            frame_id=frame_id, open=gateway_pb2.ConverseOpen(session_id=session_id, after_seq=after)
        ),
        st.sampled_from(ids),
        st.one_of(st.none(), st.integers(0, 2**64 - 1)),
        strategies.strings,
    )
    return st.tuples(st.one_of(opening, opening, frame), st.lists(frame, max_size=3)).map(lambda t: [t[0], *t[1]])


def attempts(method: pb.MethodDescriptor, ids: list[str]) -> st.SearchStrategy[Attempt]:
    if method.client_streaming:
        requests = converse_frames(ids)
    else:
        requests = strategies.messages(method.input_type, ids).map(lambda m: [m])

    @st.composite
    def build(draw: st.DrawFn) -> Attempt:
        frames = tuple(draw(strategies.wire(message)) for message in draw(requests))
        return Attempt(frames, draw(strategies.metadata(KEYS)))

    return build()


def read_limit(method: pb.MethodDescriptor, frames: tuple[bytes, ...]) -> int | None:
    """Subscribe tails forever unless stop_when_idle: read one message of it, then hang up."""
    if method.name != "Subscribe" or not decodes(method, frames[0]):
        return None
    return None if gateway_pb2.SubscribeRequest.FromString(frames[0]).stop_when_idle else 1


def check_isolation(outcome: Outcome, tenant: str, foreign: set[str]) -> None:
    """Whatever a call returns belongs to the caller's tenant."""
    for response in outcome.responses:
        sessions = list(getattr(response, "sessions", []))
        if response.HasField("session") if "session" in response.DESCRIPTOR.fields_by_name else False:
            sessions.append(response.session)  # type: ignore[attr-defined]
        for session in sessions:
            assert session.tenant_id == tenant, f"{tenant} got a session of {session.tenant_id}"
        for event in events_of(response):
            assert event.session_id not in foreign, f"{tenant} got an event of another tenant's session"


@pytest.mark.timeout(TEST_TIMEOUT_S)
@pytest.mark.parametrize("name", [m.name for m in SERVICE.methods])
def test_public_rpc_survives_hostile_input(name: str, harness: Harness) -> None:
    method = SERVICE.methods_by_name[name]
    harness.resources = harness.run(harness.fresh_resources())  # earlier RPCs' fuzzing may have used them up
    before = {tenant: harness.run(harness.session_ids(tenant)) for tenant in KEYS}
    owned = {tenant: set(ids) for tenant, ids in before.items()}
    made: Counter[str] = Counter()
    faults = harness.server_faults()
    codes: Counter[str] = Counter()

    @FUZZ
    @given(attempt=attempts(method, harness.resources.ids))
    def hostile(attempt: Attempt) -> None:
        outcome = harness.run(
            invoke(
                harness.channel,
                method,
                attempt.frames,
                attempt.metadata,
                CALL_TIMEOUT_S,
                read_limit(method, attempt.frames),
            ),
            CALL_TIMEOUT_S + 5,
        )
        # A late write's INTERNAL is grpc's client's own, not the server's answer: counted apart.
        codes["LATE_WRITE" if outcome.lost_to_late_write else outcome.code.name] += 1
        assert harness.server_faults() == faults, f"a server answered INTERNAL/UNKNOWN ({outcome.code.name})"
        check_status(outcome)
        check_responses(outcome)
        tenant = attempt.tenant()
        if tenant is None:
            if outcome.lost_to_late_write:
                # Refused before the client's write landed (a loaded machine delays the write): the
                # refusal is lost to grpc's client; the server's fault counters above saw no fault.
                return
            assert outcome.code in (
                grpc.StatusCode.UNAUTHENTICATED,
                grpc.StatusCode.INVALID_ARGUMENT,  # bytes that do not parse are refused before authentication
                grpc.StatusCode.RESOURCE_EXHAUSTED,  # metadata over the transport's limit
            ), f"no valid key, yet {outcome.code.name}"
            return
        others = set().union(*(ids for t, ids in owned.items() if t != tenant))
        check_isolation(outcome, tenant, others)
        if outcome.code == OK and method.name == "CreateSession":
            made[tenant] += 1
            owned[tenant].add(outcome.responses[0].session.session_id)  # type: ignore[attr-defined]
        if outcome.code == OK and method.name == "DeleteSession" and outcome.responses[0].deleted:  # type: ignore[attr-defined]
            made[tenant] -= 1

    started = time.monotonic()
    hostile()
    if REPORT:
        seconds = round(time.monotonic() - started, 1)
        line = {"rpc": name, "profile": PROFILE, "examples": codes.total(), "seconds": seconds, "codes": dict(codes)}
        with open(REPORT, "a") as report:
            report.write(json.dumps(line) + "\n")

    harness.run(harness.settled(), 60)
    assert harness.running_turns() == {}, "turns still running after the fuzzing ended"
    assert harness.open_streams() == {}, "stream slots still held after every call ended"
    # Streams and turns may end after their caller moved on: their statuses count too.
    assert harness.server_faults() == faults, "a server answered INTERNAL/UNKNOWN after its caller had an answer"
    assert set(harness.run(harness.serving()).values()) == {"SERVING"}
    live: set[str] = set()
    for tenant in KEYS:
        now = harness.run(harness.session_ids(tenant))
        assert len(now) == len(before[tenant]) + made[tenant], f"{tenant}: sessions appeared or vanished"
        live |= now
    assert harness.logged_sessions() <= live, "event logs kept for sessions that do not exist"
    assert codes, "no example ran"
    if EXAMPLES >= 100:  # a real run must get past authentication and validation into the services
        assert codes["OK"] + codes["NOT_FOUND"] + codes["FAILED_PRECONDITION"] > 0, codes
