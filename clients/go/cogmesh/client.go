// Package cogmesh is a small Go client for cogmesh's public API,
// cogmesh.gateway.v1.GatewayService, over the stubs generated from protos/
// (cogmesh.dev/go/gen/cogmesh/<area>/v1).
//
// It adds what every client must do on top of the stubs: the API key on every call,
// a deadline on every unary call, streams that resume by seq after a break (each
// event once, in order), and errors with their google.rpc details decoded (*Error).
// Requests are the generated messages, so every option of the API is at hand;
// Client.Gateway is the generated client for the calls this package does not wrap.
package cogmesh

import (
	"context"
	"time"

	commonv1 "cogmesh.dev/go/gen/cogmesh/common/v1"
	gatewayv1 "cogmesh.dev/go/gen/cogmesh/gateway/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// DefaultAddress is where `cogmesh up` serves the gateway.
const DefaultAddress = "127.0.0.1:50051"

// Client calls one gateway over one connection; it is safe for concurrent use.
type Client struct {
	// Gateway is the generated client, for anything this package does not wrap.
	Gateway gatewayv1.GatewayServiceClient
	// Agents is the generated AgentService client: the tenant's agents as versioned resources.
	Agents gatewayv1.AgentServiceClient

	conn *grpc.ClientConn
	opts options
}

type options struct {
	apiKey         string
	timeout        time.Duration
	resumeAttempts int
	backoff        time.Duration
	dial           []grpc.DialOption
	secure         bool
}

// Option configures Dial.
type Option func(*options)

// WithAPIKey sends `authorization: Bearer <key>` on every call.
func WithAPIKey(key string) Option { return func(o *options) { o.apiKey = key } }

// WithTimeout is the deadline of a unary call whose context has none (default 10 s).
func WithTimeout(timeout time.Duration) Option { return func(o *options) { o.timeout = timeout } }

// WithResumeAttempts bounds how many times in a row a broken stream is reconnected
// without receiving anything (default 5; 0 never resumes).
func WithResumeAttempts(n int) Option { return func(o *options) { o.resumeAttempts = n } }

// WithBackoff is the first wait before reconnecting a broken stream; it doubles on
// each failure in a row, up to 2 s (default 100 ms).
func WithBackoff(backoff time.Duration) Option { return func(o *options) { o.backoff = backoff } }

// WithTransportCredentials uses TLS (credentials.NewTLS, or NewClientTLSFromFile for a
// private CA) instead of plaintext.
func WithTransportCredentials(creds credentials.TransportCredentials) Option {
	return func(o *options) {
		o.dial = append(o.dial, grpc.WithTransportCredentials(creds))
		o.secure = true
	}
}

// WithDialOptions adds gRPC dial options (interceptors, keepalive, a custom dialer).
func WithDialOptions(dial ...grpc.DialOption) Option {
	return func(o *options) { o.dial = append(o.dial, dial...) }
}

// Dial connects to the gateway at address ("host:port"). The connection is made in
// the background; a gateway that cannot be reached fails the first call with UNAVAILABLE.
func Dial(address string, opts ...Option) (*Client, error) {
	o := options{timeout: 10 * time.Second, resumeAttempts: 5, backoff: 100 * time.Millisecond}
	for _, opt := range opts {
		opt(&o)
	}
	dial := o.dial
	if !o.secure {
		dial = append(dial, grpc.WithInsecure())
	}
	if o.apiKey != "" {
		dial = append(dial, grpc.WithPerRPCCredentials(bearer{key: o.apiKey, secure: o.secure}))
	}
	conn, err := grpc.Dial(address, dial...)
	if err != nil {
		return nil, FromError(err)
	}
	return &Client{
		Gateway: gatewayv1.NewGatewayServiceClient(conn),
		Agents:  gatewayv1.NewAgentServiceClient(conn),
		conn:    conn,
		opts:    o,
	}, nil
}

// Close ends the connection and every call still open on it.
func (c *Client) Close() error { return c.conn.Close() }

// CreateSession opens a session with an agent ("" for the gateway's default agent).
func (c *Client) CreateSession(ctx context.Context, req *gatewayv1.CreateSessionRequest) (*commonv1.Session, error) {
	ctx, cancel := c.unaryContext(ctx)
	defer cancel()
	reply, err := c.Gateway.CreateSession(ctx, req)
	if err != nil {
		return nil, FromError(err)
	}
	return reply.GetSession(), nil
}

// ListTurns reads one page of a session's turns, oldest first: the message that started
// each, how it ended, the seq range of its events and (IncludeSteps) its recorded steps.
// Pass NextPageToken back as PageToken for the next page; it is "" on the last.
func (c *Client) ListTurns(ctx context.Context, req *gatewayv1.ListTurnsRequest) (*gatewayv1.ListTurnsResponse, error) {
	ctx, cancel := c.unaryContext(ctx)
	defer cancel()
	reply, err := c.Gateway.ListTurns(ctx, req)
	if err != nil {
		return nil, FromError(err)
	}
	return reply, nil
}

// ListMessages reads one page of a session's conversation, oldest first; with
// ThroughTurnId, the conversation as it was after that turn.
func (c *Client) ListMessages(ctx context.Context, req *gatewayv1.ListMessagesRequest) (*gatewayv1.ListMessagesResponse, error) {
	ctx, cancel := c.unaryContext(ctx)
	defer cancel()
	reply, err := c.Gateway.ListMessages(ctx, req)
	if err != nil {
		return nil, FromError(err)
	}
	return reply, nil
}

// ForkSession creates a session holding another's conversation up to a turn (after it,
// or BeforeTurn to send that turn again), in the same tenant and scope; the original is
// untouched and the fork's ForkedFrom says where it came from.
func (c *Client) ForkSession(ctx context.Context, req *gatewayv1.ForkSessionRequest) (*gatewayv1.ForkSessionResponse, error) {
	ctx, cancel := c.unaryContext(ctx)
	defer cancel()
	reply, err := c.Gateway.ForkSession(ctx, req)
	if err != nil {
		return nil, FromError(err)
	}
	return reply, nil
}

// RewindSession drops a turn and every later turn from the conversation. The log stays
// append-only: the reply's Event (a rewound event, also delivered to every watcher) names
// the seq range whose events no longer count (Voided). FAILED_PRECONDITION
// (TURN_IN_PROGRESS) while a turn runs or is paused.
func (c *Client) RewindSession(ctx context.Context, req *gatewayv1.RewindSessionRequest) (*gatewayv1.RewindSessionResponse, error) {
	ctx, cancel := c.unaryContext(ctx)
	defer cancel()
	reply, err := c.Gateway.RewindSession(ctx, req)
	if err != nil {
		return nil, FromError(err)
	}
	return reply, nil
}

// SendMessage starts a turn and streams its events until its final or error event, or
// until it pauses (IsPause). If the stream breaks after the turn started, the rest is
// read with Subscribe from the last seq. A break before the first event is returned
// as is: the turn may or may not have started, and sending again could run it twice.
func (c *Client) SendMessage(ctx context.Context, req *gatewayv1.SendMessageRequest) *Stream {
	s := c.newStream(ctx, req.GetSessionId(), true, false)
	stream, err := c.Gateway.SendMessage(s.ctx, req)
	s.open(func() (eventReply, error) { return stream.Recv() }, err)
	return s
}

// ResolveApproval answers an approval_required event (approve, edit or reject the tool
// call) and streams the resumed turn like SendMessage.
func (c *Client) ResolveApproval(ctx context.Context, req *gatewayv1.ResolveApprovalRequest) *Stream {
	s := c.newStream(ctx, req.GetSessionId(), true, false)
	stream, err := c.Gateway.ResolveApproval(s.ctx, req)
	s.open(func() (eventReply, error) { return stream.Recv() }, err)
	return s
}

// AnswerInterrupt answers a user_input_requested or client_tool_call event and streams
// the resumed turn like SendMessage.
func (c *Client) AnswerInterrupt(ctx context.Context, req *gatewayv1.AnswerInterruptRequest) *Stream {
	s := c.newStream(ctx, req.GetSessionId(), true, false)
	stream, err := c.Gateway.AnswerInterrupt(s.ctx, req)
	s.open(func() (eventReply, error) { return stream.Recv() }, err)
	return s
}

// Subscribe replays the session's events after req.AfterSeq, then follows new ones
// (with StopWhenIdle: ends once caught up and idle). A broken stream is resumed from
// the last seq handed out.
func (c *Client) Subscribe(ctx context.Context, req *gatewayv1.SubscribeRequest) *Stream {
	s := c.newStream(ctx, req.GetSessionId(), false, req.GetStopWhenIdle())
	s.cursor = req.GetAfterSeq()
	s.resubscribe()
	return s
}

func (c *Client) unaryContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.opts.timeout)
}

// bearer is the API key as per-call credentials.
type bearer struct {
	key    string
	secure bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.key}, nil
}

// RequireTransportSecurity is false over plaintext, which `cogmesh up` serves on loopback.
func (b bearer) RequireTransportSecurity() bool { return b.secure }
