"""The Python client's event helpers: is_final, is_error and the text an event carries."""

from __future__ import annotations

from cogmesh.client import is_error, is_final, text
from cogmesh.common.v1 import events_pb2

DELTA = events_pb2.RuntimeEvent(assistant_delta=events_pb2.AssistantDelta(text="4"))
FINAL = events_pb2.RuntimeEvent(final=events_pb2.FinalResult(text="2 + 2 = 4."))
ERROR = events_pb2.RuntimeEvent(error=events_pb2.TurnError(message="cancelled", partial_text="2 +"))
STATUS = events_pb2.RuntimeEvent(status=events_pb2.StatusUpdate(text="thinking"))


def test_helpers_tell_the_end_and_its_text() -> None:
    assert [is_final(e) for e in (DELTA, FINAL, ERROR, STATUS)] == [False, True, False, False]
    assert [is_error(e) for e in (DELTA, FINAL, ERROR, STATUS)] == [False, False, True, False]
    assert [text(e) for e in (DELTA, FINAL, ERROR, STATUS)] == ["4", "2 + 2 = 4.", "2 +", ""]
