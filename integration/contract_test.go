package integration

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/durable"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// Tests of the wire contract as it holds without agentkit: every agent here
// is a raw-protocol instance (RawInstance) that sends exactly what
// docs/protocol.md asks and nothing more.

// finish answers a delivery with a FINISHED result carrying only what the
// protocol requires of an agent: the status and the content type.
func finish(nc *nats.Conn, m *nats.Msg, body []byte) {
	out := nats.NewMsg(m.Reply)
	out.Header.Set(streams.HeaderStatus, string(streams.StatusFinished))
	out.Header.Set(streams.HeaderContentType, m.Header.Get(streams.HeaderContentType))
	out.Header.Set(streams.HeaderActive, "0")
	out.Data = body
	_ = nc.PublishMsg(out)
}

func TestARelayedResultCarriesTheDispatchersHeaders(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{RelayResults: true})
	agentNC := st.Conn()
	RawInstance(t, agentNC, "raw-1", time.Second, func(m *nats.Msg) { finish(agentNC, m, m.Data) }, "echo")
	WaitRoutable(t, "echo", 1, d)

	req := nats.NewMsg(streams.Subjects{}.Task("echo"))
	req.Header.Set(streams.HeaderOrchestrationID, "orch-7")
	req.Data = []byte(`{"text":"hi"}`)
	res, err := st.Conn().RequestMsg(req, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{streams.HeaderStatus: "FINISHED", streams.HeaderNode: "raw-1",
		streams.HeaderAttempt: "1", streams.HeaderOrchestrationID: "orch-7", streams.HeaderContentType: streams.ContentTypeJSON} {
		if got := res.Header.Get(k); got != want {
			t.Errorf("relayed reply: %s = %q, want %q (headers %v)", k, got, want, res.Header)
		}
	}
	if res.Header.Get(streams.HeaderRequestID) == "" {
		t.Errorf("relayed reply has no %s", streams.HeaderRequestID)
	}
	if v := res.Header.Values(streams.HeaderActive); len(v) > 0 {
		t.Errorf("relayed reply leaks the agent's %s: %v", streams.HeaderActive, v)
	}

	// An agent that leaves out the Content-Type of its result: the reply is
	// in its request's type all the same.
	RawInstance(t, agentNC, "raw-2", time.Second, func(m *nats.Msg) {
		out := nats.NewMsg(m.Reply)
		out.Header.Set(streams.HeaderStatus, string(streams.StatusFinished))
		out.Data = m.Data
		_ = agentNC.PublishMsg(out)
	}, "bare")
	WaitRoutable(t, "bare", 1, d)
	res, err = st.Conn().Request(streams.Subjects{}.Task("bare"), []byte(`{}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Header.Get(streams.HeaderContentType); got != streams.ContentTypeJSON || res.Header.Get(streams.HeaderNode) != "raw-2" {
		t.Errorf("relayed reply of an agent that set no Content-Type: headers %v", res.Header)
	}

	// Nothing delivered: NO_AGENT says so with Reach-Attempt 0.
	res, err = st.Conn().Request(streams.Subjects{}.Task("nothing.here"), []byte(`{}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.Header.Get(streams.HeaderError) != string(streams.CodeNoAgent) || res.Header.Get(streams.HeaderAttempt) != "0" {
		t.Errorf("NO_AGENT reply headers %v, want Reach-Error NO_AGENT and Reach-Attempt 0", res.Header)
	}
}

func TestDeliveriesSayTheirContentTypeAndMalformedPayloadsStopAtTheDispatcher(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	agentNC := st.Conn()
	var delivered atomic.Int64
	types := make(chan string, 8)
	RawInstance(t, agentNC, "raw-1", time.Second, func(m *nats.Msg) {
		delivered.Add(1)
		types <- m.Header.Get(streams.HeaderContentType)
		finish(agentNC, m, m.Data)
	}, "echo")
	WaitRoutable(t, "echo", 1, d)
	nc := st.Conn()
	subject := streams.Subjects{}.Task("echo")
	mp, _ := msgpack.Marshal(map[string]any{"text": "hi"})

	// Without a Content-Type the dispatcher sniffs the body and tells the
	// agent what it found.
	for _, c := range []struct {
		body []byte
		want string
	}{{[]byte(`{"text":"hi"}`), streams.ContentTypeJSON}, {mp, streams.ContentTypeMsgpack}, {nil, streams.ContentTypeJSON}} {
		res, err := nc.Request(subject, c.body, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if got := <-types; got != c.want {
			t.Errorf("body %q was delivered with Content-Type %q, want %q", c.body, got, c.want)
		}
		if got := res.Header.Get(streams.HeaderContentType); got != c.want {
			t.Errorf("body %q answered with Content-Type %q, want %q", c.body, got, c.want)
		}
	}
	before := delivered.Load()

	cases := []struct {
		name, contentType string
		body              []byte
		replyType         string
	}{
		{"broken JSON without a type", "", []byte(`{"a": broken`), streams.ContentTypeJSON},
		{"text without a type", "", []byte("hello"), streams.ContentTypeJSON},
		{"broken JSON declared", streams.ContentTypeJSON, []byte(`{"a":`), streams.ContentTypeJSON},
		{"msgpack with trailing bytes", streams.ContentTypeMsgpack, append(append([]byte{}, mp...), 0x01), streams.ContentTypeMsgpack},
		{"truncated msgpack", streams.ContentTypeMsgpack, mp[:3], streams.ContentTypeMsgpack},
		{"unsupported type", "text/plain", []byte("hi"), streams.ContentTypeJSON},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := nats.NewMsg(subject)
			if c.contentType != "" {
				m.Header.Set(streams.HeaderContentType, c.contentType)
			}
			m.Data = c.body
			res, err := nc.RequestMsg(m, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if code := res.Header.Get(streams.HeaderError); code != string(streams.CodeBadRequest) {
				t.Fatalf("Reach-Error %q, want BAD_REQUEST (headers %v)", code, res.Header)
			}
			if got := res.Header.Get(streams.HeaderContentType); got != c.replyType {
				t.Errorf("answered in %q, want %q", got, c.replyType)
			}
			var body streams.Error
			if err := streams.Decode(c.replyType, res.Data, &body); err != nil || body.Code != streams.CodeBadRequest || body.Message == "" {
				t.Errorf("error body %q does not decode as %s {code,message}: %v", res.Data, c.replyType, err)
			}
		})
	}
	if n := delivered.Load(); n != before {
		t.Errorf("%d malformed payloads reached the agent", n-before)
	}
}

func TestAnAgentThatDoesNotServeTheCapabilitySendsTheTaskElsewhere(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	nc := st.Conn()
	var wrong atomic.Int64
	// "raw-a" lists echo in its record but refuses it, as an agent whose
	// record is stale would.
	RawInstance(t, nc, "raw-a", time.Second, func(m *nats.Msg) {
		wrong.Add(1)
		_ = nc.PublishMsg(streams.ErrorReply(m.Reply, streams.ContentTypeJSON, "",
			streams.NewError(streams.CodeNoAgent, "raw-a does not serve %s", m.Header.Get(streams.HeaderCapability))))
	}, "echo")
	RawInstance(t, nc, "raw-b", time.Second, func(m *nats.Msg) { finish(nc, m, m.Data) }, "echo")
	WaitRoutable(t, "echo", 2, d)
	caller := st.Conn()
	for i := range 20 {
		res, err := caller.Request(streams.Subjects{}.Task("echo"), []byte(`{}`), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if res.Header.Get(streams.HeaderStatus) != "FINISHED" || res.Header.Get(streams.HeaderNode) != "raw-b" {
			t.Fatalf("call %d: headers %v, want FINISHED from raw-b", i, res.Header)
		}
	}
	if wrong.Load() == 0 {
		t.Fatal("no task went to raw-a: the test proves nothing")
	}
}

func TestAnAgentThatDrainsAndLeavesStillDeliversItsLastResult(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{RelayResults: true})
	nc := st.Conn()
	leaving := make(chan *nats.Msg, 1)
	hb := RawInstance(t, nc, "raw-1", time.Second, func(m *nats.Msg) {
		_ = nc.PublishMsg(streams.StatusReply(m.Reply, streams.StatusAcked, ""))
		leaving <- m
	}, "echo")
	WaitRoutable(t, "echo", 1, d)

	type reply struct {
		m   *nats.Msg
		err error
	}
	got := make(chan reply, 1)
	go func() {
		m, err := st.Conn().Request(streams.Subjects{}.Task("echo"), []byte(`{"text":"last"}`), 10*time.Second)
		got <- reply{m, err}
	}()
	m := <-leaving
	// Leave as the protocol says — draining, then the key deleted — and
	// let the dispatcher see the delete before the result.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hb.MarkDraining(ctx); err != nil {
		t.Fatal(err)
	}
	WaitRoutable(t, "echo", 0, d)
	if err := hb.Stop(ctx, true); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 5*time.Second, func() error {
		if _, ok := d.Table().Lookup("raw-1"); ok {
			return errors.New("the dispatcher still has raw-1")
		}
		return nil
	})
	finish(nc, m, m.Data)
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.m.Header.Get(streams.HeaderStatus) != "FINISHED" || string(r.m.Data) != `{"text":"last"}` {
		t.Fatalf("caller got headers %v, body %q; want the agent's last result", r.m.Header, r.m.Data)
	}
}

func TestAnInDoubtOutcomeGoesToReviewNotTheDeadLetters(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	nc := st.Conn()
	RawInstance(t, nc, "raw-1", time.Second, func(m *nats.Msg) {
		out := streams.ErrorReply(m.Reply, streams.ContentTypeJSON, "",
			streams.NewError(streams.CodeInternal, "idempotency key %q: outcome in doubt", m.Header.Get(streams.HeaderIdempotencyKey)))
		out.Header.Set(streams.HeaderInDoubt, "true")
		_ = nc.PublishMsg(out)
	}, "pay.charge")
	WaitRoutable(t, "pay.charge", 1, d)

	// The direct tier: the caller hears that the outcome is in doubt.
	res, err := st.Conn().Request(streams.Subjects{}.Task("pay.charge"), []byte(`{}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.Header.Get(streams.HeaderError) != string(streams.CodeInternal) || res.Header.Get(streams.HeaderInDoubt) != "true" {
		t.Errorf("direct reply headers %v, want INTERNAL with %s: true", res.Header, streams.HeaderInDoubt)
	}

	// The durable tier: the task waits for a person in REACH_REVIEW.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id, err := st.Client().Submit(ctx, "pay.charge", map[string]int{"amount": 5})
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(st.Conn())
	var review []durable.Parked
	natstest.WaitFor(t, 10*time.Second, func() error {
		review, err = durable.ListParked(ctx, js, streams.Subjects{}, streams.StreamReview)
		if err != nil {
			return err
		}
		if len(review) != 1 {
			return fmt.Errorf("%d review entries, want 1", len(review))
		}
		return nil
	})
	if p := review[0]; p.RequestID != id || p.Reason != durable.ReasonInDoubt || p.Code != string(streams.CodeInternal) {
		t.Errorf("review entry %+v, want request %s, reason %s, code INTERNAL", p, id, durable.ReasonInDoubt)
	}
	dlq, err := durable.ListParked(ctx, js, streams.Subjects{}, streams.StreamDLQ)
	if err != nil || len(dlq) != 0 {
		t.Errorf("dead letters %v (%v), want none", dlq, err)
	}
}
