package integration

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// An instance whose subject had no subscription (its process died; its
// record lives on until the TTL) costs at most one redirected task per
// caller, not one per pick: it gets nothing more until a newer record shows
// it back.
func TestAnInstanceWithoutSubscriptionGetsNoTaskUntilANewRecord(t *testing.T) {
	// Heartbeats every 2 s: the dead record stays for up to 6 s, ample for
	// the calls below even on a slow machine.
	st := NewStack(t, 2*time.Second)
	// A long ACK timeout: only "no responders" can get a task away from the
	// dead instance in time.
	d := st.Dispatcher(config.Config{AckTimeout: time.Minute})
	// One slot on the healthy agent: while it is busy, the dead one is the
	// only instance with room, so it would be picked again and again.
	raw := func(_ context.Context, r *agentkit.Request) (any, error) { return r.Data, nil }
	st.Agent(agentkit.Config{Type: "echo", ID: "alive", MaxConcurrent: 1}, map[string]agentkit.Handler{"echo": raw})
	dead := st.Conn()
	RawInstance(t, dead, "dead", st.Heartbeat, func(*nats.Msg) {}, "echo")
	WaitRoutable(t, "echo", 2, d)
	dead.Close() // the subscription goes; the record stays for up to 3 heartbeats
	// Once the server has noticed: a delivery it accepts before that is lost
	// and costs its ACK timeout, which is another matter.
	probe := st.Conn()
	natstest.WaitFor(t, 5*time.Second, func() error {
		if _, err := probe.Request(streams.Subjects{}.Agent("dead"), nil, time.Second); !errors.Is(err, nats.ErrNoResponders) {
			return fmt.Errorf("request to the dead instance: %v", err)
		}
		return nil
	})

	const callers = 4
	calls := load(st.Client(), "echo", callers)
	natstest.WaitFor(t, 10*time.Second, func() error {
		if n := calls.ok.Load(); n < 100 {
			e := calls.errs()
			if len(e) > 0 {
				return fmt.Errorf("%d calls answered, %d failed: %v", n, len(e), e[0])
			}
			return fmt.Errorf("%d calls answered", n)
		}
		return nil
	})
	if e := calls.stop(); len(e) > 0 {
		t.Fatalf("%d calls failed, first: %v", len(e), e[0])
	}
	if _, still := d.Table().Lookup("dead"); !still {
		t.Fatal("the dead instance left the table during the test: it proves nothing")
	}
	// Each caller's first task may go there before the first "no
	// responders" comes back; none after it.
	if r := d.Stats().Redirected; r > callers {
		t.Fatalf("%d tasks redirected from the dead instance, want at most %d", r, callers)
	}

	// Back with a newer record (a restart under the same id), it gets tasks
	// again (when the healthy one is busy: it still carries a penalty).
	var revived atomic.Int64
	back := st.Conn()
	RawInstance(t, back, "dead", st.Heartbeat, func(m *nats.Msg) {
		revived.Add(1)
		res := streams.StatusReply(m.Reply, streams.StatusFinished, m.Header.Get(streams.HeaderRequestID))
		res.Header.Set(streams.HeaderNode, "dead")
		res.Data = m.Data
		_ = back.PublishMsg(res)
	}, "echo")
	calls = load(st.Client(), "echo", callers)
	natstest.WaitFor(t, 10*time.Second, func() error {
		if revived.Load() == 0 {
			return errors.New("no task reached the instance since it came back")
		}
		return nil
	})
	if e := calls.stop(); len(e) > 0 {
		t.Fatalf("after the restart: %d calls failed, first: %v", len(e), e[0])
	}
}
