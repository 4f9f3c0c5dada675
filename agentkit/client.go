package agentkit

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/agentkit/internal/requester"
	"github.com/agent-reach/agentreach/auth/signature"
	"github.com/agent-reach/agentreach/streams"
)

// DefaultCallTimeout bounds a Call whose context has no deadline; it matches
// the default overall deadline.
const DefaultCallTimeout = 60 * time.Second

// Client calls capabilities through the dispatchers. It is safe for
// concurrent use.
type Client struct {
	nc       *nats.Conn
	js       jetstream.JetStream
	jsDomain string
	subjects streams.Subjects
	source   string
	ct       string
	recent   recentCalls // who answered the latest calls, for Feedback

	signer    *signature.Signer // signs every task (sign.go); nil: unsigned
	signerErr error
	requests  *requester.Requester
}

// ClientOption configures a Client.
type ClientOption func(*Client)

// WithSource sets Reach-Source, the calling agent's id, on every call.
func WithSource(id string) ClientOption { return func(c *Client) { c.source = id } }

// WithJSON makes the client encode payloads as JSON; the default is msgpack.
func WithJSON() ClientOption { return func(c *Client) { c.ct = streams.ContentTypeJSON } }

// WithSubjects sets the subject prefix; zero means "reach".
func WithSubjects(s streams.Subjects) ClientOption { return func(c *Client) { c.subjects = s } }

// WithJetStreamDomain makes the client use the JetStream of domain, as
// Config.JetStreamDomain does for an agent: a caller connected to a leaf
// node server without JetStream sets the hub's ("hub", deploy/nats), so its
// durable submissions and result reads go as $JS.hub.API.…, the only
// JetStream requests that cross a leaf link. Empty: the server's own.
func WithJetStreamDomain(domain string) ClientOption { return func(c *Client) { c.jsDomain = domain } }

// NewClient returns a client on nc. A request whose publish the server
// refuses for want of permission ends UNAUTHORIZED at once, naming the
// subject: the server says so only to nc's async error handler, so the
// first Client on nc hooks in after the handler nc has, which still sees
// every error. Set a handler of your own before NewClient: one set later
// with nc.SetErrorHandler replaces the hook, and such calls wait for
// their deadline again.
func NewClient(nc *nats.Conn, opts ...ClientOption) (*Client, error) {
	if nc == nil {
		return nil, errors.New("agentkit: nil NATS connection")
	}
	c := &Client{nc: nc, ct: streams.ContentTypeMsgpack}
	for _, o := range opts {
		o(c)
	}
	var err error
	if c.js, err = jetStreamIn(nc, c.jsDomain); err != nil {
		return nil, err
	}
	if err := c.checkSigner(); err != nil {
		return nil, err
	}
	c.requests = requester.New(nc, c.cancel)
	return c, nil
}

// CallOption adjusts one call.
type CallOption func(*nats.Msg)

// ToAgent sends the task to this instance only (unicast, Reach-Agent).
func ToAgent(id string) CallOption {
	return func(m *nats.Msg) { m.Header.Set(streams.HeaderAgent, id) }
}

// WithRequestID sets the request id instead of a fresh UUID v4.
func WithRequestID(id string) CallOption {
	return func(m *nats.Msg) { m.Header.Set(streams.HeaderRequestID, id) }
}

// WithTimeout asks for a per-call timeout (Reach-Timeout).
func WithTimeout(d time.Duration) CallOption {
	return func(m *nats.Msg) { m.Header.Set(streams.HeaderTimeout, strconv.FormatInt(d.Milliseconds(), 10)) }
}

// WithAffinityKey routes calls with the same key to the same instance when
// the capability uses the consistent-hash strategy.
func WithAffinityKey(k string) CallOption {
	return func(m *nats.Msg) { m.Header.Set(streams.HeaderAffinityKey, k) }
}

// WithIdempotencyKey sets the key under which agents execute a write at most
// once.
func WithIdempotencyKey(k string) CallOption {
	return func(m *nats.Msg) { m.Header.Set(streams.HeaderIdempotencyKey, k) }
}

// WithDeadline sets the overall deadline (Reach-Deadline) of a call or a
// durable submission explicitly.
func WithDeadline(t time.Time) CallOption {
	return func(m *nats.Msg) { m.Header.Set(streams.HeaderDeadline, strconv.FormatInt(t.UnixMilli(), 10)) }
}

// WithBudget sets the cost budget (Reach-Budget): retries stop once the
// attempts' reported Reach-Cost reaches it.
func WithBudget(cost float64) CallOption {
	return func(m *nats.Msg) { m.Header.Set(streams.HeaderBudget, strconv.FormatFloat(cost, 'f', -1, 64)) }
}

// WithHeader sets any header on the call.
func WithHeader(k, v string) CallOption { return func(m *nats.Msg) { m.Header.Set(k, v) } }

// Result is a finished call: the payload and its Reach-* metadata.
type Result struct {
	Data            []byte
	ContentType     string
	Status          streams.Status
	Node            string
	Attempt         int
	RequestID       string
	OrchestrationID string
	Cost            float64
	Header          nats.Header
}

// Decode unmarshals the result payload into v.
func (r *Result) Decode(v any) error { return streams.Decode(r.ContentType, r.Data, v) }

// Call sends payload to a capability and waits for the result. payload is
// encoded in the client's content type; []byte is sent as is. Inside a
// handler, pass the handler's ctx: the orchestration id, hop count and the
// remaining deadline travel on.
//
// Errors carry a wire code: errors.Is(err, streams.ErrNoAgent) and so on.
// The Result is returned alongside an error reply when there was one.
func (c *Client) Call(ctx context.Context, capability string, payload any, opts ...CallOption) (*Result, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	m, err := c.message(ctx, c.subjects.Task(capability), capability, payload, false, opts)
	if err != nil {
		return nil, err
	}
	reply, err := c.requests.Request(ctx, m, "call "+capability)
	if err != nil {
		return nil, err
	}
	res, err := outcome(reply)
	if err == nil && res.Node != "" {
		c.recent.add(res.RequestID, res.Node)
	}
	return res, err
}

// bounded gives ctx DefaultCallTimeout when it has no deadline of its own.
func bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, DefaultCallTimeout)
}

// cancel tells every dispatcher replica that the task requestID is no
// longer wanted (reach.cancel); the one holding it cancels its delivery.
func (c *Client) cancel(requestID string) {
	m := nats.NewMsg(c.subjects.Cancel())
	m.Header.Set(streams.HeaderRequestID, requestID)
	if c.source != "" {
		m.Header.Set(streams.HeaderSource, c.source)
	}
	c.sign(m)              // where auth is on, a dispatcher cancels only its signer's tasks
	_ = c.nc.PublishMsg(m) // advisory: a lost cancel only wastes the agent's work
}

// propagate copies what travels across hops from the handler's request (if
// ctx belongs to one). A call also sets Reach-Deadline from ctx; a durable
// submission only carries a handler's deadline on (its ctx bounds the
// publish, not the task).
func propagate(ctx context.Context, m *nats.Msg, durable bool) {
	req, inHandler := RequestFromContext(ctx)
	if inHandler {
		if req.OrchestrationID != "" {
			m.Header.Set(streams.HeaderOrchestrationID, req.OrchestrationID)
		}
		for _, k := range []string{streams.HeaderTraceParent, streams.HeaderVisits} {
			if v := req.Header.Get(k); v != "" {
				m.Header.Set(k, v)
			}
		}
		m.Header.Set(streams.HeaderHops, strconv.Itoa(req.Hops))
		m.Header.Set(streams.HeaderSource, req.agent.id)
	}
	switch dl, ok := ctx.Deadline(); {
	case ok && !durable:
		m.Header.Set(streams.HeaderDeadline, strconv.FormatInt(dl.UnixMilli(), 10))
	case durable && inHandler && !req.Deadline.IsZero():
		m.Header.Set(streams.HeaderDeadline, strconv.FormatInt(req.Deadline.UnixMilli(), 10))
	}
}

func resultOf(m *nats.Msg) *Result {
	r := &Result{
		Data:            m.Data,
		ContentType:     streams.ContentType(m.Header, m.Data),
		Status:          streams.Status(m.Header.Get(streams.HeaderStatus)),
		Node:            m.Header.Get(streams.HeaderNode),
		Attempt:         int(streams.IntHeader(m.Header, streams.HeaderAttempt)),
		RequestID:       m.Header.Get(streams.HeaderRequestID),
		OrchestrationID: m.Header.Get(streams.HeaderOrchestrationID),
		Header:          m.Header,
	}
	r.Cost, _ = strconv.ParseFloat(m.Header.Get(streams.HeaderCost), 64)
	return r
}
