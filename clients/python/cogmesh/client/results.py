"""Events and outcomes of turns: what ends a stream, a paused turn, a collected turn."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from google.protobuf import json_format

from cogmesh.common.v1 import events_pb2

PauseKind = Literal["approval", "user_input", "client_tool"]
_PAUSES: dict[str, PauseKind] = {
    "approval_required": "approval",
    "user_input_requested": "user_input",
    "client_tool_call": "client_tool",
}


def kind(event: events_pb2.RuntimeEvent) -> str:
    """The event's payload name ("assistant_delta", "final", ...); "" for a kind these stubs do not know."""
    return event.WhichOneof("payload") or ""


def is_paused(event: events_pb2.RuntimeEvent) -> bool:
    """The status that ends a turn's stream while it waits for an answer."""
    return event.HasField("status") and event.status.state == events_pb2.TURN_STATE_PAUSED


def is_terminal(event: events_pb2.RuntimeEvent) -> bool:
    """The last event of a turn's stream: final, error, or the pause that waits for an answer."""
    return kind(event) in ("final", "error") or is_paused(event)


def is_final(event: events_pb2.RuntimeEvent) -> bool:
    """The turn's answer: the last event of a turn that succeeded."""
    return event.HasField("final")


def is_error(event: events_pb2.RuntimeEvent) -> bool:
    """The turn's failure: the last event of a turn that failed (or was cancelled)."""
    return event.HasField("error")


def text(event: events_pb2.RuntimeEvent) -> str:
    """The answer's text an event carries: a delta's piece, the final answer, or what a failed turn had
    streamed; "" for every other event."""
    name = kind(event)
    if name == "assistant_delta":
        return str(event.assistant_delta.text)
    if name == "final":
        return str(event.final.text)
    if name == "error":
        return str(event.error.partial_text)
    return ""


@dataclass(frozen=True)
class Pause:
    """A paused turn waiting for an answer; pass it to approve / reject / edit / answer / send_tool_result."""

    kind: PauseKind
    session_id: str
    turn_id: str
    interrupt_id: str
    event: events_pb2.RuntimeEvent

    @property
    def approval(self) -> events_pb2.ApprovalRequired:
        return self.event.approval_required

    @property
    def prompt(self) -> str:
        """The question, for user_input."""
        return str(self.event.user_input_requested.prompt)

    @property
    def tool_name(self) -> str:
        """The tool waiting for approval or for the client to run it."""
        if self.kind == "client_tool":
            return str(self.event.client_tool_call.call.name)
        return str(self.event.approval_required.action_name)

    @property
    def arguments(self) -> dict[str, Any]:
        """The proposed arguments of the tool call (approval, client_tool)."""
        if self.kind == "client_tool":
            return json_format.MessageToDict(self.event.client_tool_call.call.arguments)
        return json_format.MessageToDict(self.event.approval_required.arguments)


def voided(events: list[events_pb2.RuntimeEvent]) -> set[int]:
    """Seqs of events that no longer count, each range (void_after_seq, void_through_seq] of:

    - a `native_notice` of kind "step_retried": the part of a step that ran again on another
      runtime replica (a turn taken over after its runtime stopped starts with one);
    - a `rewound` event (SessionRewound): turns dropped from the conversation by RewindSession
      or by a ROLLBACK turn.
    """
    void: set[int] = set()
    for event in events:
        if event.HasField("native_notice") and event.native_notice.kind == "step_retried":
            fields = event.native_notice.metadata.fields
            after, through = int(fields["void_after_seq"].number_value), int(fields["void_through_seq"].number_value)
            void.update(range(after + 1, through + 1))
        elif event.HasField("rewound"):
            void.update(range(event.rewound.void_after_seq + 1, event.rewound.void_through_seq + 1))
    return void


@dataclass
class TurnResult:
    """Everything a turn's stream carried, and its outcome: `ok` (final), `error`, or `pause`."""

    events: list[events_pb2.RuntimeEvent] = field(default_factory=list)

    @property
    def last(self) -> events_pb2.RuntimeEvent:
        return self.events[-1]

    @property
    def turn_id(self) -> str:
        return self.events[0].turn_id if self.events else ""

    @property
    def ok(self) -> bool:
        return bool(self.events) and self.last.HasField("final")

    @property
    def paused(self) -> bool:
        return bool(self.events) and is_paused(self.last)

    @property
    def text(self) -> str:
        """The final answer, or what was streamed before an error or a pause (or of an answer so long
        that the final event left it out: FinalResult.text_omitted)."""
        if self.ok and not self.last.final.text_omitted:
            return str(self.last.final.text)
        void = voided(self.events)
        return "".join(
            e.assistant_delta.text for e in self.events if e.HasField("assistant_delta") and e.seq not in void
        )

    @property
    def final(self) -> events_pb2.FinalResult | None:
        return self.last.final if self.ok else None

    @property
    def structured_output(self) -> Any:
        """The parsed answer of a turn with an output schema (a dict), else None."""
        if not self.ok or not self.last.final.HasField("structured_output"):
            return None
        return json_format.MessageToDict(self.last.final.structured_output)

    @property
    def error(self) -> events_pb2.TurnError | None:
        return self.last.error if self.events and self.last.HasField("error") else None

    @property
    def pause(self) -> Pause | None:
        """What the paused turn waits for, or None when it is not paused."""
        if not self.paused:
            return None
        interrupt_id = self.last.status.interrupt_id
        for event in reversed(self.events):
            name = kind(event)
            if name in _PAUSES and getattr(event, name).interrupt_id == interrupt_id:
                return Pause(_PAUSES[name], event.session_id, event.turn_id, interrupt_id, event)
        raise LookupError(f"the turn paused on {interrupt_id!r} but its stream did not carry that request")
