"""The sessions servicer's two tables cover the whole API: every RPC of the proto has a row
in RPCS (a new RPC cannot be forgotten), and every domain error a row in STATUSES."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf.descriptor import MethodDescriptor

from cogmesh.sessions.v1 import sessions_pb2, sessions_pb2_grpc
from services.sessions import model
from services.sessions.model import NewSession
from services.sessions.servicer import RPCS, STATUSES, STREAMS, SessionsServicer, list_scoped, status_of
from services.sessions.store import MemorySessionStore

SERVICE = sessions_pb2.DESCRIPTOR.services_by_name["SessionsService"]


def test_every_rpc_of_the_proto_has_a_row_and_every_row_an_rpc() -> None:
    in_proto = {method.name for method in SERVICE.methods} - STREAMS
    assert sorted(in_proto - RPCS.keys()) == [], "RPCs of SessionsService without a row in servicer.RPCS"
    assert sorted(RPCS.keys() - in_proto) == [], "rows of servicer.RPCS that SessionsService does not have"


@pytest.mark.parametrize("method", [m for m in SERVICE.methods if m.name not in STREAMS], ids=lambda m: m.name)
def test_each_row_takes_its_rpcs_request_and_answers_it(method: MethodDescriptor) -> None:
    name = method.name
    assert RPCS[name].request.DESCRIPTOR is method.input_type
    # The servicer answers from the row, not with the generated base's UNIMPLEMENTED.
    assert getattr(SessionsServicer, name) is not getattr(sessions_pb2_grpc.SessionsServiceServicer, name)


# One of each domain error the store raises, with what its status must say.
EXAMPLES: dict[type[model.SessionError], tuple[model.SessionError, grpc.StatusCode]] = {
    model.SessionNotFound: (model.SessionNotFound("s1"), grpc.StatusCode.NOT_FOUND),
    model.TurnNotFound: (model.TurnNotFound("s1", "t1"), grpc.StatusCode.NOT_FOUND),
    model.HistoryChanged: (model.HistoryChanged("s1"), grpc.StatusCode.ABORTED),
    model.LeaseHeld: (model.LeaseHeld("s1", "turn-1", 1.5), grpc.StatusCode.FAILED_PRECONDITION),
    model.StaleLease: (model.StaleLease("s1", 7), grpc.StatusCode.FAILED_PRECONDITION),
    model.CheckpointNotFound: (model.CheckpointNotFound("s1", "i1"), grpc.StatusCode.NOT_FOUND),
    model.CheckpointExists: (model.CheckpointExists("s1", "i1"), grpc.StatusCode.ALREADY_EXISTS),
    model.CheckpointConflict: (
        model.CheckpointConflict("s1", "i1", "has no decision yet"),
        grpc.StatusCode.FAILED_PRECONDITION,
    ),
    model.LimitExceeded: (model.LimitExceeded("100 goals"), grpc.StatusCode.RESOURCE_EXHAUSTED),
    model.InvalidValue: (
        model.InvalidValue("covered_message_count", "covers 9 of 3"),
        grpc.StatusCode.INVALID_ARGUMENT,
    ),
    model.StoreUnavailable: (model.StoreUnavailable("connection refused"), grpc.StatusCode.UNAVAILABLE),
}


def test_every_domain_error_has_a_status_row() -> None:
    raised = set(model.SessionError.__subclasses__())
    assert sorted(e.__name__ for e in raised - STATUSES.keys()) == [], "domain errors without a row in STATUSES"
    assert raised == EXAMPLES.keys(), "give the new domain error an example here"


@pytest.mark.parametrize("kind", list(EXAMPLES), ids=lambda kind: kind.__name__)
def test_a_domain_error_becomes_its_status_with_its_message(kind: type[model.SessionError]) -> None:
    error, code = EXAMPLES[kind]
    status = status_of(error)
    assert status.code == code
    assert str(error) in status.message


def test_an_error_without_a_row_is_internal() -> None:
    assert status_of(model.SessionError("surprise")).code == grpc.StatusCode.INTERNAL


async def test_a_scope_filter_pages_through_every_matching_session_once() -> None:
    store = MemorySessionStore()
    made = []
    for i in range(9):
        record, _ = await store.create("t", NewSession("", "", "default", scope={"end_user": "ab"[i % 3 == 0]}))
        made.append(record)
    wanted = [r.session_id for r in reversed(made) if r.scope["end_user"] == "a"]  # newest first
    seen: list[str] = []
    cursor: int | None = None
    while True:
        page = await list_scoped(store, "t", cursor, 2, {"end_user": "a"})
        assert len(page.items) <= 2
        seen += [r.session_id for r in page.items]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == wanted
