package agentkit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/agentkit/internal/requester"
	"github.com/agent-reach/agentreach/agentkit/internal/results"
	"github.com/agent-reach/agentreach/streams"
)

// errNotProvisioned marks a submission no stream captures because
// REACH_TASKS does not exist.
var errNotProvisioned = errors.New("not provisioned")

var (
	// ErrNoResult is returned by Result while a durable task has no recorded
	// outcome yet.
	ErrNoResult = errors.New("agentkit: no result recorded yet")
	// ErrParked is returned by Wait when the task was dead-lettered or sent
	// for review instead of producing a result; the error also carries the
	// wire code of its last failure.
	ErrParked = errors.New("agentkit: task parked")
)

// Submit hands a task to the durable tier (reach.submit.<capability>, the
// REACH_TASKS stream) and returns its request id once JetStream has stored
// it: from then on the task ends in exactly one recorded outcome, whatever
// crashes. Submitting the same request id again (WithRequestID) within two
// minutes is deduplicated — per caller: its Nats-Msg-Id is
// "<source>.<request-id>" (streams.SubmissionID), followed with credentials
// by ".<proof>" (signature.Signer.SubmissionID), and another caller's task
// under the same id is a task of its own. A full buffer (the capability's
// pending bound) is refused with OVERLOADED; nothing is dropped silently.
func (c *Client) Submit(ctx context.Context, capability string, payload any, opts ...CallOption) (string, error) {
	m, err := c.message(ctx, c.subjects.Submit(capability), capability, payload, true, opts)
	if err != nil {
		return "", err
	}
	return c.submit(ctx, capability, m)
}

func (c *Client) submit(ctx context.Context, capability string, m *nats.Msg) (string, error) {
	id := m.Header.Get(streams.HeaderRequestID)
	source, err := streams.ResultSource(m.Header.Get(streams.HeaderSource))
	if err != nil {
		return id, streams.NewError(streams.CodeBadRequest, "%v", err)
	}
	if c.signer != nil {
		// Unforgeable: no other identity can pre-empt this submission by
		// publishing a task of its own under its Nats-Msg-Id.
		m.Header.Set(streams.HeaderMsgID, c.signer.SubmissionID(id))
	} else {
		m.Header.Set(streams.HeaderMsgID, streams.SubmissionID(source, id))
	}
	if err := streams.CheckSize(m, c.nc.MaxPayload()); err != nil {
		return id, err
	}
	// While REACH_TASKS has no leader (an election, a partition) the
	// publish is retried within ctx: it is deduplicated by its
	// Nats-Msg-Id, so one stored although its answer was lost is not
	// stored twice. Only a stream that does not exist is "run provisioning".
	var missing error // the publish's error when REACH_TASKS does not exist
	ctx, stop := c.requests.Guard(ctx, m.Subject)
	defer stop()
	err = streams.RetryUnavailable(ctx, func(ctx context.Context) error {
		_, err := c.js.PublishMsg(ctx, m)
		if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
			if _, serr := c.js.Stream(ctx, streams.StreamTasks); errors.Is(serr, jetstream.ErrStreamNotFound) {
				missing = err
				return errNotProvisioned // not retried
			}
		}
		return err
	})
	if refused := requester.Refused(ctx, "submit "+capability); err != nil && refused != nil {
		return id, refused
	}
	switch {
	case streams.IsBufferFull(err):
		return id, streams.NewError(streams.CodeOverloaded, "the durable buffer of %s is full; try again later", capability)
	case missing != nil:
		return id, fmt.Errorf("agentkit: submit %s: no JetStream stream captures %s (%s does not exist: run provisioning first): %w",
			capability, m.Subject, streams.StreamTasks, missing)
	case err != nil:
		return id, fmt.Errorf("agentkit: submit %s: %w", capability, err)
	}
	return id, nil
}

// Result returns the recorded outcome of a durable task this client's
// caller submitted: the result, or the business rejection as an error
// beside it. ErrNoResult means there is none yet (the task waits, runs, or
// ended in the dead-letter or review queue) — or none of this caller's: a
// result is published on reach.result.<source>.<request-id> and read only
// there, where <source> is the client's identity (WithCredentials), its
// WithSource, or "_" (streams.NoSource) with neither.
func (c *Client) Result(ctx context.Context, requestID string) (*Result, error) {
	source, err := c.resultSource()
	if err != nil {
		return nil, err
	}
	return c.result(ctx, source, requestID)
}

func (c *Client) result(ctx context.Context, source, requestID string) (*Result, error) {
	m, err := results.Last(ctx, c.nc, c.js, c.subjects.Result(source, requestID))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrNoResult, requestID)
	}
	if err != nil {
		return nil, err
	}
	return outcome(m)
}

// resultSource is the <source> token of the results of the tasks this
// client submits: its identity's name, its WithSource, or NoSource.
func (c *Client) resultSource() (string, error) {
	source := c.source
	if source == "" && c.signer != nil {
		source = c.signer.Name()
	}
	s, err := streams.ResultSource(source)
	if err != nil {
		return "", streams.NewError(streams.CodeBadRequest, "%v", err)
	}
	return s, nil
}

// Wait waits for the outcome of a durable task until ctx ends. A task
// parked while Wait watches (dead-lettered or sent for review) ends the wait
// with ErrParked and the wire code of its last failure; one parked before
// is not seen (see `agentreach dlq ls`). Wait watches the dead-letter and
// review subjects of every capability, which an identity under auth may
// not (docs/security.md): there SubmitAndWait, which watches only its
// capability's, sees a parked task where Wait sees only results.
func (c *Client) Wait(ctx context.Context, requestID string) (*Result, error) {
	source, err := c.resultSource()
	if err != nil {
		return nil, err
	}
	w, err := c.watch(ctx, source, requestID, "")
	if err != nil {
		return nil, err
	}
	defer w.stop()
	return w.wait(ctx)
}

// SubmitAndWait submits a durable task and waits for its outcome, watching
// from before the submission so that no outcome is missed.
func (c *Client) SubmitAndWait(ctx context.Context, capability string, payload any, opts ...CallOption) (*Result, error) {
	m, err := c.message(ctx, c.subjects.Submit(capability), capability, payload, true, opts)
	if err != nil {
		return nil, err
	}
	source, err := streams.ResultSource(m.Header.Get(streams.HeaderSource)) // as signed, or a handler's agent
	if err != nil {
		return nil, streams.NewError(streams.CodeBadRequest, "%v", err)
	}
	w, err := c.watch(ctx, source, m.Header.Get(streams.HeaderRequestID), capability)
	if err != nil {
		return nil, err
	}
	defer w.stop()
	if _, err := c.submit(ctx, capability, m); err != nil {
		return nil, err
	}
	return w.wait(ctx)
}

// waiter watches for one durable task's outcome: its result subject, and
// the dead-letter and review subjects for its request id — its
// capability's, or every capability's when that is not known.
type waiter struct {
	c         *Client
	subject   string // the result's: reach.result.<source>.<request-id>
	source    string
	requestID string
	ch        chan *nats.Msg
	subs      []*nats.Subscription
}

func (c *Client) watch(ctx context.Context, source, requestID, capability string) (*waiter, error) {
	w := &waiter{c: c, subject: c.subjects.Result(source, requestID), source: source, requestID: requestID, ch: make(chan *nats.Msg, 1)}
	deliver := func(m *nats.Msg) {
		if m.Subject == w.subject || m.Header.Get(streams.HeaderRequestID) == requestID && w.parkedOwn(m) {
			select {
			case w.ch <- m:
			default:
			}
		}
	}
	dlq, review := c.subjects.DeadLetterWildcard(), c.subjects.ReviewWildcard()
	if capability != "" {
		dlq, review = c.subjects.DeadLetter(capability), c.subjects.Review(capability)
	}
	for _, subject := range []string{w.subject, dlq, review} {
		sub, err := c.nc.Subscribe(subject, deliver)
		if err != nil {
			w.stop()
			return nil, err
		}
		w.subs = append(w.subs, sub)
	}
	if err := c.nc.FlushWithContext(ctx); err != nil {
		w.stop()
		return nil, err
	}
	return w, nil
}

// parkedOwn reports whether the parked entry m is of this caller's task
// (its Reach-Source), not another caller's under the same request id.
func (w *waiter) parkedOwn(m *nats.Msg) bool {
	s, err := streams.ResultSource(m.Header.Get(streams.HeaderSource))
	return err == nil && s == w.source
}

func (w *waiter) stop() {
	for _, s := range w.subs {
		_ = s.Unsubscribe()
	}
}

func (w *waiter) wait(ctx context.Context) (*Result, error) {
	if res, err := w.c.result(ctx, w.source, w.requestID); !errors.Is(err, ErrNoResult) {
		return res, err
	}
	select {
	case <-ctx.Done():
		return nil, streams.NewError(streams.CodeDeadlineExceeded, "no outcome for %s before the caller's deadline", w.requestID)
	case m := <-w.ch:
		if m.Subject == w.subject {
			w.stored(ctx)
			return outcome(m)
		}
		e := streams.NewError(streams.Code(m.Header.Get(streams.HeaderError)), "%s", m.Header.Get(streams.HeaderLastError))
		return resultOf(m), fmt.Errorf("%w (%s, reason %s): %w", ErrParked, m.Subject, m.Header.Get(streams.HeaderDLQReason), e)
	}
}

// stored waits (up to ctx and storeWait) until REACH_RESULTS holds the
// result that just arrived live: a subscriber can hear it before the
// stream has stored it, and whoever Wait returned to may read it from
// there (`agentreach result`) next.
func (w *waiter) stored(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, storeWait)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := w.c.result(ctx, w.source, w.requestID); !errors.Is(err, ErrNoResult) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// storeWait bounds how long Wait waits for a result it heard to be stored.
const storeWait = 2 * time.Second

func outcome(m *nats.Msg) (*Result, error) {
	res := resultOf(m)
	if e := streams.ErrorFromMessage(m); e != nil {
		return res, e
	}
	return res, nil
}

// message builds a task message for subject: payload encoded, headers set,
// a fresh request id unless an option gave one. Its size is checked where
// it is sent (request, submit), once every header is on it.
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
		m.Header.Set(streams.HeaderRequestID, streams.NewRequestID())
	}
	c.sign(m)
	return m, nil
}
