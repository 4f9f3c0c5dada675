package agentkit

import (
	"context"
	"errors"
	"fmt"

	"github.com/agent-reach/agentreach/streams"
)

var (
	// ErrNotStarted is returned by methods that need a running agent.
	ErrNotStarted = errors.New("agentkit: agent not started")
	// ErrAlreadyStarted is returned by Handle or Start after Start.
	ErrAlreadyStarted = errors.New("agentkit: agent already started")
	// ErrNoHandlers is returned by Start when no capability is registered.
	ErrNoHandlers = errors.New("agentkit: no capability handlers registered")
	// ErrHeartbeatMismatch is returned by Start when Config.Heartbeat is
	// set and differs from the heartbeat the REACH_AGENTS bucket was
	// provisioned with (its TTL / 3).
	ErrHeartbeatMismatch = errors.New("agentkit: heartbeat does not match the REACH_AGENTS bucket")
)

// Reject returns a business rejection (BIZ_REJECT) with message msg as
// it is: the task is understood but refused, and is never retried. Rejectf
// formats the message.
func Reject(msg string) error { return &streams.Error{Code: streams.CodeBizReject, Message: msg} }

// Rejectf is Reject with a message formatted as by fmt.Sprintf.
func Rejectf(format string, args ...any) error {
	return streams.NewError(streams.CodeBizReject, format, args...)
}

// Busy returns a TARGET_BUSY error with message msg as it is: the caller
// may retry elsewhere. Busyf formats the message.
func Busy(msg string) error { return &streams.Error{Code: streams.CodeTargetBusy, Message: msg} }

// Busyf is Busy with a message formatted as by fmt.Sprintf.
func Busyf(format string, args ...any) error {
	return streams.NewError(streams.CodeTargetBusy, format, args...)
}

// BadRequest returns a BAD_REQUEST error with message msg as it is: the
// input is malformed and a retry cannot help. BadRequestf formats the
// message.
func BadRequest(msg string) error { return &streams.Error{Code: streams.CodeBadRequest, Message: msg} }

// BadRequestf is BadRequest with a message formatted as by fmt.Sprintf.
func BadRequestf(format string, args ...any) error {
	return streams.NewError(streams.CodeBadRequest, format, args...)
}

// classify maps a handler error to its wire error: an *streams.Error keeps its
// code, an error wrapping a wire sentinel gets that code, the context's
// deadline or cancellation becomes DEADLINE_EXCEEDED or CANCELLED, and
// anything else is a failure (INTERNAL).
func classify(err error) *streams.Error {
	var we *streams.Error
	switch {
	case errors.As(err, &we):
	case errors.Is(err, context.DeadlineExceeded): // the task's deadline passed: nobody waits for it
		return streams.NewError(streams.CodeDeadlineExceeded, "%v", err)
	case errors.Is(err, context.Canceled): // a CANCEL, or the agent stopping hard
		return streams.NewError(streams.CodeCancelled, "%v", err)
	}
	e := streams.AsError(err)
	if e.Message == "" {
		e.Message = fmt.Sprint(err)
	}
	return e
}
