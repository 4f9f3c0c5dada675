package streams

import (
	"errors"
	"fmt"
)

// Code is a wire error code, carried in the Reach-Error header.
type Code string

// The wire error codes (docs/reference.md, Error codes). Each maps one-to-one to a sentinel
// error below; only CodeTimeout, CodeTargetBusy and transport failures are
// retried.
const (
	CodeTimeout          Code = "TIMEOUT"
	CodeTargetBusy       Code = "TARGET_BUSY"
	CodeBizReject        Code = "BIZ_REJECT"
	CodeNoAgent          Code = "NO_AGENT"
	CodeCircuitOpen      Code = "CIRCUIT_OPEN"
	CodeOverloaded       Code = "OVERLOADED"
	CodeLoopDetected     Code = "LOOP_DETECTED"
	CodePayloadTooLarge  Code = "PAYLOAD_TOO_LARGE"
	CodeBadRequest       Code = "BAD_REQUEST"
	CodeUnauthorized     Code = "UNAUTHORIZED"
	CodeDeadlineExceeded Code = "DEADLINE_EXCEEDED"
	CodeInternal         Code = "INTERNAL"
	// CodeIncomplete is a broadcast or fan-out whose completion policy was
	// not met; the body still carries what came back.
	CodeIncomplete Code = "INCOMPLETE"
	// CodeCancelled ends a task that its caller cancelled (reach.cancel, or
	// the in-process caller's context) before it finished. Never retried.
	CodeCancelled Code = "CANCELLED"
)

// Sentinel errors, one per wire code. An *Error with a code matches its
// sentinel under errors.Is.
var (
	ErrTimeout          = errors.New("TIMEOUT: the instance did not answer in time")
	ErrTargetBusy       = errors.New("TARGET_BUSY: the instance has no free slot")
	ErrBizReject        = errors.New("BIZ_REJECT: the agent rejected the task")
	ErrNoAgent          = errors.New("NO_AGENT: no capable instance is available")
	ErrCircuitOpen      = errors.New("CIRCUIT_OPEN: every capable instance's breaker is open")
	ErrOverloaded       = errors.New("OVERLOADED: the dispatcher is at its in-flight limit")
	ErrLoopDetected     = errors.New("LOOP_DETECTED: the task exceeded its hop limit")
	ErrPayloadTooLarge  = errors.New("PAYLOAD_TOO_LARGE: the message exceeds the server's max_payload")
	ErrBadRequest       = errors.New("BAD_REQUEST: the request is malformed")
	ErrUnauthorized     = errors.New("UNAUTHORIZED: the caller may not do this")
	ErrDeadlineExceeded = errors.New("DEADLINE_EXCEEDED: the overall deadline passed")
	ErrInternal         = errors.New("INTERNAL: the task failed")
	ErrCancelled        = errors.New("CANCELLED: the caller cancelled the task")
	ErrIncomplete       = errors.New("INCOMPLETE: the completion policy was not met")
)

// Errors that are not wire codes.
var (
	// ErrInvalidName is returned for a malformed capability name or instance id.
	ErrInvalidName = errors.New("invalid name")
	// ErrIncompatible is returned by Provision when a bucket or stream exists
	// with a configuration that conflicts with the one Agent-Reach needs.
	ErrIncompatible = errors.New("incompatible existing resource")
)

var codeSentinels = map[Code]error{
	CodeTimeout:          ErrTimeout,
	CodeTargetBusy:       ErrTargetBusy,
	CodeBizReject:        ErrBizReject,
	CodeNoAgent:          ErrNoAgent,
	CodeCircuitOpen:      ErrCircuitOpen,
	CodeOverloaded:       ErrOverloaded,
	CodeLoopDetected:     ErrLoopDetected,
	CodePayloadTooLarge:  ErrPayloadTooLarge,
	CodeBadRequest:       ErrBadRequest,
	CodeUnauthorized:     ErrUnauthorized,
	CodeDeadlineExceeded: ErrDeadlineExceeded,
	CodeInternal:         ErrInternal,
	CodeCancelled:        ErrCancelled,
	CodeIncomplete:       ErrIncomplete,
}

// Codes lists every wire error code.
func Codes() []Code {
	return []Code{CodeTimeout, CodeTargetBusy, CodeBizReject, CodeNoAgent, CodeCircuitOpen,
		CodeOverloaded, CodeLoopDetected, CodePayloadTooLarge, CodeBadRequest,
		CodeUnauthorized, CodeDeadlineExceeded, CodeInternal, CodeIncomplete, CodeCancelled}
}

// Sentinel returns the sentinel error of c, or ErrInternal for an unknown code.
func (c Code) Sentinel() error {
	if err, ok := codeSentinels[c]; ok {
		return err
	}
	return ErrInternal
}

// Retryable reports whether a task that failed with c may be tried again:
// only TIMEOUT and TARGET_BUSY are.
func (c Code) Retryable() bool { return c == CodeTimeout || c == CodeTargetBusy }

// Error is an error with a wire code. On the wire it is the Reach-Error header
// plus a body of {"code","message"}.
type Error struct {
	Code    Code   `json:"code" msgpack:"code"`
	Message string `json:"message" msgpack:"message"`
	// Excluded lists, on a NO_AGENT (or CIRCUIT_OPEN) answer, the
	// instances offering the capability that were passed over and why.
	Excluded []Exclusion `json:"excluded,omitempty" msgpack:"excluded,omitempty"`
}

// Exclusion is one instance a task could not go to, and why: a
// requirement it does not meet, a refused permission, a dependency down,
// its breaker open, draining, too slow for max_latency_ms.
type Exclusion struct {
	Node   string `json:"node" msgpack:"node"`
	Reason string `json:"reason" msgpack:"reason"`
}

// NewError returns an *Error with code c and a formatted message.
func NewError(c Code, format string, args ...any) *Error {
	return &Error{Code: c, Message: fmt.Sprintf(format, args...)}
}

func (e *Error) Error() string {
	if e.Message == "" {
		return string(e.Code)
	}
	return string(e.Code) + ": " + e.Message
}

// Is makes errors.Is(err, ErrNoAgent) true for an *Error with code NO_AGENT.
func (e *Error) Is(target error) bool { return e.Code.Sentinel() == target }

// CodeOf returns the wire code of err: the code of an *Error in its chain, the
// code whose sentinel it wraps, or CodeInternal.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	for c, s := range codeSentinels {
		if errors.Is(err, s) {
			return c
		}
	}
	return CodeInternal
}

// AsError converts err to an *Error, keeping its code and message.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: CodeOf(err), Message: err.Error()}
}
