package cogmesh

import (
	"fmt"
	"io"
	"strings"

	commonv1 "cogmesh.dev/go/gen/cogmesh/common/v1"
)

// IsTerminal reports whether event is the last of its turn: the final answer or the error.
func IsTerminal(event *commonv1.RuntimeEvent) bool {
	return event.GetFinal() != nil || event.GetError() != nil
}

// IsPause reports whether event is the status with which a turn pauses: it waits for an
// approval, the user's input or a client tool's result, and its interrupt_id says which.
func IsPause(event *commonv1.RuntimeEvent) bool {
	return event.GetStatus().GetState() == commonv1.TurnState_TURN_STATE_PAUSED
}

// InterruptID is the interrupt an approval_required, user_input_requested or
// client_tool_call event asks to answer, or a pause status waits on; "" for any other event.
func InterruptID(event *commonv1.RuntimeEvent) string {
	switch payload := event.GetPayload().(type) {
	case *commonv1.RuntimeEvent_Status:
		return payload.Status.GetInterruptId()
	case *commonv1.RuntimeEvent_ApprovalRequired:
		return payload.ApprovalRequired.GetInterruptId()
	case *commonv1.RuntimeEvent_UserInputRequested:
		return payload.UserInputRequested.GetInterruptId()
	case *commonv1.RuntimeEvent_ClientToolCall:
		return payload.ClientToolCall.GetInterruptId()
	}
	return ""
}

// Turn is what one turn's stream carried, up to its end or its pause.
type Turn struct {
	// ID is the turn's id; a paused turn keeps it when it resumes.
	ID string
	// Events are every event the stream handed out, in seq order.
	Events []*commonv1.RuntimeEvent
	// Final is the answer of a turn that completed; nil otherwise.
	Final *commonv1.FinalResult
	// Pause is the event a paused turn waits on (approval_required, user_input_requested
	// or client_tool_call; the pause status when the stream did not carry it); nil
	// otherwise. InterruptID(Pause) is what ResolveApproval or AnswerInterrupt answers.
	Pause *commonv1.RuntimeEvent
}

// VoidRange is the seq range (after, through] of events that event says no longer count,
// and ok false when it voids nothing:
//
//   - a rewound event (RewindSession, or a ROLLBACK turn's predecessor): the dropped turns'
//     events;
//   - a native_notice of kind "step_retried" (metadata void_after_seq, void_through_seq): the
//     part of a step that ran again on another runtime replica.
func VoidRange(event *commonv1.RuntimeEvent) (after, through uint64, ok bool) {
	if rewound := event.GetRewound(); rewound != nil {
		return rewound.GetVoidAfterSeq(), rewound.GetVoidThroughSeq(), true
	}
	notice := event.GetNativeNotice()
	if notice == nil || notice.GetKind() != "step_retried" {
		return 0, 0, false
	}
	fields := notice.GetMetadata().GetFields()
	return uint64(fields["void_after_seq"].GetNumberValue()), uint64(fields["void_through_seq"].GetNumberValue()), true
}

// Voided is the set of seqs of events that no longer count: those in the void range of a
// rewound event or a "step_retried" notice among events (VoidRange). A client rebuilding
// the conversation or drawing assistant deltas skips them.
func Voided(events []*commonv1.RuntimeEvent) map[uint64]bool {
	void := map[uint64]bool{}
	for _, event := range events {
		after, through, ok := VoidRange(event)
		if !ok {
			continue
		}
		for seq := after + 1; seq <= through; seq++ {
			void[seq] = true
		}
	}
	return void
}

// WithoutVoided is events without those a rewound event or a retried step voided, in order.
func WithoutVoided(events []*commonv1.RuntimeEvent) []*commonv1.RuntimeEvent {
	void := Voided(events)
	kept := make([]*commonv1.RuntimeEvent, 0, len(events))
	for _, event := range events {
		if !void[event.GetSeq()] {
			kept = append(kept, event)
		}
	}
	return kept
}

// Text is the turn's answer: the final text, or the assistant deltas streamed before an
// error or a pause, without those a retried step voided.
func (t *Turn) Text() string {
	if t.Final != nil && !t.Final.GetTextOmitted() { // a reply over 512 KiB is in the deltas only
		return t.Final.GetText()
	}
	void := Voided(t.Events)
	var text strings.Builder
	for _, event := range t.Events {
		if delta := event.GetAssistantDelta(); delta != nil && !void[event.GetSeq()] {
			text.WriteString(delta.GetText())
		}
	}
	return text.String()
}

// TurnFailedError is a turn that ended with an error event.
type TurnFailedError struct {
	TurnID string
	Err    *commonv1.TurnError
}

func (e *TurnFailedError) Error() string {
	return fmt.Sprintf("turn %s failed (%s): %s", e.TurnID, e.Err.GetKind(), e.Err.GetMessage())
}

// Wait reads a turn's stream to its end and closes it. A turn that pauses is no error:
// Turn.Pause holds what it waits on. An error event is a *TurnFailedError.
func Wait(stream *Stream) (*Turn, error) {
	defer stream.Close()
	turn := &Turn{}
	for {
		event, err := stream.Next()
		if err == io.EOF {
			return turn, nil
		}
		if err != nil {
			return turn, err
		}
		turn.ID = event.GetTurnId()
		turn.Events = append(turn.Events, event)
		switch {
		case event.GetFinal() != nil:
			turn.Final = event.GetFinal()
		case event.GetError() != nil:
			return turn, &TurnFailedError{TurnID: turn.ID, Err: event.GetError()}
		case IsPause(event):
			turn.Pause = pauseRequest(turn.Events, event.GetStatus().GetInterruptId())
		}
	}
}

// pauseRequest is the event that asked for the answer a turn now waits on; the pause
// status (the last event) when the stream did not carry it.
func pauseRequest(events []*commonv1.RuntimeEvent, interruptID string) *commonv1.RuntimeEvent {
	last := len(events) - 1
	for i := last - 1; i >= 0; i-- {
		if InterruptID(events[i]) == interruptID {
			return events[i]
		}
	}
	return events[last]
}
