"""A turn's journal as the sessions service keeps it, and reading it back for a takeover.

Entries, in order (their kinds: sessions.v1.JournalEntryKind, services/lib/journal_kinds.py):
REQUEST (the RunTurnRequest that started the turn), then one per recorded step with the
loop's state after it (steps/state.py), an ANSWER when a paused turn is resumed with the
answer it waited for, and a TAKEOVER when another replica went on with the turn. Entries
recorded before the enum carry only their kind's name ("request", ...) and replay the same.
A state entry stores only what changed since the previous state for the two lists that
grow (the transcript and the turn's messages), so recording a step costs the step, not
the conversation.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cogmesh.runtime.v1 import runtime_pb2
from cogmesh.sessions.v1 import sessions_pb2
from services.lib import journal_kinds

GROWING = ("messages", "new_messages")  # lists that mostly grow: stored as (kept prefix, tail)
# The kinds this module reads (the runner and the turn's writer import them from here).
REQUEST, ANSWER, TAKEOVER, PAUSE = (
    journal_kinds.REQUEST,
    journal_kinds.ANSWER,
    journal_kinds.TAKEOVER,
    journal_kinds.PAUSE,
)


def encode_state(state: Mapping[str, Any], previous: Mapping[str, Any] | None) -> bytes:
    """`state` as stored: the growing lists as the part of `previous`'s they keep plus what follows."""
    data = dict(state)
    if previous is not None:
        for name in GROWING:
            old, new = previous.get(name, []), data.get(name, [])
            kept = _common_prefix(old, new)
            data[name] = {"keep": kept, "add": new[kept:]}
    return json.dumps(data, sort_keys=True, separators=(",", ":"), default=str).encode()


def decode_state(payload: bytes, previous: Mapping[str, Any] | None) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(payload.decode())
    if not isinstance(data, dict):
        raise ValueError("a journal state is not a JSON object")
    for name in GROWING:
        value = data.get(name)
        if isinstance(value, dict):
            if previous is None:
                raise ValueError(f"journal state keeps part of {name!r} from a previous state that is missing")
            data[name] = list(previous.get(name, []))[: value["keep"]] + list(value["add"])
    return data


def _common_prefix(old: Sequence[Any], new: Sequence[Any]) -> int:
    count = 0
    for a, b in zip(old, new, strict=False):
        if a != b:
            break
        count += 1
    return count


@dataclass(frozen=True)
class Replay:
    """Where a turn stands according to its journal."""

    request: runtime_pb2.RunTurnRequest | None  # None for a turn started before journals had requests
    state: dict[str, Any] | None  # the last recorded state; None: no step was recorded
    answer: dict[str, Any] | None  # the answer a resumed pause went on with, when that came last
    seq: int  # the session's last event seq when the last entry was recorded
    takeovers: int
    stalled: int = 0  # takeovers since the last recorded step or answer: the runtime stopped where it stood


def replay(entries: Sequence[sessions_pb2.JournalEntry]) -> Replay:
    request: runtime_pb2.RunTurnRequest | None = None
    state: dict[str, Any] | None = None
    answer: dict[str, Any] | None = None
    seq = takeovers = stalled = 0
    for entry in entries:
        seq = max(seq, entry.seq)
        kind = journal_kinds.kind_of(entry)
        if kind == REQUEST:
            request = runtime_pb2.RunTurnRequest.FromString(entry.state)
        elif kind == ANSWER:
            answer = json.loads(entry.state.decode())
            stalled = 0
        elif kind == TAKEOVER:
            takeovers += 1
            stalled += 1
        else:
            state = decode_state(entry.state, state)
            answer = None  # a step recorded after the answer: the answer is in the state
            stalled = 0
    return Replay(request, state, answer, seq, takeovers, stalled)
