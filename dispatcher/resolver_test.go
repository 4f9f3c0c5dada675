package dispatcher

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// flows is a Resolver serving the name "hello.flow": each request waits
// until release is closed, then answers a result; the requests it got are
// sent on seen.
type flows struct {
	seen    chan *nats.Msg
	release chan struct{}
}

func newFlows() *flows { return &flows{seen: make(chan *nats.Msg, 8), release: make(chan struct{})} }

func (*flows) Serves(name string) bool { return name == "hello.flow" }
func (*flows) Names() []string         { return []string{"hello.flow"} }
func (f *flows) Direct(m *nats.Msg, _ string) *nats.Msg {
	f.seen <- m
	<-f.release
	out := nats.NewMsg("")
	out.Header.Set(streams.HeaderStatus, string(streams.StatusFinished))
	out.Header.Set(streams.HeaderRequestID, m.Header.Get(streams.HeaderRequestID))
	out.Data = []byte(`"hello"`)
	return out
}
func (*flows) Durable(msg jetstream.Msg, _ string) { _ = msg.Term() }

// onlyAlice lets only the source "alice" call.
type onlyAlice struct{}

func (onlyAlice) Authorize(capability string, m *nats.Msg, _ bool) *streams.Error {
	if m.Header.Get(streams.HeaderSource) != "alice" {
		return streams.NewError(streams.CodeUnauthorized, "only alice may call %s", capability)
	}
	return nil
}

func callMsg(hdr ...string) *nats.Msg {
	m := nats.NewMsg("")
	m.Data = []byte(`{}`)
	for i := 0; i+1 < len(hdr); i += 2 {
		m.Header.Set(hdr[i], hdr[i+1])
	}
	return m
}

// Call takes a name the resolver serves to it, as reach.task does, with
// ctx's deadline as the request's; ToCapability routes to the capability
// of that name instead, whose NO_AGENT suggests the workflow's name for a
// near one.
func TestCallResolvesAWorkflowsName(t *testing.T) {
	f := newFlows()
	close(f.release)
	h := newHarness(t, natstest.Options(t.TempDir()), WithResolver(f))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reply := h.d.Call(ctx, "hello.flow", callMsg(streams.HeaderRequestID, "r-1"))
	if e := streams.ErrorFromMessage(reply); e != nil || string(reply.Data) != `"hello"` || reply.Header.Get(streams.HeaderRequestID) != "r-1" {
		t.Fatalf("Call of the workflow: %v %s", reply.Header, reply.Data)
	}
	req := <-f.seen
	dl, e := streams.ParseDeadline(req.Header)
	if want, _ := ctx.Deadline(); e != nil || dl.IsZero() || dl.After(want) {
		t.Errorf("the resolver's request has deadline %v (%v), want at most ctx's %v", dl, e, want)
	}
	// Over NATS the same resolver answers.
	if e := h.call("hello.flow", []byte(`{}`)); e != nil {
		t.Errorf("reach.task of the workflow: %+v", e)
	}
	<-f.seen
	reply = h.d.Call(ctx, "hello.flow", callMsg(), ToCapability())
	if e := streams.ErrorFromMessage(reply); e == nil || e.Code != streams.CodeNoAgent {
		t.Errorf("Call to the capability hello.flow: %v %s, want NO_AGENT", reply.Header, reply.Data)
	}
	reply = h.d.Call(ctx, "hello.flw", callMsg())
	if e := streams.ErrorFromMessage(reply); e == nil || e.Message != "no routable instance offers hello.flw; did you mean hello.flow?" {
		t.Errorf("Call of a near name: %+v, want NO_AGENT suggesting hello.flow", e)
	}
}

// A Call whose ctx ends before the resolver answers returns CANCELLED at
// once, naming the request; the run keeps its in-flight slot until it
// ends.
func TestCallOfAWorkflowEndsWithItsContext(t *testing.T) {
	f := newFlows()
	h := newHarness(t, natstest.Options(t.TempDir()), WithResolver(f))
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan *nats.Msg, 1)
	go func() { out <- h.d.Call(ctx, "hello.flow", callMsg(streams.HeaderRequestID, "r-2")) }()
	<-f.seen // the resolver runs it
	cancel()
	reply := <-out
	if e := streams.ErrorFromMessage(reply); e == nil || e.Code != streams.CodeCancelled || reply.Header.Get(streams.HeaderRequestID) != "r-2" {
		t.Fatalf("Call after its ctx ended: %v %s, want CANCELLED for r-2", reply.Header, reply.Data)
	}
	if n := h.d.Stats().InFlight; n != 1 {
		t.Errorf("%d in flight while the run goes on, want 1", n)
	}
	close(f.release)
	natstest.WaitFor(t, 10*time.Second, func() error {
		if h.d.Stats().InFlight != 0 {
			return errNotYet
		}
		return nil
	})
}

// The authorizer decides a Call of a workflow before the resolver gets it.
func TestCallOfAWorkflowIsAuthorized(t *testing.T) {
	f := newFlows()
	close(f.release)
	h := newHarness(t, natstest.Options(t.TempDir()), WithResolver(f), WithAuthorizer(onlyAlice{}))
	reply := h.d.Call(context.Background(), "hello.flow", callMsg(streams.HeaderSource, "mallory"))
	if e := streams.ErrorFromMessage(reply); e == nil || e.Code != streams.CodeUnauthorized {
		t.Fatalf("Call by mallory: %v %s, want UNAUTHORIZED", reply.Header, reply.Data)
	}
	reply = h.d.Call(context.Background(), "hello.flow", callMsg(streams.HeaderSource, "alice"))
	if e := streams.ErrorFromMessage(reply); e != nil || len(f.seen) != 1 {
		t.Fatalf("Call by alice: %v %s, %d requests resolved, want the resolver's result", reply.Header, reply.Data, len(f.seen))
	}
}
