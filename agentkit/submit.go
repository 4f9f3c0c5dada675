package agentkit

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/streams"
)

// ErrNoResult is returned by Result while a durable task has no recorded
// outcome yet.
var ErrNoResult = errors.New("agentkit: no result recorded yet")

// Submit hands a task to the durable tier (reach.submit.<capability>, the
// REACH_TASKS stream) and returns its request id once JetStream has stored
// it: from then on the task ends in exactly one recorded outcome, whatever
// crashes. Submitting the same request id again (WithRequestID) within two
// minutes is deduplicated. A full buffer (the capability's pending bound) is
// refused with OVERLOADED; nothing is dropped silently.
func (c *Client) Submit(ctx context.Context, capability string, payload any, opts ...CallOption) (string, error) {
	m, err := c.message(ctx, c.subjects.Submit(capability), capability, payload, true, opts)
	if err != nil {
		return "", err
	}
	id := m.Header.Get(streams.HeaderRequestID)
	m.Header.Set(streams.HeaderMsgID, id)
	_, err = c.js.PublishMsg(ctx, m)
	switch {
	case streams.IsBufferFull(err):
		return id, streams.NewError(streams.CodeOverloaded, "the durable buffer of %s is full; try again later", capability)
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
		return id, fmt.Errorf("agentkit: submit %s: no JetStream stream captures %s (run provisioning first): %w", capability, m.Subject, err)
	case err != nil:
		return id, fmt.Errorf("agentkit: submit %s: %w", capability, err)
	}
	return id, nil
}

// Result returns the recorded outcome of a durable task: the result, or the
// business rejection as an error beside it. ErrNoResult means there is none
// yet (the task waits, runs, or ended in the dead-letter or review queue).
func (c *Client) Result(ctx context.Context, requestID string) (*Result, error) {
	s, err := c.js.Stream(ctx, streams.StreamResults)
	if err != nil {
		return nil, err
	}
	raw, err := s.GetLastMsgForSubject(ctx, c.subjects.Result(requestID))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrNoResult, requestID)
	}
	if err != nil {
		return nil, err
	}
	return outcome(&nats.Msg{Subject: raw.Subject, Header: raw.Header, Data: raw.Data})
}

// Wait waits for the outcome of a durable task until ctx ends.
func (c *Client) Wait(ctx context.Context, requestID string) (*Result, error) {
	sub, err := c.nc.SubscribeSync(c.subjects.Result(requestID))
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	if res, err := c.Result(ctx, requestID); !errors.Is(err, ErrNoResult) {
		return res, err
	}
	m, err := sub.NextMsgWithContext(ctx)
	if err != nil {
		return nil, streams.NewError(streams.CodeDeadlineExceeded, "no outcome for %s before the caller's deadline", requestID)
	}
	return outcome(m)
}

// SubmitAndWait submits a durable task and waits for its outcome.
func (c *Client) SubmitAndWait(ctx context.Context, capability string, payload any, opts ...CallOption) (*Result, error) {
	id, err := c.Submit(ctx, capability, payload, opts...)
	if err != nil {
		return nil, err
	}
	return c.Wait(ctx, id)
}

func outcome(m *nats.Msg) (*Result, error) {
	res := resultOf(m)
	if e := streams.ErrorFromMessage(m); e != nil {
		return res, e
	}
	return res, nil
}

// message builds a task message for subject: payload encoded, headers set,
// a fresh request id unless an option gave one, the size checked.
func (c *Client) message(ctx context.Context, subject, capability string, payload any, durable bool, opts []CallOption) (*nats.Msg, error) {
	if err := streams.ValidateCapability(capability); err != nil {
		return nil, streams.NewError(streams.CodeBadRequest, "%v", err)
	}
	m := nats.NewMsg(subject)
	if b, ok := payload.([]byte); ok {
		m.Data = b
	} else {
		b, err := streams.Encode(c.ct, payload)
		if err != nil {
			return nil, err
		}
		m.Data = b
	}
	m.Header.Set(streams.HeaderContentType, c.ct)
	if c.source != "" {
		m.Header.Set(streams.HeaderSource, c.source)
	}
	propagate(ctx, m, durable)
	for _, o := range opts {
		o(m)
	}
	if m.Header.Get(streams.HeaderRequestID) == "" {
		m.Header.Set(streams.HeaderRequestID, uuid.NewString())
	}
	if err := streams.CheckSize(m, c.nc.MaxPayload()); err != nil {
		return nil, err
	}
	return m, nil
}
