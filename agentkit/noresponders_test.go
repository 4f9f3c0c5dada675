package agentkit_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// A call made while no dispatcher listens (they restart, or the client's
// connection came back first) is sent again, with jittered backoff, within
// the caller's deadline: once a dispatcher listens it is answered. Control:
// past the deadline with none listening, it fails "no dispatcher is
// listening" (NO_AGENT).
func TestACallWaitsForADispatcherWithinItsDeadline(t *testing.T) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	c, err := agentkit.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err = c.Call(short, "echo", "hi")
	cancelShort()
	if e := streams.AsError(err); !errors.Is(err, streams.ErrNoAgent) || e.Code != streams.CodeNoAgent {
		t.Fatalf("no dispatcher: %v, want NO_AGENT", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	inMsgs := func() int64 {
		v, err := s.Varz(nil)
		if err != nil {
			t.Fatal(err)
		}
		return v.InMsgs
	}
	before := inMsgs()
	type answer struct {
		res *agentkit.Result
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := c.Call(ctx, "echo", "hi")
		done <- answer{res, err}
	}()
	// The call has been sent twice (nobody listened): now a dispatcher does.
	natstest.WaitFor(t, 20*time.Second, func() error {
		if n := inMsgs() - before; n < 2 {
			return fmt.Errorf("%d sends so far", n)
		}
		return nil
	})
	d := natstest.Connect(t, s)
	if _, err := d.Subscribe(streams.Subjects{}.Task("echo"), func(m *nats.Msg) {
		r := streams.StatusReply(m.Reply, streams.StatusFinished, m.Header.Get(streams.HeaderRequestID))
		r.Header.Set(streams.HeaderContentType, streams.ContentTypeJSON)
		r.Data = []byte(`"hi"`)
		_ = d.PublishMsg(r)
	}); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if a.err != nil || string(a.res.Data) != `"hi"` {
		t.Fatalf("after a dispatcher came: %v %v", a.res, a.err)
	}
	t.Logf("answered after %d sends", inMsgs()-before-1)
}
