package cogmesh

import (
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Error is a failed call's google.rpc.Status with its details decoded. Every error
// the Client returns is one; errors.As(err, &e) finds it. FromError decodes the
// errors of the generated stubs the same way.
type Error struct {
	// Code is the gRPC status code.
	Code codes.Code
	// Message is the status message.
	Message string
	// Reason is the ErrorInfo reason (domain "cogmesh.dev"): a cogmesh.common.v1.ErrorReason
	// name without its prefix, e.g. "SESSION_NOT_FOUND"; "" when the status has none.
	Reason string
	// Metadata is the ErrorInfo metadata, e.g. {"setting": "COGMESH_TENANT_RATE_PER_S"}.
	Metadata map[string]string
	// Violations are the BadRequest field violations an INVALID_ARGUMENT carries.
	Violations []FieldViolation
	// RetryDelay is the RetryInfo delay (RESOURCE_EXHAUSTED over a rate limit); 0 when absent.
	RetryDelay time.Duration

	status *status.Status // as received, details included
}

// FieldViolation names one bad field of a request (its proto field name) and what is wrong with it.
type FieldViolation struct {
	Field       string
	Description string
}

func (e *Error) Error() string {
	if e.Reason != "" {
		return fmt.Sprintf("%s (%s): %s", e.Code, e.Reason, e.Message)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// GRPCStatus lets status.Code and status.FromError read an Error as the status it came from.
func (e *Error) GRPCStatus() *status.Status {
	if e.status == nil {
		return status.New(e.Code, e.Message)
	}
	return e.status
}

// Resumable reports whether a broken stream is worth reconnecting: the gateway went
// away (UNAVAILABLE) or cut off a reader that fell behind (SUBSCRIBER_TOO_SLOW).
func (e *Error) Resumable() bool {
	return e.Code == codes.Unavailable || e.Reason == "SUBSCRIBER_TOO_SLOW"
}

// FromError decodes a gRPC error into an *Error; nil stays nil, and an *Error is returned as is.
func FromError(err error) *Error {
	if err == nil {
		return nil
	}
	if e, ok := err.(*Error); ok {
		return e
	}
	st, ok := status.FromError(err)
	if !ok {
		st = status.FromContextError(err) // context.Canceled or DeadlineExceeded; anything else is Unknown
	}
	e := &Error{Code: st.Code(), Message: st.Message(), Metadata: map[string]string{}, status: st}
	for _, detail := range st.Details() {
		switch d := detail.(type) {
		case *errdetails.ErrorInfo:
			e.Reason = d.GetReason()
			for key, value := range d.GetMetadata() {
				e.Metadata[key] = value
			}
		case *errdetails.BadRequest:
			for _, v := range d.GetFieldViolations() {
				e.Violations = append(e.Violations, FieldViolation{Field: v.GetField(), Description: v.GetDescription()})
			}
		case *errdetails.RetryInfo:
			e.RetryDelay = d.GetRetryDelay().AsDuration()
		}
	}
	return e
}
