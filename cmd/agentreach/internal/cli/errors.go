package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/streams"
)

// The CLI's own failure codes, for failures that carry no wire error code
// (streams.Code…). With --json a failure prints {"error": {"code",
// "message"}} with one of these or a wire code; docs/cli.md lists them.
const (
	// codeUsage: a bad command line, flag, environment variable or payload
	// (exit status 2).
	CodeUsage streams.Code = "USAGE"
	// codeConnect: no connection to NATS (unreachable, refused credentials,
	// a wrong connection flag).
	CodeConnect streams.Code = "CONNECT"
	// codeNotFound: no entry with that sequence, or no outcome recorded for
	// that request id.
	CodeNotFound streams.Code = "NOT_FOUND"
	// codeNotProvisioned: a stream or bucket Agent-Reach needs does not
	// exist on the server, or JetStream is off.
	CodeNotProvisioned streams.Code = "NOT_PROVISIONED"
	// CodeUnavailable: JetStream had no leader for a stream or bucket
	// (an election, a partition) until the deadline; it exists.
	CodeUnavailable streams.Code = "UNAVAILABLE"
	// codeNoDispatcher: no dispatcher answered an inspection request.
	CodeNoDispatcher streams.Code = "NO_DISPATCHER"
)

// CodedError gives an error one of the CLI's failure codes.
type CodedError struct {
	code streams.Code
	err  error
}

func (e *CodedError) Error() string { return e.err.Error() }
func (e *CodedError) Unwrap() error { return e.err }

// WithCode returns err with failure code c.
func WithCode(c streams.Code, err error) error { return &CodedError{code: c, err: err} }

// ErrorObject returns what --json prints for err: the CLI's failure code
// with the whole message, else the wire error in its chain (a deadline that
// ran out is DEADLINE_EXCEEDED), else INTERNAL.
func ErrorObject(err error) *streams.Error {
	var ce *CodedError
	if errors.As(err, &ce) {
		return &streams.Error{Code: ce.code, Message: err.Error()}
	}
	var we *streams.Error
	if !errors.As(err, &we) && errors.Is(err, context.DeadlineExceeded) {
		return &streams.Error{Code: streams.CodeDeadlineExceeded, Message: err.Error()}
	}
	return streams.AsError(err)
}

// PermissionDenied returns, when the server refused the command's identity
// something, an UNAUTHORIZED error naming what, in place of err: the server
// drops a request it refuses, so err is only the timeout or cancellation
// that followed (bounded), and whatever err says about why is a guess.
// Otherwise it returns nil.
func (c *ConnFlags) PermissionDenied(err error) error {
	refused := c.refused()
	if err == nil || refused == "" {
		return nil
	}
	return WithCode(streams.CodeUnauthorized, fmt.Errorf("permission denied: %s; an identity's role and the "+
		"acl decide what it may do (docs/security.md)", strings.TrimPrefix(refused, "nats: permissions violation: ")))
}

// NotProvisioned explains the error of using resource (e.g. "stream
// REACH_DLQ") on the server: when the server refused this connection's
// identity something, an UNAUTHORIZED error naming what
// (permissionDenied); when the resource, or JetStream, is missing a
// NOT_PROVISIONED error that says what creates it; when JetStream did not
// answer in time, a DEADLINE_EXCEEDED error that says only that. Other
// errors pass unchanged, as does an error that has a failure code already.
func (c *ConnFlags) NotProvisioned(err error, resource string) error {
	var ce *CodedError
	server := c.serverList()
	denied := c.PermissionDenied(err)
	switch {
	case errors.As(err, &ce):
		return err
	case denied != nil:
		return denied
	case errors.Is(err, streams.ErrUnavailable):
		// Retried within --timeout: no leader answered all along.
		return WithCode(CodeUnavailable, fmt.Errorf("JetStream on %s had no leader for %s within --timeout %v: an election, "+
			"a partition or a restarting node; it passes by itself, nothing needs provisioning; a longer --timeout waits more (%w)",
			server, resource, c.Timeout, err))
	case errors.Is(err, jetstream.ErrStreamNotFound), errors.Is(err, jetstream.ErrBucketNotFound),
		errors.Is(err, jetstream.ErrNoStreamResponse):
		check := "--server"
		if errors.Is(err, jetstream.ErrNoStreamResponse) { // no stream captures the subject: the prefix shapes it
			check = "--server or --prefix"
		}
		return WithCode(CodeNotProvisioned, fmt.Errorf("%s does not exist on %s: nothing has provisioned Agent-Reach there "+
			"('agentreach up' or 'agentreach dispatcher' creates the streams and buckets); is %s right? (%w)",
			resource, server, check, err))
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount),
		errors.Is(err, nats.ErrNoResponders):
		return WithCode(CodeNotProvisioned, fmt.Errorf("JetStream is not enabled on %s, so %s cannot exist: "+
			"run nats-server with JetStream (-js) or 'agentreach up'; is --server right? (%w)", server, resource, err))
	case errors.Is(err, context.DeadlineExceeded):
		// Whatever err guesses (a missing resource, say), JetStream only
		// did not answer in time.
		return WithCode(streams.CodeDeadlineExceeded, fmt.Errorf("JetStream on %s did not answer about %s within --timeout %v: "+
			"is the server or its cluster overloaded, or without a JetStream leader? a longer --timeout waits more", server, resource, c.Timeout))
	}
	return err
}
