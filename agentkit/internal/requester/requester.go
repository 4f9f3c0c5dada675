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
	nc     *nats.Conn
	watch  *watch // the server's refusals of publishes on nc (refusal.go)
	cancel func(requestID string)
}

// New returns the requester of a client on nc; cancel tells the
// dispatchers a task is no longer wanted.
func New(nc *nats.Conn, cancel func(requestID string)) *Requester {
	return &Requester{nc: nc, watch: watchOf(nc), cancel: cancel}
}

// Request sends m and waits for its one reply, cancelling the task when
// ctx ends first; errors carry wire codes. what names the request in them.
func (r *Requester) Request(ctx context.Context, m *nats.Msg, what string) (reply *nats.Msg, err error) {
	span := tracing.StartSend(ctx, m)
	defer func() { tracing.EndSend(span, reply, err) }()
	if err = streams.CheckSize(m, r.nc.MaxPayload()); err != nil { // every header is on it now, a trace's too
		return nil, err
	}
	ctx, stop := r.Guard(ctx, m.Subject)
	defer stop()
	// "No responders": no dispatcher listens right now — they restart,
	// or this connection came back before theirs. Nothing received the
	// request, so it is sent again, backing off with jitter, until one
	// listens or ctx ends.
	for wait := noDispatcherFirst; ; wait = min(2*wait, noDispatcherMax) {
		reply, err = r.nc.RequestMsgWithContext(ctx, m)
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
	if refused := Refused(ctx, what); err != nil && refused != nil {
		return nil, refused // it never reached a dispatcher: nothing to cancel
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
		return nil, streams.NewError(streams.CodeDeadlineExceeded, "no answer for %s within the caller's deadline", what)
	}
	return nil, fmt.Errorf("agentkit: %s: %w", what, err)
}
