package agentkit

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/streams"
)

// Request is one task delivered to an agent. Handlers read it and may send
// progress; it is valid until the handler returns.
type Request struct {
	// Capability is the capability asked for.
	Capability string
	// RequestID is the same on every retry of this task.
	RequestID string
	// OrchestrationID ties together every step of a chain.
	OrchestrationID string
	// Attempt counts deliveries of this task: 1, 2, …
	Attempt int
	// Hops is how many hops the task has travelled.
	Hops int
	// Deadline is the caller's overall deadline; zero when none was given.
	Deadline time.Time
	// ContentType is the payload's content type; the result is encoded in it.
	ContentType string
	// Data is the raw payload.
	Data []byte
	// Header is the delivery's headers (read only).
	Header nats.Header

	agent     *Agent
	reply     string
	replyTo   string // the caller's reply subject, when the result may go there directly
	holdsSlot bool
	ackTimer  *time.Timer
	answered  atomic.Bool             // ACKED, PROCESSING or the result has gone out
	cancelled atomic.Bool             // a CANCEL came for this delivery
	ctx       atomic.Pointer[taskCtx] // the handler's context, once it runs

	chunks atomic.Int64 // chunks sent (stream.go)
	chunk  *nats.Msg    // the message Send reuses
	final  atomic.Bool  // the final reply has gone out

	mu   sync.Mutex
	cost float64
}

func newRequest(a *Agent, m *nats.Msg) *Request {
	r := &Request{
		Capability:      m.Header.Get(streams.HeaderCapability),
		RequestID:       m.Header.Get(streams.HeaderRequestID),
		OrchestrationID: m.Header.Get(streams.HeaderOrchestrationID),
		Attempt:         int(streams.IntHeader(m.Header, streams.HeaderAttempt)),
		Hops:            int(streams.IntHeader(m.Header, streams.HeaderHops)),
		ContentType:     streams.ContentType(m.Header, m.Data),
		Data:            m.Data,
		Header:          m.Header,
		agent:           a,
		reply:           m.Reply,
	}
	if to := m.Header.Get(streams.HeaderReplyTo); a.replyPrefix != "" && strings.HasPrefix(to, a.replyPrefix) {
		r.replyTo = to
	}
	if ms := streams.IntHeader(m.Header, streams.HeaderDeadline); ms > 0 {
		r.Deadline = time.UnixMilli(ms)
	}
	return r
}

// Decode unmarshals the payload into v by its content type. A malformed
// payload is a BAD_REQUEST error; return it as is.
func (r *Request) Decode(v any) error { return streams.Decode(r.ContentType, r.Data, v) }

// Progress tells the dispatcher the task is still being worked on
// (Reach-Status PROCESSING), which extends its per-call deadline.
func (r *Request) Progress() error {
	r.agent.ack(r) // ACKED first, if it has not gone out yet
	m := streams.StatusReply(r.reply, streams.StatusProcessing, r.RequestID)
	m.Header.Set(streams.HeaderNode, r.agent.id)
	return r.agent.nc.PublishMsg(m)
}

// SetCost records what the task cost (tokens, currency units); it is sent
// back in the Reach-Cost header.
func (r *Request) SetCost(c float64) {
	r.mu.Lock()
	r.cost = c
	r.mu.Unlock()
}

func (r *Request) costHeader() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cost == 0 {
		return ""
	}
	return strconv.FormatFloat(r.cost, 'f', -1, 64)
}

type requestKey struct{}

// cancel ends the handler's context (or, before the handler starts, keeps
// it from running).
func (r *Request) cancel() {
	r.cancelled.Store(true)
	if c := r.ctx.Load(); c != nil {
		c.cancelNow()
	}
}

// RequestFromContext returns the task a handler's context belongs to.
func RequestFromContext(ctx context.Context) (*Request, bool) {
	r, ok := ctx.Value(requestKey{}).(*Request)
	return r, ok
}
