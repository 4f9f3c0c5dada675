// Package requester sends a client's requests (a call, a broadcast, a
// fan-out) and waits for their one reply: retrying while no dispatcher
// listens, cancelling the task when the caller stops waiting, telling a
// publish the server refused from a silent timeout, and giving every
// failure its wire code.
package requester

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/agentkit/internal/tracing"
	"github.com/agent-reach/agentreach/streams"
)

// Backoff of a request nobody listens to (Request): from
// noDispatcherFirst, doubling up to noDispatcherMax, each wait drawn
// between half and all of it.
const (
	noDispatcherFirst = 50 * time.Millisecond
	noDispatcherMax   = time.Second
)

// Requester sends the requests of one client. It is safe for concurrent
// use.
type Requester struct {
	nc *nats.Conn
	// checkFirst: the client signs its tasks (it has credentials), so a
	// first publish to a subject is checked for the server's refusal.
	checkFirst bool
	cancel     func(requestID string)
	published  sync.Map // subjects the server let this client publish to (checkFirst)
}

// New returns the requester of a client on nc. checkFirst makes it check
// each first publish to a subject for the server's refusal (a client with
// credentials, whose ACL may not grant a capability); cancel tells the
// dispatchers a task is no longer wanted.
func New(nc *nats.Conn, checkFirst bool, cancel func(requestID string)) *Requester {
	return &Requester{nc: nc, checkFirst: checkFirst, cancel: cancel}
}

// Request sends m and waits for its one reply, cancelling the task when
// ctx ends first; errors carry wire codes. what names the request in them.
func (r *Requester) Request(ctx context.Context, m *nats.Msg, what string) (reply *nats.Msg, err error) {
	span := tracing.StartSend(ctx, m)
	defer func() { tracing.EndSend(span, reply, err) }()
	if err = streams.CheckSize(m, r.nc.MaxPayload()); err != nil { // every header is on it now, a trace's too
		return nil, err
	}
	// "No responders": no dispatcher listens right now — they restart,
	// or this connection came back before theirs. Nothing received the
	// request, so it is sent again, backing off with jitter, until one
	// listens or ctx ends.
	for wait := noDispatcherFirst; ; wait = min(2*wait, noDispatcherMax) {
		if r.checkFirst && !r.mayPublish(m.Subject) {
			reply, err = r.firstRequest(ctx, m)
		} else {
			reply, err = r.nc.RequestMsgWithContext(ctx, m)
		}
		if !errors.Is(err, nats.ErrNoResponders) {
			break
		}
		d := wait/2 + rand.N(wait/2+1)
		if dl, ok := ctx.Deadline(); !ok || time.Until(dl) < d {
			break // no deadline to retry within, or not enough of it left
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		if ctx.Err() != nil {
			break
		}
	}
	var refused *refusal
	if errors.As(err, &refused) {
		return nil, streams.NewError(streams.CodeUnauthorized, "%s: the server refused it: %v", what, refused.err)
	}
	if err != nil && ctx.Err() != nil {
		r.cancel(m.Header.Get(streams.HeaderRequestID)) // nobody will read the answer now
	}
	switch {
	case err == nil:
		return reply, nil
	case errors.Is(err, nats.ErrNoResponders):
		return nil, streams.NewError(streams.CodeNoAgent, "no dispatcher is listening on %s (retried within the caller's deadline)", m.Subject)
	case errors.Is(err, context.Canceled):
		return nil, streams.NewError(streams.CodeCancelled, "%s cancelled: %v", what, context.Cause(ctx))
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		if denied := r.refused(m.Subject); denied != nil {
			return nil, streams.NewError(streams.CodeUnauthorized, "%s: the server refused it: %v", what, denied)
		}
		return nil, streams.NewError(streams.CodeDeadlineExceeded, "no answer for %s within the caller's deadline", what)
	}
	return nil, fmt.Errorf("agentkit: %s: %w", what, err)
}

// refused returns the connection's last error when it is the server
// refusing a publish to subject: a request the server drops for want of
// permission (docs/security.md) gets no reply, so it can only time out.
func (r *Requester) refused(subject string) error {
	err := r.nc.LastError()
	if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `Publish to "`+subject+`"`) {
		return err
	}
	return nil
}

// mayPublish reports whether a publish to subject has passed the server
// since the requester was made.
func (r *Requester) mayPublish(subject string) bool {
	_, ok := r.published.Load(subject)
	return ok
}

// refusal is a publish the server refused for want of permission.
type refusal struct{ err error }

func (r *refusal) Error() string { return r.err.Error() }

// firstRequest sends a request of a client with credentials to a subject
// it has not published to yet. A publish the server refuses (the ACL does
// not grant the capability) gets no reply, only a permissions violation
// ahead of the next PONG: so it flushes after publishing, and returns a
// *refusal at once instead of waiting for the caller's deadline. Once a
// publish has passed, the subject takes the usual request path (a later
// refusal, after an ACL change, is then learned at the deadline).
func (r *Requester) firstRequest(ctx context.Context, m *nats.Msg) (*nats.Msg, error) {
	inbox := r.nc.NewInbox()
	sub, err := r.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	before := r.nc.LastError() // the connection's last error is sticky: only a new one is this publish's
	m.Reply = inbox
	if err := r.nc.PublishMsg(m); err != nil {
		return nil, err
	}
	if err := r.nc.FlushWithContext(ctx); err != nil {
		return nil, err
	}
	if last := r.nc.LastError(); last != before { // a new error since the publish: perhaps its refusal
		if denied := r.refused(m.Subject); denied != nil {
			return nil, &refusal{denied}
		}
	}
	r.published.Store(m.Subject, struct{}{})
	reply, err := sub.NextMsgWithContext(ctx)
	if err == nil && len(reply.Data) == 0 && reply.Header.Get("Status") == "503" { // as RequestMsg reads it
		return nil, nats.ErrNoResponders
	}
	return reply, err
}
