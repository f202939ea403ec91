package cogmesh

import (
	"testing"

	commonv1 "cogmesh.dev/go/gen/cogmesh/common/v1"
	"google.golang.org/protobuf/types/known/structpb"
)

func delta(seq uint64, text string) *commonv1.RuntimeEvent {
	return &commonv1.RuntimeEvent{Seq: seq, Payload: &commonv1.RuntimeEvent_AssistantDelta{
		AssistantDelta: &commonv1.AssistantDelta{Text: text},
	}}
}

// A turn taken over by another runtime replica voids the deltas of the step it redid.
func TestTurnTextSkipsVoidedDeltas(t *testing.T) {
	metadata, err := structpb.NewStruct(map[string]any{"void_after_seq": 1, "void_through_seq": 3})
	if err != nil {
		t.Fatal(err)
	}
	retried := &commonv1.RuntimeEvent{Seq: 4, Payload: &commonv1.RuntimeEvent_NativeNotice{
		NativeNotice: &commonv1.NativeNotice{Kind: "step_retried", Metadata: metadata},
	}}
	turn := &Turn{Events: []*commonv1.RuntimeEvent{
		delta(1, "The "), delta(2, "ans"), delta(3, "wer"), retried, delta(5, "answer is 42"),
	}}
	if void := Voided(turn.Events); len(void) != 2 || !void[2] || !void[3] {
		t.Fatalf("voided seqs: %v", void)
	}
	if got := turn.Text(); got != "The answer is 42" {
		t.Fatalf("text: %q", got)
	}
	turn.Final = &commonv1.FinalResult{Text: "final"}
	if got := turn.Text(); got != "final" {
		t.Fatalf("text of a completed turn: %q", got)
	}
	turn.Final = &commonv1.FinalResult{TextOmitted: true} // a long reply: the final event leaves it out
	if got := turn.Text(); got != "The answer is 42" {
		t.Fatalf("text of a completed turn whose final left it out: %q", got)
	}
}

// A rewound event voids the dropped turns' events wherever it sits: after them.
func TestRewoundVoidsTheDroppedTurns(t *testing.T) {
	rewound := &commonv1.RuntimeEvent{Seq: 5, Payload: &commonv1.RuntimeEvent_Rewound{
		Rewound: &commonv1.SessionRewound{
			TurnId: "t2", DroppedTurnIds: []string{"t2", "t3"}, VoidAfterSeq: 1, VoidThroughSeq: 3, Reason: "rewind",
		},
	}}
	if after, through, ok := VoidRange(rewound); !ok || after != 1 || through != 3 {
		t.Fatalf("void range of the rewound event: %d, %d, %v", after, through, ok)
	}
	if _, _, ok := VoidRange(delta(1, "x")); ok {
		t.Fatal("an assistant delta voids nothing")
	}
	events := []*commonv1.RuntimeEvent{delta(1, "kept "), delta(2, "dropped "), delta(3, "too "), delta(4, "late"), rewound}
	if void := Voided(events); len(void) != 2 || !void[2] || !void[3] {
		t.Fatalf("voided seqs: %v", void)
	}
	var kept []uint64
	for _, event := range WithoutVoided(events) {
		kept = append(kept, event.GetSeq())
	}
	if len(kept) != 3 || kept[0] != 1 || kept[1] != 4 || kept[2] != 5 {
		t.Fatalf("events kept: %v", kept)
	}
	if got := (&Turn{Events: events}).Text(); got != "kept late" {
		t.Fatalf("text: %q", got)
	}
}
