package agentkit_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// A call, stream, submission, broadcast or fan-out the caller's
// permissions do not let it publish is refused by the server, which only says so asynchronously: it
// ends UNAUTHORIZED at once, naming the subject, not at the caller's
// deadline. Every pending call on the refused subject ends so; a call on a
// subject the caller may publish to, in flight meanwhile on the same
// connection, is answered; the handler the connection had still hears the
// refusal, though two Clients share the connection.
func TestAPublishThePermissionsRefuseEndsUnauthorizedAtOnce(t *testing.T) {
	opts := natstest.Options(t.TempDir())
	opts.Users = []*server.User{
		{Username: "dispatcher", Password: "d"},
		{Username: "caller", Password: "c", Permissions: &server.Permissions{
			Publish: &server.SubjectPermission{Allow: []string{"reach.task.echo", "reach.cancel"}},
		}},
	}
	s := natstest.RunServerWith(t, opts)

	// A dispatcher stand-in answers echo once released, so the permitted
	// call is in flight while the refusals come.
	d := natstest.Connect(t, s, nats.UserInfo("dispatcher", "d"))
	arrived, release := make(chan struct{}), make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	defer releaseOnce() // a failing test does not leave the stand-in waiting
	echoed := make(chan error, 1)
	if _, err := d.Subscribe(streams.Subjects{}.Task("echo"), func(m *nats.Msg) {
		close(arrived)
		<-release
		r := streams.StatusReply(m.Reply, streams.StatusFinished, m.Header.Get(streams.HeaderRequestID))
		r.Header.Set(streams.HeaderContentType, streams.ContentTypeJSON)
		r.Data = []byte(`"hi"`)
		echoed <- d.PublishMsg(r)
	}); err != nil {
		t.Fatal(err)
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}

	heard := make(chan error, 16)
	nc := natstest.Connect(t, s, nats.UserInfo("caller", "c"), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case heard <- err:
		default:
		}
	}))
	c, err := agentkit.NewClient(nc, agentkit.WithJSON())
	if err != nil {
		t.Fatal(err)
	}
	other, err := agentkit.NewClient(nc, agentkit.WithJSON()) // shares nc, and its one hook
	if err != nil {
		t.Fatal(err)
	}

	// The test's bound; the calls ask for 30 s, so one answered before
	// ctx ends was not answered by its timeout.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type answer struct {
		res *agentkit.Result
		err error
	}
	echo := make(chan answer, 1)
	go func() {
		res, err := c.Call(ctx, "echo", "hi", agentkit.WithTimeout(30*time.Second))
		echo <- answer{res, err}
	}()
	<-arrived

	refused := func(what, subject string, err error) { // on any goroutine: t.Errorf
		if e := streams.AsError(err); err == nil || e.Code != streams.CodeUnauthorized || ctx.Err() != nil ||
			!strings.Contains(err.Error(), subject+": this caller's permissions do not allow publishing there") {
			t.Errorf("%s: %v (the test's context: %v), want UNAUTHORIZED naming %s at once", what, err, ctx.Err(), subject)
		}
	}
	var wg sync.WaitGroup
	for _, cl := range []*agentkit.Client{c, c, other} { // on one subject: all refused
		wg.Go(func() {
			_, err := cl.Call(ctx, "pay", "hi", agentkit.WithTimeout(30*time.Second))
			refused("call pay", "reach.task.pay", err)
		})
	}
	wg.Wait()
	for _, err := range other.Stream(ctx, "pay", "hi", agentkit.WithTimeout(30*time.Second)) {
		refused("stream pay", "reach.task.pay", err)
	}
	_, err = c.Submit(ctx, "pay", "hi")
	refused("submit pay", "reach.submit.pay", err)
	_, err = other.Broadcast(ctx, "pay", "hi")
	refused("broadcast pay", "reach.broadcast.pay", err)
	_, err = c.FanOut(ctx, []agentkit.Branch{{Name: "a", Capability: "echo"}})
	refused("fan-out", "reach.fanout", err)

	releaseOnce()
	if a := <-echo; a.err != nil || string(a.res.Data) != `"hi"` {
		t.Fatalf("the permitted call beside the refusals: %v %v", a.res, a.err)
	}
	if err := <-echoed; err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-heard:
		if !strings.Contains(err.Error(), `Permissions Violation for Publish to "reach.task.pay"`) {
			t.Fatalf("the connection's own handler heard %v, want the refusal of reach.task.pay", err)
		}
	case <-ctx.Done():
		t.Fatal("the connection's own handler heard no refusal")
	}
}
