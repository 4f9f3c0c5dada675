package integration

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// fairStack is a dispatcher (MaxInFlight 50) in front of an agent whose
// "hold" tasks last until the test opens the gate, and whose "echo" tasks
// answer at once.
func fairStack(t *testing.T, fairShareAt int) (*Stack, *dispatcher.Dispatcher, func()) {
	t.Helper()
	st := NewStack(t, time.Second)
	// The held tasks outlive any per-call timeout the test could meet.
	d := st.Dispatcher(config.Config{MaxInFlight: 50, FairShareAt: fairShareAt, MinCallTimeout: time.Minute, MaxCallTimeout: time.Minute})
	gate := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(open)
	st.Agent(agentkit.Config{Type: "fair", ID: "fair-1", MaxConcurrent: 500}, map[string]agentkit.Handler{
		"hold": func(ctx context.Context, r *agentkit.Request) (any, error) {
			select {
			case <-gate:
				return r.Data, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		},
		"echo": func(_ context.Context, r *agentkit.Request) (any, error) { return r.Data, nil },
	})
	WaitRoutable(t, "hold", 1, d)
	WaitRoutable(t, "echo", 1, d)
	return st, d, open
}

// flood counts the answers to the "hold" tasks one caller publishes.
type flood struct {
	nc                               *nats.Conn
	inbox, source                    string
	sent                             int64
	finished, overloaded, bad        atomic.Int64
	shareMessages, retryAfterMissing atomic.Int64
}

func startFlood(t *testing.T, st *Stack, source string) *flood {
	t.Helper()
	f := &flood{nc: st.Conn(), source: source}
	f.inbox = f.nc.NewRespInbox()
	sub, err := f.nc.Subscribe(f.inbox, func(m *nats.Msg) {
		switch {
		case m.Header.Get(streams.HeaderStatus) == string(streams.StatusFinished):
			f.finished.Add(1)
		case m.Header.Get(streams.HeaderError) == string(streams.CodeOverloaded):
			f.overloaded.Add(1)
			if m.Header.Get("Retry-After") != "1" {
				f.retryAfterMissing.Add(1)
			}
			if e := streams.ErrorFromMessage(m); e != nil && strings.Contains(e.Message, "caller "+source+" holds ") {
				f.shareMessages.Add(1)
			}
		default:
			f.bad.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return f
}

func (f *flood) send(t *testing.T, n int) {
	t.Helper()
	for range n {
		m := nats.NewMsg("reach.task.hold")
		m.Reply, m.Data = f.inbox, []byte(`{}`)
		m.Header.Set(streams.HeaderSource, f.source)
		if err := f.nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
		f.sent++
	}
	if err := f.nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

func (f *flood) answered() int64 { return f.finished.Load() + f.overloaded.Load() + f.bad.Load() }

// waitAnswered waits until every task sent but the held ones (held still
// in flight) has its answer.
func (f *flood) waitAnswered(t *testing.T, held int64) {
	t.Helper()
	natstest.WaitFor(t, 30*time.Second, func() error {
		if got := f.answered(); got < f.sent-held {
			return fmt.Errorf("%s: %d of %d answered, %d held", f.source, got, f.sent, held)
		}
		return nil
	})
}

// One caller's flood of slow tasks does not starve another caller: the
// flooder holds at most FairShareAt (default 80%) of the in-flight cap and
// its excess is refused OVERLOADED with Retry-After, while every one of the
// other caller's 20 calls, made during the flood, is served.
func TestFairShareOneCallerCannotStarveAnother(t *testing.T) {
	st, d, open := fairStack(t, 0)
	a := startFlood(t, st, "flood-a")
	a.send(t, 200)
	a.waitAnswered(t, 40) // the tasks admitted are held: the rest are refused
	if got := d.Stats().InFlight; got != 40 || a.overloaded.Load() != 160 || a.finished.Load() != 0 || a.bad.Load() != 0 {
		t.Fatalf("after 200 of flood-a's tasks: %d in flight, %d OVERLOADED, %d finished, %d other (want 40, 160, 0, 0)",
			got, a.overloaded.Load(), a.finished.Load(), a.bad.Load())
	}

	// flood-a goes on while caller-b makes its 20 calls, five at a time.
	nc := st.Conn()
	var wg sync.WaitGroup
	var served, refused, other atomic.Int64
	for w := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 4 {
				m := nats.NewMsg("reach.task.echo")
				m.Data = []byte(fmt.Sprintf(`{"w":%d,"i":%d}`, w, i))
				m.Header.Set(streams.HeaderSource, "caller-b")
				res, err := nc.RequestMsg(m, 30*time.Second)
				switch {
				case err != nil:
					other.Add(1)
				case res.Header.Get(streams.HeaderStatus) == string(streams.StatusFinished):
					served.Add(1)
				case res.Header.Get(streams.HeaderError) == string(streams.CodeOverloaded):
					refused.Add(1)
				default:
					other.Add(1)
				}
			}
		}()
	}
	a.send(t, 100)
	wg.Wait()
	a.waitAnswered(t, 40)
	if served.Load() != 20 {
		t.Fatalf("caller-b: %d of 20 served, %d OVERLOADED, %d other", served.Load(), refused.Load(), other.Load())
	}
	if a.overloaded.Load() != 260 || a.shareMessages.Load() != 260 || a.retryAfterMissing.Load() != 0 {
		t.Fatalf("flood-a: %d OVERLOADED (want 260), %d naming its share, %d without Retry-After: 1",
			a.overloaded.Load(), a.shareMessages.Load(), a.retryAfterMissing.Load())
	}

	// Once the gate opens, the tasks held finish.
	open()
	natstest.WaitFor(t, 30*time.Second, func() error {
		if a.finished.Load() != 40 || d.Stats().InFlight != 0 {
			return fmt.Errorf("flood-a: %d of 40 held tasks finished, %d in flight", a.finished.Load(), d.Stats().InFlight)
		}
		return nil
	})
}

// The control: with FairShareAt at MaxInFlight, a caller alone fills the
// whole cap, and beyond it is refused for the cap, not a share.
func TestFairShareOffLetsOneCallerFillTheCap(t *testing.T) {
	st, d, open := fairStack(t, 50)
	a := startFlood(t, st, "alone")
	a.send(t, 200)
	a.waitAnswered(t, 50)
	if got := d.Stats().InFlight; got != 50 || a.overloaded.Load() != 150 || a.shareMessages.Load() != 0 || a.retryAfterMissing.Load() != 0 || a.bad.Load() != 0 {
		t.Fatalf("200 tasks of a caller alone: %d in flight (want 50), %d OVERLOADED (want 150), %d for a share, %d without Retry-After, %d other",
			got, a.overloaded.Load(), a.shareMessages.Load(), a.retryAfterMissing.Load(), a.bad.Load())
	}
	open()
	natstest.WaitFor(t, 30*time.Second, func() error {
		if a.finished.Load() != 50 {
			return fmt.Errorf("%d of 50 held tasks finished", a.finished.Load())
		}
		return nil
	})
}
