"""TurnResult.text in the Python client: the final answer, or what was streamed (voided deltas left out)."""

from __future__ import annotations

from cogmesh.client.results import TurnResult
from cogmesh.common.v1 import events_pb2
from services.kit.protos import dict_to_struct


def delta(seq: int, text: str) -> events_pb2.RuntimeEvent:
    return events_pb2.RuntimeEvent(seq=seq, assistant_delta=events_pb2.AssistantDelta(text=text))


def turn(final: events_pb2.FinalResult) -> TurnResult:
    retried = events_pb2.RuntimeEvent(
        seq=4,
        native_notice=events_pb2.NativeNotice(
            kind="step_retried", metadata=dict_to_struct({"void_after_seq": 1, "void_through_seq": 3})
        ),
    )
    events = [delta(1, "The "), delta(2, "ans"), delta(3, "wer"), retried, delta(5, "answer is 42")]
    return TurnResult([*events, events_pb2.RuntimeEvent(seq=6, final=final)])


def test_a_completed_turn_reads_its_final_answer() -> None:
    assert turn(events_pb2.FinalResult(text="final")).text == "final"


def test_a_final_that_left_a_long_answer_out_reads_it_from_the_deltas() -> None:
    """Issue 31: a final event over 512 KiB leaves its text out (text_omitted); the deltas carry it."""
    assert turn(events_pb2.FinalResult(text_omitted=True)).text == "The answer is 42"
