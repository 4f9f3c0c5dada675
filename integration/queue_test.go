package integration

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// gate is a handler that holds every task until released, and records the
// order the tasks started in.
type gate struct {
	mu      sync.Mutex
	started []string
	release chan struct{}
}

func newGate() *gate { return &gate{release: make(chan struct{}, 16)} }

func (g *gate) handler() agentkit.Handler {
	return func(ctx context.Context, req *agentkit.Request) (any, error) {
		g.mu.Lock()
		g.started = append(g.started, string(req.Data))
		g.mu.Unlock()
		select {
		case <-g.release:
			return req.Data, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (g *gate) order() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.started...)
}

// waitStarted waits until the agent has started n tasks.
func (g *gate) waitStarted(t *testing.T, n int) {
	t.Helper()
	natstest.WaitFor(t, 5*time.Second, func() error {
		if got := len(g.order()); got != n {
			return fmt.Errorf("%d tasks started, want %d", got, n)
		}
		return nil
	})
}

// gatedStack starts a dispatcher with queueWait in front of one agent with
// a single slot, whose tasks g holds.
func gatedStack(t *testing.T, queueWait time.Duration) (*dispatcher.Dispatcher, *gate, *agentkit.Client) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{QueueWait: queueWait})
	g := newGate()
	st.Agent(agentkit.Config{Type: "gated", ID: "gated-1", MaxConcurrent: 1}, map[string]agentkit.Handler{"gated": g.handler()})
	WaitRoutable(t, "gated", 1, d)
	return d, g, st.Client(agentkit.WithJSON())
}

// When every slot of a capability is in use, tasks wait in the dispatcher
// and get the freed slots in arrival order, each in one attempt.
func TestTasksWaitForAFreeSlotInArrivalOrder(t *testing.T) {
	d, g, c := gatedStack(t, 20*time.Second)

	type answer struct {
		name    string
		attempt int
		err     error
	}
	answers := make(chan answer, 4)
	call := func(name string) {
		go func() {
			res, err := c.Call(context.Background(), "gated", []byte(fmt.Sprintf("%q", name)), agentkit.WithTimeout(20*time.Second))
			a := answer{name: name, err: err}
			if res != nil {
				a.attempt = res.Attempt
			}
			answers <- a
		}()
	}
	call("first")
	g.waitStarted(t, 1)
	// Each of the next three waits; the queue's length is the proof that it
	// arrived before the next one is sent.
	for i, name := range []string{"second", "third", "fourth"} {
		call(name)
		natstest.WaitFor(t, 5*time.Second, func() error {
			if q := d.Stats().Queued; q != int64(i+1) {
				return fmt.Errorf("%d tasks waited, want %d", q, i+1)
			}
			return nil
		})
	}
	for range 4 {
		g.release <- struct{}{}
		a := <-answers
		if a.err != nil {
			t.Fatalf("%s: %v", a.name, a.err)
		}
		if a.attempt != 1 {
			t.Errorf("%s took %d attempts; a wait for a slot is no attempt", a.name, a.attempt)
		}
	}
	want := []string{`"first"`, `"second"`, `"third"`, `"fourth"`}
	if got := g.order(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("started in order %v, want %v", got, want)
	}
}

// A task that waits longer than QueueWait for a slot fails with
// TARGET_BUSY, and the task holding the slot is not disturbed.
func TestQueueWaitEndsWithTargetBusy(t *testing.T) {
	d, g, c := gatedStack(t, 200*time.Millisecond)
	held := make(chan error, 1)
	go func() {
		_, err := c.Call(context.Background(), "gated", []byte(`"held"`), agentkit.WithTimeout(10*time.Second))
		held <- err
	}()
	g.waitStarted(t, 1)
	_, err := c.Call(context.Background(), "gated", []byte(`"waits"`), agentkit.WithTimeout(10*time.Second))
	if !errors.Is(err, streams.ErrTargetBusy) {
		t.Fatalf("want TARGET_BUSY after the queue wait, got %v", err)
	}
	if q := d.Stats().Queued; q != 1 {
		t.Fatalf("%d tasks waited, want 1", q)
	}
	g.release <- struct{}{}
	if err := <-held; err != nil {
		t.Fatalf("the task holding the slot: %v", err)
	}
	if got := g.order(); len(got) != 1 {
		t.Fatalf("the agent started %v; the task that gave up must not run", got)
	}
}

// A unicast task waiting for its busy instance holds up no task that
// another instance can take.
func TestAUnicastTaskWaitsWithoutBlockingOthers(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{QueueWait: 20 * time.Second})
	g := newGate()
	st.Agent(agentkit.Config{Type: "gated", ID: "gated-1", MaxConcurrent: 1}, map[string]agentkit.Handler{"gated": g.handler()})
	st.Agent(agentkit.Config{Type: "gated", ID: "free-1", MaxConcurrent: 1}, map[string]agentkit.Handler{
		"gated": func(_ context.Context, req *agentkit.Request) (any, error) { return req.Data, nil }})
	WaitRoutable(t, "gated", 2, d)
	c := st.Client(agentkit.WithJSON())

	// Hold gated-1's only slot, then queue a unicast task for it.
	held := make(chan error, 2)
	call := func(body string) {
		go func() {
			_, err := c.Call(context.Background(), "gated", []byte(body), agentkit.ToAgent("gated-1"), agentkit.WithTimeout(20*time.Second))
			held <- err
		}()
	}
	call(`"held"`)
	g.waitStarted(t, 1)
	call(`"unicast"`)
	natstest.WaitFor(t, 5*time.Second, func() error {
		if q := d.Stats().Queued; q != 1 {
			return fmt.Errorf("%d tasks waited, want 1", q)
		}
		return nil
	})
	// A task any instance may take goes to free-1 at once.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := c.Call(ctx, "gated", []byte(`"anyone"`))
	if err != nil {
		t.Fatalf("a task for any instance waited behind the unicast one: %v", err)
	}
	if res.Node != "free-1" {
		t.Fatalf("answered by %s, want free-1", res.Node)
	}
	for range 2 {
		g.release <- struct{}{}
		if err := <-held; err != nil {
			t.Fatal(err)
		}
	}
	if got := g.order(); fmt.Sprint(got) != fmt.Sprint([]string{`"held"`, `"unicast"`}) {
		t.Fatalf("gated-1 ran %v", got)
	}
}
