package cogmesh_test

// End-to-end tests against a running suite; tests/e2e/test_go_client.py starts it with
// `cogmesh up`, the Go tool server (examples/toolserver, tools under the prefix go_) and
// the Go hook (examples/hookserver, denying go_reverse), and an agent "gopher" offered both
// tools. Without COGMESH_E2E_GATEWAY they skip.

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"cogmesh.dev/go/cogmesh"
	commonv1 "cogmesh.dev/go/gen/cogmesh/common/v1"
	gatewayv1 "cogmesh.dev/go/gen/cogmesh/gateway/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// hangBound only stops a test that hangs; nothing waits for it to pass.
const hangBound = 60 * time.Second

func gatewayAddress(t *testing.T, variable string) string {
	address := os.Getenv(variable)
	if address == "" {
		t.Skipf("%s is not set: run against a live suite (tests/e2e/test_go_client.py)", variable)
	}
	return address
}

func dial(t *testing.T, address string) *cogmesh.Client {
	client, err := cogmesh.Dial(address)
	if err != nil {
		t.Fatalf("dial %s: %v", address, err)
	}
	t.Cleanup(func() { client.Close() })
	return client
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	t.Cleanup(cancel)
	return ctx
}

func newSession(ctx context.Context, t *testing.T, client *cogmesh.Client, agent string) string {
	session, err := client.CreateSession(ctx, &gatewayv1.CreateSessionRequest{Agent: agent})
	if err != nil {
		t.Fatalf("create a session with %q: %v", agent, err)
	}
	return session.GetSessionId()
}

func run(ctx context.Context, t *testing.T, client *cogmesh.Client, sessionID, content string) *cogmesh.Turn {
	turn, err := cogmesh.Wait(client.SendMessage(ctx, &gatewayv1.SendMessageRequest{SessionId: sessionID, Content: content}))
	if err != nil {
		t.Fatalf("turn %q: %v", content, err)
	}
	return turn
}

// approve answers the approval a paused turn waits on and waits for the resumed turn.
func approve(ctx context.Context, t *testing.T, client *cogmesh.Client, session string, paused *cogmesh.Turn) *cogmesh.Turn {
	request := &gatewayv1.ResolveApprovalRequest{
		SessionId:   session,
		InterruptId: cogmesh.InterruptID(paused.Pause),
		Decision:    commonv1.ApprovalDecision_APPROVAL_DECISION_APPROVE,
	}
	resumed, err := cogmesh.Wait(client.ResolveApproval(ctx, request))
	if err != nil {
		t.Fatalf("resolve the approval: %v", err)
	}
	return resumed
}

func seqs(events []*commonv1.RuntimeEvent) []uint64 {
	out := make([]uint64, len(events))
	for i, event := range events {
		out[i] = event.GetSeq()
	}
	return out
}

// requireSeqs fails unless events carry exactly the seqs first, first+1, ..., last.
func requireSeqs(t *testing.T, events []*commonv1.RuntimeEvent, first, last uint64) {
	t.Helper()
	got := seqs(events)
	ok := uint64(len(got)) == last-first+1
	for i := 0; ok && i < len(got); i++ {
		ok = got[i] == first+uint64(i)
	}
	if !ok {
		t.Fatalf("seqs %v, want %d..%d each once", got, first, last)
	}
}

func TestTurnCallsTheGoToolServer(t *testing.T) {
	ctx := testContext(t)
	client := dial(t, gatewayAddress(t, "COGMESH_E2E_GATEWAY"))
	session := newSession(ctx, t, client, "gopher")
	turn := run(ctx, t, client, session, `@go_word_count {"text": "gophers dig tunnels"}`)
	requireSeqs(t, turn.Events, 1, uint64(len(turn.Events)))
	var started *commonv1.ToolCallStarted
	var finished *commonv1.ToolCallFinished
	for _, event := range turn.Events {
		if s := event.GetToolCallStarted(); s != nil {
			started = s
		}
		if f := event.GetToolCallFinished(); f != nil {
			finished = f
		}
	}
	if started.GetName() != "go_word_count" || started.GetArguments().AsMap()["text"] != "gophers dig tunnels" {
		t.Fatalf("tool_call_started = %v", started)
	}
	if started.GetSource() != "remote" || started.GetServer() != "text" || !finished.GetOk() {
		t.Fatalf("not a call of the Go tool server: %v, %v", started, finished)
	}
	if got, want := turn.Final.GetText(), "The go_word_count tool returned: 3"; got != want {
		t.Fatalf("final text %q, want %q", got, want)
	}
}

func TestGoHookDeniesAToolByName(t *testing.T) {
	ctx := testContext(t)
	client := dial(t, gatewayAddress(t, "COGMESH_E2E_GATEWAY"))
	session := newSession(ctx, t, client, "gopher")
	turn := run(ctx, t, client, session, `@go_reverse {"text": "gopher"}`)
	reason := "go_reverse is denied by the Go hook"
	told, failed := false, false
	for _, event := range turn.Events {
		told = told || strings.Contains(event.GetStatus().GetText(), reason)
		finished := event.GetToolCallFinished()
		failed = failed || finished.GetName() == "go_reverse" && !finished.GetOk() &&
			strings.Contains(finished.GetResultSummary(), reason)
	}
	if !told || !failed {
		t.Fatalf("no status event and failed call giving the hook's reason %q: %v", reason, turn.Events)
	}
	if !strings.Contains(turn.Final.GetText(), reason) {
		t.Fatalf("final text %q does not give the model the hook's reason", turn.Final.GetText())
	}
}

func TestApprovalAnsweredFromGo(t *testing.T) {
	ctx := testContext(t)
	client := dial(t, gatewayAddress(t, "COGMESH_E2E_GATEWAY"))
	session := newSession(ctx, t, client, "careful")
	paused := run(ctx, t, client, session, "What is 12 * 12?")
	approval := paused.Pause.GetApprovalRequired()
	if approval == nil || approval.GetActionName() != "calculator" || paused.Final != nil {
		t.Fatalf("the careful agent did not pause for the calculator: %v", paused.Events)
	}
	resumed := approve(ctx, t, client, session, paused)
	if got := resumed.Final.GetText(); got != "12 * 12 = 144." {
		t.Fatalf("final text %q after the approval", got)
	}
	if resumed.ID != paused.ID {
		t.Fatalf("the resumed turn is %s, the paused one %s", resumed.ID, paused.ID)
	}
	last := paused.Events[len(paused.Events)-1].GetSeq()
	requireSeqs(t, resumed.Events, last+1, last+uint64(len(resumed.Events)))
}

func TestQuestionAnsweredFromGo(t *testing.T) {
	ctx := testContext(t)
	client := dial(t, gatewayAddress(t, "COGMESH_E2E_GATEWAY"))
	session := newSession(ctx, t, client, "careful")
	paused := run(ctx, t, client, session, "@ask_user Which city?")
	if paused.Pause.GetUserInputRequested().GetPrompt() != "Which city?" {
		t.Fatalf("the turn did not pause for the question: %v", paused.Events)
	}
	request := &gatewayv1.AnswerInterruptRequest{
		SessionId:   session,
		InterruptId: cogmesh.InterruptID(paused.Pause),
		Answer:      &gatewayv1.AnswerInterruptRequest_UserInput{UserInput: "Lisbon"},
	}
	resumed, err := cogmesh.Wait(client.AnswerInterrupt(ctx, request))
	if err != nil {
		t.Fatalf("answer the question: %v", err)
	}
	if !strings.Contains(resumed.Final.GetText(), "Lisbon") || resumed.ID != paused.ID {
		t.Fatalf("the resumed turn %s ended with %q", resumed.ID, resumed.Final.GetText())
	}
}

// proxy forwards TCP connections to the gateway and can break every one of them at
// once, as a network failure or a restarted load balancer would.
type proxy struct {
	listener net.Listener
	target   string
	mu       sync.Mutex
	conns    []net.Conn
	accepted int
}

func startProxy(t *testing.T, target string) *proxy {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{listener: listener, target: target}
	go p.serve()
	t.Cleanup(func() {
		listener.Close()
		p.breakAll()
	})
	return p
}

func (p *proxy) serve() {
	for {
		downstream, err := p.listener.Accept()
		if err != nil {
			return // closed
		}
		upstream, err := net.Dial("tcp", p.target)
		if err != nil {
			downstream.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, downstream, upstream)
		p.accepted++
		p.mu.Unlock()
		go pipe(upstream, downstream)
		go pipe(downstream, upstream)
	}
}

func pipe(to, from net.Conn) {
	io.Copy(to, from)
	to.Close()
}

func (p *proxy) breakAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, conn := range p.conns {
		conn.Close()
	}
	p.conns = nil
}

func (p *proxy) connections() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// nextUntil reads the stream up to and including the event with seq last.
func nextUntil(t *testing.T, stream *cogmesh.Stream, last uint64) []*commonv1.RuntimeEvent {
	var events []*commonv1.RuntimeEvent
	for len(events) == 0 || events[len(events)-1].GetSeq() < last {
		event, err := stream.Next()
		if err != nil {
			t.Fatalf("subscriber after %v: %v", seqs(events), err)
		}
		events = append(events, event)
	}
	return events
}

func TestSubscribeResumesAfterABrokenStream(t *testing.T) {
	ctx := testContext(t)
	address := gatewayAddress(t, "COGMESH_E2E_GATEWAY")
	client := dial(t, address)
	p := startProxy(t, address)
	watcher := dial(t, p.listener.Addr().String())

	session := newSession(ctx, t, client, "careful")
	subscription := watcher.Subscribe(ctx, &gatewayv1.SubscribeRequest{SessionId: session})
	defer subscription.Close()
	paused := run(ctx, t, client, session, "What is 12 * 12?")
	pauseSeq := paused.Events[len(paused.Events)-1].GetSeq()
	seen := nextUntil(t, subscription, pauseSeq)

	// The watcher's connection breaks while the turn waits; every later event can only
	// reach it through a new Subscribe from its cursor.
	p.breakAll()
	resumed := approve(ctx, t, client, session, paused)
	finalSeq := resumed.Events[len(resumed.Events)-1].GetSeq()
	seen = append(seen, nextUntil(t, subscription, finalSeq)...)

	requireSeqs(t, seen, 1, finalSeq)
	if final := seen[len(seen)-1].GetFinal(); final.GetText() != "12 * 12 = 144." {
		t.Fatalf("the watcher's last event is %v", seen[len(seen)-1])
	}
	if subscription.Resumes() < 1 || p.connections() < 2 {
		t.Fatalf("the stream was not resumed: %d resumes, %d connections", subscription.Resumes(), p.connections())
	}
}

func TestBadRequestIsInvalidArgumentNamingTheField(t *testing.T) {
	ctx := testContext(t)
	client := dial(t, gatewayAddress(t, "COGMESH_E2E_GATEWAY"))
	_, err := cogmesh.Wait(client.SendMessage(ctx, &gatewayv1.SendMessageRequest{Content: "hello"}))
	var e *cogmesh.Error
	if !errors.As(err, &e) {
		t.Fatalf("want a *cogmesh.Error, got %T: %v", err, err)
	}
	if e.Code != codes.InvalidArgument || status.Code(err) != codes.InvalidArgument {
		t.Fatalf("code %s, want InvalidArgument: %v", e.Code, e)
	}
	if e.Reason != "INVALID_ARGUMENT" {
		t.Fatalf("ErrorInfo reason %q", e.Reason)
	}
	if len(e.Violations) != 1 || e.Violations[0].Field != "session_id" || e.Violations[0].Description == "" {
		t.Fatalf("field violations %+v, want one naming session_id", e.Violations)
	}

	_, err = client.CreateSession(ctx, &gatewayv1.CreateSessionRequest{Agent: "no-such-agent"})
	if e := cogmesh.FromError(err); e == nil || e.Code != codes.NotFound || e.Reason != "AGENT_NOT_FOUND" {
		t.Fatalf("an unknown agent gave %v", err)
	}
}

func TestRateLimitRefusalCarriesRetryInfo(t *testing.T) {
	ctx := testContext(t)
	// A gateway that lets one call through, then refuses for a long time (burst 1, a token per 1000 s).
	client := dial(t, gatewayAddress(t, "COGMESH_E2E_LIMITED_GATEWAY"))
	var refusal *cogmesh.Error
	for attempt := 0; attempt < 2 && refusal == nil; attempt++ {
		_, err := client.CreateSession(ctx, &gatewayv1.CreateSessionRequest{Agent: "default"})
		refusal = cogmesh.FromError(err)
	}
	if refusal == nil || refusal.Code != codes.ResourceExhausted || refusal.Reason != "RATE_LIMITED" {
		t.Fatalf("want RESOURCE_EXHAUSTED (RATE_LIMITED), got %v", refusal)
	}
	if refusal.RetryDelay <= 0 || refusal.Metadata["setting"] != "COGMESH_TENANT_RATE_PER_S" {
		t.Fatalf("refusal without its RetryInfo delay or setting: %+v", refusal)
	}
}

// listTurns reads every page of a session's turns, with their steps.
func listTurns(ctx context.Context, t *testing.T, client *cogmesh.Client, session string) []*commonv1.TurnRecord {
	var turns []*commonv1.TurnRecord
	token := ""
	for {
		page, err := client.ListTurns(ctx, &gatewayv1.ListTurnsRequest{SessionId: session, PageSize: 2, PageToken: token, IncludeSteps: true})
		if err != nil {
			t.Fatalf("list the turns of %s: %v", session, err)
		}
		turns = append(turns, page.GetTurns()...)
		if token = page.GetNextPageToken(); token == "" {
			return turns
		}
	}
}

// listMessages reads the conversation, as it was after throughTurn when it is not "".
func listMessages(ctx context.Context, t *testing.T, client *cogmesh.Client, session, throughTurn string) []string {
	var said []string
	token := ""
	for {
		page, err := client.ListMessages(ctx, &gatewayv1.ListMessagesRequest{SessionId: session, PageToken: token, ThroughTurnId: throughTurn})
		if err != nil {
			t.Fatalf("list the messages of %s: %v", session, err)
		}
		for _, message := range page.GetMessages() {
			said = append(said, message.GetRole().String()+": "+message.GetContent())
		}
		if token = page.GetNextPageToken(); token == "" {
			return said
		}
	}
}

func TestForkAndRewindFromGo(t *testing.T) {
	ctx := testContext(t)
	client := dial(t, gatewayAddress(t, "COGMESH_E2E_GATEWAY"))
	session := newSession(ctx, t, client, "default")
	questions := []string{"What is 2 + 2?", "What is 3 * 3?", "What is 10 - 4?"}
	for _, question := range questions {
		run(ctx, t, client, session, question)
	}
	turns := listTurns(ctx, t, client, session)
	if len(turns) != 3 {
		t.Fatalf("%d turns, want 3: %v", len(turns), turns)
	}
	for i, turn := range turns {
		if turn.GetUserMessage() != questions[i] || turn.GetOutcome() != commonv1.TurnOutcome_TURN_OUTCOME_COMPLETED ||
			int(turn.GetIndex()) != i+1 || len(turn.GetSteps()) == 0 {
			t.Fatalf("turn %d: %v", i+1, turn)
		}
	}
	afterFirst := listMessages(ctx, t, client, session, turns[0].GetTurnId())
	if len(afterFirst) != int(turns[0].GetMessageCount()) || !strings.HasSuffix(afterFirst[len(afterFirst)-1], "2 + 2 = 4.") {
		t.Fatalf("the conversation after the first turn: %v", afterFirst)
	}

	// A fork after the first turn holds its conversation and says where it came from.
	forked, err := client.ForkSession(ctx, &gatewayv1.ForkSessionRequest{SessionId: session, TurnId: turns[0].GetTurnId()})
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	fork := forked.GetSession()
	if origin := fork.GetForkedFrom(); origin.GetSessionId() != session || origin.GetTurnId() != turns[0].GetTurnId() {
		t.Fatalf("the fork came from %v", origin)
	}
	if got := listMessages(ctx, t, client, fork.GetSessionId(), ""); strings.Join(got, "\n") != strings.Join(afterFirst, "\n") ||
		int(forked.GetMessageCount()) != len(afterFirst) {
		t.Fatalf("the fork holds %v (%d copied), want %v", got, forked.GetMessageCount(), afterFirst)
	}
	lineage, err := client.Gateway.ListSessions(ctx, &gatewayv1.ListSessionsRequest{ForkedFrom: session})
	if err != nil || len(lineage.GetSessions()) != 1 || lineage.GetSessions()[0].GetSessionId() != fork.GetSessionId() {
		t.Fatalf("the forks of %s: %v, %v", session, lineage.GetSessions(), err)
	}

	// A watcher sees the rewind; what it voids is the second and third turns' events.
	watch := client.Subscribe(ctx, &gatewayv1.SubscribeRequest{SessionId: session})
	defer watch.Close()
	rewind, err := client.RewindSession(ctx, &gatewayv1.RewindSessionRequest{SessionId: session, TurnId: turns[1].GetTurnId()})
	if err != nil {
		t.Fatalf("rewind: %v", err)
	}
	rewound := rewind.GetEvent().GetRewound()
	if rewound == nil || rewound.GetVoidAfterSeq() != turns[1].GetFirstSeq()-1 || rewound.GetVoidThroughSeq() != turns[2].GetLastSeq() ||
		len(rewound.GetDroppedTurnIds()) != 2 || rewound.GetReason() != "rewind" {
		t.Fatalf("the rewound event %v for turns %v", rewind.GetEvent(), turns)
	}
	seen := nextUntil(t, watch, rewind.GetEvent().GetSeq())
	for _, event := range cogmesh.WithoutVoided(seen) {
		if id := event.GetTurnId(); id == turns[1].GetTurnId() || id == turns[2].GetTurnId() {
			t.Fatalf("an event of a dropped turn still counts: %v", event)
		}
	}
	if left := listTurns(ctx, t, client, session); len(left) != 1 || left[0].GetTurnId() != turns[0].GetTurnId() {
		t.Fatalf("turns after the rewind: %v", left)
	}
	if got := listMessages(ctx, t, client, session, ""); strings.Join(got, "\n") != strings.Join(afterFirst, "\n") {
		t.Fatalf("the conversation after the rewind: %v", got)
	}

	_, err = client.RewindSession(ctx, &gatewayv1.RewindSessionRequest{SessionId: session, TurnId: "no-such-turn"})
	if e := cogmesh.FromError(err); e == nil || e.Code != codes.NotFound {
		t.Fatalf("rewinding to an unknown turn gave %v", err)
	}
}
