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
