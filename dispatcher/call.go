package dispatcher

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/dispatcher/engine"
	"github.com/agent-reach/agentreach/streams"
)

// Call is the in-process entry to the same path as a task from NATS
// (engine.Receive): admission, decode, resolve and the rest, minus a
// message hop.

// CallOption adjusts one task started with Call.
type CallOption func(*callOptions)

type callOptions struct {
	noRetry    bool // WithoutRetries
	capability bool // ToCapability
}

// WithoutRetries delivers the task once: a broadcast asks each instance,
// and another delivery would be a second question.
func WithoutRetries() CallOption { return func(o *callOptions) { o.noRetry = true } }

// ToCapability routes the task to the instances of the capability even
// when a workflow of that name shadows it: a workflow's steps call
// capabilities, not workflows (docs/workflows.md).
func ToCapability() CallOption { return func(o *callOptions) { o.capability = true } }

// Call routes one task in this process, as if req had arrived on
// reach.task.<capability> (its headers and body; a reply subject is
// ignored), and returns the reply a caller would receive: the result with
// the Reach-* headers, or an error reply. It is the way in for code that
// runs beside a dispatcher (the HTTP gateway, fan-out, workflows): the same
// admission, resolution (a workflow's name runs the workflow), routing,
// retries, events and stats as a task from NATS, minus one message hop.
// When ctx ends first the task is cancelled — its instance gets a CANCEL —
// and Call returns CANCELLED, or DEADLINE_EXCEEDED when ctx's deadline
// passed; ctx's deadline also bounds the task's overall deadline (a
// workflow's run, like one called on NATS, is not cancelled: it ends by
// that deadline). Call must be used between Start and Drain or Close; req
// is the task's from then on.
func (d *Dispatcher) Call(ctx context.Context, capability string, req *nats.Msg, opts ...CallOption) *nats.Msg {
	start := time.Now()
	if req.Header == nil {
		req.Header = nats.Header{}
	}
	if d.Table() == nil {
		return engine.Refusal(req, streams.NewError(streams.CodeInternal, "dispatcher %s is not started", d.cfg.Name))
	}
	caller := engine.CallerOf(req.Header)
	if e := d.eng.Admit(caller); e != nil {
		return engine.Refusal(req, e)
	}
	req.Reply = "" // the answer comes back here: nothing to offer an agent directly
	var o callOptions
	for _, opt := range opts {
		opt(&o)
	}
	if !o.capability && d.Resolves(capability) {
		return d.callResolved(ctx, capability, req, caller)
	}
	t, e := d.eng.NewTask(req, capability, start, false)
	if dl, ok := ctx.Deadline(); ok && e == nil && dl.Before(t.Deadline()) {
		t.SetDeadline(dl)
	}
	if o.noRetry {
		t.NoRetries()
	}
	out := make(chan *nats.Msg, 1)
	done := func(t *engine.Task, res *nats.Msg, e *streams.Error) {
		defer d.eng.Done()
		reply, _ := d.eng.Conclude(t, res, e)
		d.eng.Free(caller)
		out <- reply
	}
	t.OnDone(done)
	if e != nil {
		done(t, nil, e)
		return <-out
	}
	d.eng.Run(t)
	select {
	case reply := <-out:
		return reply
	case <-ctx.Done():
		d.eng.Cancel(t, callerGone(ctx))
		return <-out // cancel ends the task at once, wherever it is
	}
}

// callResolved is Call of a name the resolver serves: the resolver runs it
// on a goroutine that holds the in-flight slot Call took for caller, as a
// task from reach.task (resolved). ctx's deadline becomes the request's
// Reach-Deadline when it is earlier; when ctx ends first the caller gets
// CANCELLED or DEADLINE_EXCEEDED, and the run goes on to its own end.
func (d *Dispatcher) callResolved(ctx context.Context, name string, req *nats.Msg, caller string) *nats.Msg {
	id, orch := engine.TaskIDs(req.Header)
	req.Header.Set(streams.HeaderRequestID, id) // the run's id, which an early answer names too
	if dl, ok := ctx.Deadline(); ok {
		if cur, e := streams.ParseDeadline(req.Header); e == nil && (cur.IsZero() || dl.Before(cur)) {
			req.Header.Set(streams.HeaderDeadline, strconv.FormatInt(dl.UnixMilli(), 10))
		}
	}
	out := make(chan *nats.Msg, 1)
	go func() {
		defer d.eng.Done()
		reply := d.eng.Direct(req, name)
		d.eng.Free(caller)
		out <- reply
	}()
	select {
	case reply := <-out:
		return reply
	case <-ctx.Done():
		ct, _ := streams.PayloadType(req.Header, req.Data)
		return engine.ErrorMsg(ct, id, orch, callerGone(ctx))
	}
}

// callerGone is the error a Call ends with when its ctx ended first.
func callerGone(ctx context.Context) *streams.Error {
	code := streams.CodeCancelled
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		code = streams.CodeDeadlineExceeded
	}
	return streams.NewError(code, "the caller stopped waiting: %v", ctx.Err())
}
