package agentkit

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/streams"
)

// Branch is one task of a FanOut.
type Branch struct {
	// Name identifies the branch in the outcome (letters, digits, '_', '-').
	Name string
	// Capability is what the branch calls.
	Capability string
	// Agent, when set, sends the branch to this instance only.
	Agent string
	// Payload is encoded in the client's content type; []byte is sent as
	// it is and must already be in that type.
	Payload any
	// Timeout bounds the branch; 0 leaves it to the fan-out's MaxWait.
	Timeout time.Duration
}

// GatherOption adjusts a FanOut.
type GatherOption func(*streams.FanOutRequest)

// Mode sets a fan-out's completion policy: "all", "quorum" (the default,
// with quorum 0.6) or "first".
func Mode(m string) GatherOption { return func(r *streams.FanOutRequest) { r.Mode = m } }

// Quorum sets how many branches must succeed in quorum mode: a fraction
// below 1 of them, or a count from 1 on.
func Quorum(q float64) GatherOption { return func(r *streams.FanOutRequest) { r.Quorum = &q } }

// MaxWait bounds the fan-out; 0 means its largest branch Timeout, or the
// deadline when no branch has one.
func MaxWait(d time.Duration) GatherOption {
	return func(r *streams.FanOutRequest) { ms := d.Milliseconds(); r.MaxWaitMS = &ms }
}

// Gathered is the outcome of a Broadcast or FanOut: one entry per branch
// that answered, and the branches that did not with the reason.
type Gathered struct {
	Expected, Answered, Succeeded int
	// Complete reports whether the completion policy was met; when it was
	// not, the call's error is INCOMPLETE and Gathered holds what came back.
	Complete bool
	Replies  []BranchResult
	Missing  []streams.Missing
	// RequestID and OrchestrationID are the broadcast's or fan-out's own.
	RequestID, OrchestrationID string
	Header                     nats.Header
}

// BranchResult is what one branch answered: its result (Decode) or its
// error (Err).
type BranchResult struct {
	Name     string
	Node     string
	Status   streams.Status
	Attempts int
	Latency  time.Duration
	// Err is the branch's error answer, or nil when it finished.
	Err error

	data        []byte
	contentType string
}

// Decode unmarshals the branch's result into v, like Result.Decode.
func (b *BranchResult) Decode(v any) error {
	if b.Err != nil {
		return b.Err
	}
	return streams.Decode(b.contentType, b.data, v)
}

// Broadcast sends payload to every instance of capability that is routable
// now, once each, and gathers their answers into one outcome. Every
// instance must succeed unless WithQuorum asks for fewer. Inside a handler, pass its ctx: the deadline,
// orchestration id and hops carry on.
func (c *Client) Broadcast(ctx context.Context, capability string, payload any, opts ...CallOption) (*Gathered, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	m, err := c.message(ctx, c.subjects.Broadcast(capability), capability, payload, false, opts)
	if err != nil {
		return nil, err
	}
	return c.gather(ctx, m, "broadcast "+capability)
}

// FanOut sends each branch to its capability as a task of its own and
// gathers their answers into one outcome by the completion policy (default
// quorum 0.6). opts may mix GatherOption and CallOption values. Inside a
// handler, pass its ctx: the deadline, orchestration id and hops carry on.
func (c *Client) FanOut(ctx context.Context, branches []Branch, opts ...any) (*Gathered, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	var (
		req      streams.FanOutRequest
		callOpts []CallOption
	)
	for _, o := range opts {
		switch o := o.(type) {
		case GatherOption:
			o(&req)
		case CallOption:
			callOpts = append(callOpts, o)
		default:
			return nil, fmt.Errorf("agentkit: fan-out option %T is neither a GatherOption nor a CallOption", o)
		}
	}
	for _, b := range branches {
		wb := streams.FanOutBranch{Name: b.Name, Capability: b.Capability, Agent: b.Agent, TimeoutMS: b.Timeout.Milliseconds()}
		if b.Payload != nil {
			p, err := c.encode(b.Payload)
			if err != nil {
				return nil, fmt.Errorf("agentkit: fan-out branch %q: %w", b.Name, err)
			}
			wb.Payload = p
		}
		req.Branches = append(req.Branches, wb)
	}
	body, err := streams.Encode(c.ct, &req)
	if err != nil {
		return nil, err
	}
	return c.FanOutRaw(ctx, body, callOpts...)
}

// FanOutRaw sends a fan-out request already encoded in the client's
// content type (the body of reach.fanout, e.g. read from a file) and
// gathers its outcome like FanOut.
func (c *Client) FanOutRaw(ctx context.Context, body []byte, opts ...CallOption) (*Gathered, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	m, err := c.message(ctx, c.subjects.FanOut(), "fanout", body, false, opts)
	if err != nil {
		return nil, err
	}
	return c.gather(ctx, m, "fan-out")
}

// gather sends a broadcast or fan-out request and reads its aggregate.
func (c *Client) gather(ctx context.Context, m *nats.Msg, what string) (*Gathered, error) {
	reply, err := c.requests.Request(ctx, m, what)
	if err != nil {
		return nil, err
	}
	ct := streams.ContentType(reply.Header, reply.Data)
	e := streams.ErrorFromMessage(reply)
	if e != nil && e.Code != streams.CodeIncomplete {
		return nil, e // nothing was gathered: a bad request, no instance, overload
	}
	var agg streams.Aggregate
	if err := streams.Decode(ct, reply.Data, &agg); err != nil {
		return nil, fmt.Errorf("agentkit: %s: unreadable aggregate: %w", what, err)
	}
	g := &Gathered{Expected: agg.Expected, Answered: agg.Answered, Succeeded: agg.Succeeded, Complete: agg.Complete,
		Missing: append([]streams.Missing{}, agg.Missing...), RequestID: reply.Header.Get(streams.HeaderRequestID),
		OrchestrationID: reply.Header.Get(streams.HeaderOrchestrationID), Header: reply.Header}
	for _, br := range agg.Replies {
		r := BranchResult{Name: br.Name, Node: br.Node, Status: streams.Status(br.Status), Attempts: br.Attempts,
			Latency: time.Duration(br.LatencyMS * float64(time.Millisecond)), data: br.Result, contentType: ct}
		if br.Error != nil {
			r.Err = br.Error
		}
		g.Replies = append(g.Replies, r)
	}
	if e != nil {
		return g, e
	}
	return g, nil
}

// encode returns payload in the client's content type ([]byte as it is).
func (c *Client) encode(payload any) ([]byte, error) {
	if b, ok := payload.([]byte); ok {
		return b, nil
	}
	return streams.Encode(c.ct, payload)
}

// WithQuorum asks a Broadcast for a quorum instead of every instance: a
// fraction below 1 of them, or a count from 1 on (Reach-Quorum).
func WithQuorum(q float64) CallOption {
	return func(m *nats.Msg) { m.Header.Set(streams.HeaderQuorum, strconv.FormatFloat(q, 'g', -1, 64)) }
}
