"""voided() in the Python client: the seqs that no longer count, from a takeover's step_retried notice and
from a SessionRewound event (RewindSession, a ROLLBACK turn), each voiding (void_after_seq, void_through_seq]."""

from __future__ import annotations

from cogmesh.client import voided
from cogmesh.client.results import TurnResult
from cogmesh.common.v1 import events_pb2
from services.kit.protos import dict_to_struct


def delta(seq: int, text: str, turn_id: str = "t1") -> events_pb2.RuntimeEvent:
    return events_pb2.RuntimeEvent(seq=seq, turn_id=turn_id, assistant_delta=events_pb2.AssistantDelta(text=text))


def rewound(seq: int, after: int, through: int) -> events_pb2.RuntimeEvent:
    return events_pb2.RuntimeEvent(
        seq=seq,
        rewound=events_pb2.SessionRewound(
            turn_id="t2", dropped_turn_ids=["t2", "t3"], void_after_seq=after, void_through_seq=through
        ),
    )


def retried(seq: int, after: int, through: int) -> events_pb2.RuntimeEvent:
    metadata = dict_to_struct({"void_after_seq": after, "void_through_seq": through})
    return events_pb2.RuntimeEvent(
        seq=seq, native_notice=events_pb2.NativeNotice(kind="step_retried", metadata=metadata)
    )


def test_a_rewound_event_voids_its_range_and_nothing_else() -> None:
    events = [delta(1, "a"), delta(2, "b", "t2"), delta(3, "c", "t3"), rewound(4, after=1, through=3)]
    assert voided(events) == {2, 3}


def test_the_range_excludes_its_start_and_includes_its_end() -> None:
    assert voided([rewound(10, after=5, through=6)]) == {6}


def test_an_empty_range_voids_nothing() -> None:
    """A rewind of turns whose events the log no longer holds names an empty range."""
    assert voided([rewound(10, after=0, through=0)]) == set()


def test_rewinds_and_retried_steps_add_up() -> None:
    events = [retried(5, after=1, through=3), rewound(9, after=6, through=8), rewound(12, after=10, through=11)]
    assert voided(events) == {2, 3, 7, 8, 11}


def test_a_turn_after_a_rollback_reads_only_its_own_text() -> None:
    """A ROLLBACK turn's stream may carry the rewound event that voids the stopped turn's deltas."""
    events = [delta(1, "stale ", "t0"), rewound(2, after=0, through=1), delta(3, "fresh")]
    assert TurnResult(events).text == "fresh"


def test_events_without_a_void_range_void_nothing() -> None:
    assert voided([delta(1, "a"), events_pb2.RuntimeEvent(seq=2, final=events_pb2.FinalResult(text="a"))]) == set()
