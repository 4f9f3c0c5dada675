package agenttest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/streams"
)

// direct is one delivery the suite sends itself on reach.agent.<id>, acting
// as a dispatcher, and the replies it has had on its own inbox.
type direct struct {
	s         *suite
	requestID string
	sub       *nats.Subscription
	ch        chan reply // filled by sub's callback, which stamps the arrival; the first 64 replies
	sent      time.Time
	got       []reply
}

// reply is one message on a delivery's inbox and when it came.
type reply struct {
	msg   *nats.Msg
	at    time.Time     // when it arrived
	after time.Duration // since the delivery was sent
}

// status is what a reply says: its Reach-Status with its Reach-Error
// ("FAILED BIZ_REJECT", "TIMEOUT"), or "no responders" for the server's 503
// (nothing subscribed).
func (r reply) status() string {
	if r.msg.Header.Get("Status") == "503" {
		return "no responders"
	}
	st := r.msg.Header.Get(streams.HeaderStatus)
	if st == "" {
		st = "a reply without Reach-Status"
	}
	if code := r.msg.Header.Get(streams.HeaderError); code != "" && code != st {
		st += " " + code
	}
	return st
}

// terminal reports whether r ends the delivery: a result, an error, or no
// responders.
func (r reply) terminal() bool {
	return r.msg.Header.Get("Status") == "503" || streams.Status(r.msg.Header.Get(streams.HeaderStatus)).Terminal()
}

// is reports whether r has Reach-Status st.
func (r reply) is(st streams.Status) bool {
	return r.msg.Header.Get(streams.HeaderStatus) == string(st)
}

// deliver sends one delivery of capability with the headers a dispatcher
// sets; hdr are header pairs that override or add to them (e.g.
// Reach-Attempt 2, Reach-Request-Id of an earlier delivery).
func (s *suite) deliver(capability, contentType string, body []byte, hdr ...string) (*direct, error) {
	d := &direct{s: s, ch: make(chan reply, 64)}
	inbox := s.nc.NewInbox()
	sub, err := s.nc.Subscribe(inbox, func(m *nats.Msg) {
		select {
		case d.ch <- reply{msg: m, at: time.Now()}:
		default: // more replies than any delivery needs: the rest are not looked at
		}
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe to a reply inbox: %w", err)
	}
	m := nats.NewMsg(s.env.Subjects.Agent(s.env.AgentID))
	m.Reply, m.Data = inbox, body
	requestID := streams.NewRequestID()
	m.Header.Set(streams.HeaderCapability, capability)
	m.Header.Set(streams.HeaderRequestID, requestID)
	m.Header.Set(streams.HeaderOrchestrationID, requestID)
	m.Header.Set(streams.HeaderAttempt, "1")
	m.Header.Set(streams.HeaderHops, "1")
	m.Header.Set(streams.HeaderDeadline, strconv.FormatInt(time.Now().Add(deliveryDeadline).UnixMilli(), 10))
	m.Header.Set(streams.HeaderContentType, contentType)
	for i := 0; i+1 < len(hdr); i += 2 {
		m.Header.Set(hdr[i], hdr[i+1])
	}
	d.requestID, d.sub, d.sent = m.Header.Get(streams.HeaderRequestID), sub, time.Now()
	if err := s.nc.PublishMsg(m); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("deliver %s: %w", capability, err)
	}
	return d, nil
}

// next waits until deadline for the delivery's next reply.
func (d *direct) next(ctx context.Context, deadline time.Time) (reply, bool) {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case r := <-d.ch:
		r.after = r.at.Sub(d.sent)
		d.got = append(d.got, r)
		return r, true
	case <-t.C:
	case <-ctx.Done():
	case <-d.s.gone:
	}
	return reply{}, false
}

// final waits until deadline for the reply that ends the delivery.
func (d *direct) final(ctx context.Context, deadline time.Time) (reply, bool) {
	for {
		r, ok := d.next(ctx, deadline)
		if !ok || r.terminal() {
			return r, ok
		}
	}
}

// seen describes every reply so far: "ACKED after 2ms, FINISHED after
// 1.5s", or "nothing".
func (d *direct) seen() string {
	if len(d.got) == 0 {
		return "nothing"
	}
	s := make([]string, len(d.got))
	for i, r := range d.got {
		s[i] = fmt.Sprintf("%s after %v", r.status(), round(r.after))
	}
	return strings.Join(s, ", ")
}

// close stops listening for replies.
func (d *direct) close() { _ = d.sub.Unsubscribe() }

// call sends a task through the dispatcher (reach.task.<capability>) as a
// caller and returns the reply. contentType "" sends no Content-Type. With
// auth it is sent as the caller identity authCaller, signed.
func (s *suite) call(ctx context.Context, capability, contentType string, body []byte, hdr ...string) (*nats.Msg, error) {
	m := nats.NewMsg(s.env.Subjects.Task(capability))
	m.Data = body
	if contentType != "" {
		m.Header.Set(streams.HeaderContentType, contentType)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		m.Header.Set(hdr[i], hdr[i+1])
	}
	nc := s.nc
	if s.auth != nil { // as the caller identity, signed: the dispatcher refuses a task that is not
		nc = s.auth.caller
		if m.Header.Get(streams.HeaderRequestID) == "" {
			m.Header.Set(streams.HeaderRequestID, streams.NewRequestID())
		}
		s.auth.signer.Sign(m, time.Now())
	}
	ctx, cancel := context.WithTimeout(ctx, callBound)
	defer cancel()
	res, err := nc.RequestMsgWithContext(ctx, m)
	if err != nil {
		return nil, fmt.Errorf("calling %s through the dispatcher: no reply within %v: %w", capability, callBound, err)
	}
	return res, nil
}

// round rounds a duration for a message.
func round(d time.Duration) time.Duration {
	if d < 10*time.Millisecond {
		return d.Round(100 * time.Microsecond)
	}
	return d.Round(time.Millisecond)
}
