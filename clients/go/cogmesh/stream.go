package cogmesh

import (
	"context"
	"io"
	"time"

	commonv1 "cogmesh.dev/go/gen/cogmesh/common/v1"
	gatewayv1 "cogmesh.dev/go/gen/cogmesh/gateway/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const maxBackoff = 2 * time.Second

// Stream is a session's events in seq order, from a turn (SendMessage, ResolveApproval,
// AnswerInterrupt) or from Subscribe. It is not safe for concurrent use.
type Stream struct {
	client       *Client
	ctx          context.Context
	cancel       context.CancelFunc
	sessionID    string
	turn         bool   // a turn's stream: ends with the turn's last event or its pause
	turnID       string // the turn's id, once its first event arrived
	stopWhenIdle bool
	cursor       uint64                                   // the last seq handed out (or the Subscribe's after_seq)
	recv         func() ([]*commonv1.RuntimeEvent, error) // the open call; nil: Subscribe again
	following    bool                                     // recv is a Subscribe
	pending      []*commonv1.RuntimeEvent
	failures     int   // breaks in a row without receiving anything
	err          error // io.EOF once done, or why it failed
	resumes      int
}

// eventReply is any of the gateway's streamed responses.
type eventReply interface {
	GetEvents() []*commonv1.RuntimeEvent
}

func (c *Client) newStream(ctx context.Context, sessionID string, turn, stopWhenIdle bool) *Stream {
	ctx, cancel := context.WithCancel(ctx)
	return &Stream{client: c, ctx: ctx, cancel: cancel, sessionID: sessionID, turn: turn, stopWhenIdle: stopWhenIdle}
}

// open makes a call's stream (or the error opening it) the one Next reads from.
func (s *Stream) open(recv func() (eventReply, error), err error) {
	if err != nil {
		s.recv = func() ([]*commonv1.RuntimeEvent, error) { return nil, err }
		return
	}
	s.recv = func() ([]*commonv1.RuntimeEvent, error) {
		reply, err := recv()
		if err != nil {
			return nil, err
		}
		return reply.GetEvents(), nil
	}
}

// Next returns the next event, or io.EOF after the last: a turn's final or error event
// or the status with which it pauses; for Subscribe with StopWhenIdle, once caught up.
// Any other error is an *Error (CANCELED once the context is done or Close was called).
func (s *Stream) Next() (*commonv1.RuntimeEvent, error) {
	for s.err == nil {
		if len(s.pending) == 0 {
			if err := s.receive(); err != nil {
				s.finish(err)
			}
			continue
		}
		event := s.pending[0]
		s.pending = s.pending[1:]
		if event.GetSeq() <= s.cursor {
			continue // delivery is at-least-once after a resume: drop what was handed out
		}
		s.cursor = event.GetSeq()
		if !s.turn {
			return event, nil
		}
		if s.turnID == "" {
			s.turnID = event.GetTurnId()
		} else if event.GetTurnId() != s.turnID {
			continue // finishing the turn through Subscribe, which carries the whole session
		}
		if IsTerminal(event) || IsPause(event) {
			s.finish(io.EOF)
		}
		return event, nil
	}
	return nil, s.err
}

// Cursor is the seq of the last event handed out: Subscribe after it to go on later.
func (s *Stream) Cursor() uint64 { return s.cursor }

// Resumes counts how many times the stream was reconnected after a break.
func (s *Stream) Resumes() int { return s.resumes }

// Close ends the stream and its call; Next then returns io.EOF.
func (s *Stream) Close() { s.finish(io.EOF) }

func (s *Stream) finish(err error) {
	if s.err == nil {
		s.err = err
	}
	s.cancel()
}

// receive fills pending from the open call, reconnecting with Subscribe after a break
// that is worth it; it returns io.EOF or the error that ends the stream.
func (s *Stream) receive() error {
	for {
		if s.recv == nil {
			if err := s.wait(); err != nil {
				return err
			}
			s.resumes++
			s.resubscribe()
		}
		events, err := s.recv()
		if err == nil {
			if s.following {
				s.failures = 0 // progress: the connection works again
			}
			s.pending = events // none on a heartbeat
			return nil
		}
		if s.ctx.Err() != nil {
			return FromError(s.ctx.Err())
		}
		if err == io.EOF {
			if s.following && s.stopWhenIdle {
				return io.EOF // caught up and idle, as asked
			}
			// A stream that ends before its last event: a draining gateway. Read the rest from the log.
			err = status.Error(codes.Unavailable, "the stream ended early")
		}
		failure := FromError(err)
		if s.turn && s.turnID == "" {
			return failure // before the first event, sending again could run the turn twice
		}
		if !failure.Resumable() || s.failures >= s.client.opts.resumeAttempts {
			return failure
		}
		s.failures++
		s.recv = nil
	}
}

// resubscribe reads on with Subscribe from the cursor.
func (s *Stream) resubscribe() {
	req := &gatewayv1.SubscribeRequest{SessionId: s.sessionID, AfterSeq: s.cursor, StopWhenIdle: s.stopWhenIdle}
	stream, err := s.client.Gateway.Subscribe(s.ctx, req)
	s.following = true
	s.open(func() (eventReply, error) { return stream.Recv() }, err)
}

// wait backs off before reconnecting after the failures in a row so far.
func (s *Stream) wait() error {
	if s.failures == 0 {
		return nil
	}
	delay := s.client.opts.backoff << (s.failures - 1)
	if delay > maxBackoff || delay <= 0 {
		delay = maxBackoff
	}
	timer := time.NewTimer(delay)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-s.ctx.Done():
		return FromError(s.ctx.Err())
	}
}
