package integration

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/selection"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

// stallInstance answers every delivery after stall unless a CANCEL comes
// first; it counts deliveries and cancels.
func stallInstance(t *testing.T, st *Stack, id, capability string, stall time.Duration) (deliveries, cancels *atomic.Int64) {
	t.Helper()
	return stalling(t, st, id, "hung", stall, capability)
}

// typedStall is a stallInstance of an agent type, for several capabilities.
func typedStall(t *testing.T, st *Stack, id, agentType string, stall time.Duration, caps ...string) {
	t.Helper()
	stalling(t, st, id, agentType, stall, caps...)
}

func stalling(t *testing.T, st *Stack, id, agentType string, stall time.Duration, caps ...string) (deliveries, cancels *atomic.Int64) {
	t.Helper()
	nc := st.Conn()
	deliveries, cancels = &atomic.Int64{}, &atomic.Int64{}
	var mu sync.Mutex
	running := map[string]chan struct{}{}
	answer := func(m *nats.Msg) {
		if m.Reply == "" {
			cancels.Add(1)
			mu.Lock()
			if c, ok := running[m.Header.Get(streams.HeaderDelivery)]; ok {
				close(c)
				delete(running, m.Header.Get(streams.HeaderDelivery))
			}
			mu.Unlock()
			return
		}
		deliveries.Add(1)
		if stall == 0 {
			finish(nc, m, []byte(`{"from":"`+id+`"}`))
			return
		}
		_ = nc.PublishMsg(streams.StatusReply(m.Reply, streams.StatusAcked, ""))
		c := make(chan struct{})
		mu.Lock()
		running[m.Reply] = c
		mu.Unlock()
		go func() {
			select {
			case <-c:
			case <-time.After(stall):
				finish(nc, m, []byte(`{"from":"`+id+`"}`))
			}
		}()
	}
	RawAgent(t, nc, registry.Record{ID: id, Type: agentType, Capabilities: caps, MaxConcurrent: 8, HeartbeatMS: st.Heartbeat.Milliseconds()}, answer)
	return deliveries, cancels
}

func TestAHedgeAnswersForAStalledInstance(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{Hedges: map[string]selection.HedgeConfig{"lookup": {After: 50 * time.Millisecond, Budget: 1}}})
	_, slowCancels := stallInstance(t, st, "slow-1", "lookup", 3*time.Second)
	stallInstance(t, st, "fast-1", "lookup", 0)
	WaitRoutable(t, "lookup", 2, d)
	nc := st.Conn()
	hedged := 0
	for i := range 20 {
		start := time.Now()
		res, err := nc.Request(streams.Subjects{}.Task("lookup"), []byte(`{}`), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		if res.Header.Get(streams.HeaderStatus) != "FINISHED" || res.Header.Get(streams.HeaderNode) != "fast-1" {
			t.Fatalf("call %d: headers %v after %v, want fast-1's answer", i, res.Header, took)
		}
		if res.Header.Get(streams.HeaderHedged) == "1" {
			hedged++
			if res.Header.Get(streams.HeaderAttempt) != "2" {
				t.Errorf("a hedged answer says attempt %q, want 2", res.Header.Get(streams.HeaderAttempt))
			}
		}
	}
	if hedged == 0 {
		t.Fatal("no call's first delivery went to slow-1: the test proves nothing")
	}
	if s := d.Stats(); s.Hedged != int64(hedged) {
		t.Errorf("stats count %d hedges, %d answers said so", s.Hedged, hedged)
	}
	// The stalled deliveries were cancelled when the hedge won.
	natstest.WaitFor(t, 5*time.Second, func() error {
		if n := slowCancels.Load(); n != int64(hedged) {
			return fmt.Errorf("slow-1 got %d CANCELs for %d hedged calls", n, hedged)
		}
		return nil
	})
}

func TestHedgesStayWithinTheirBudget(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{Hedges: map[string]selection.HedgeConfig{"lookup": {After: 5 * time.Millisecond, Budget: 0.1}}})
	stallInstance(t, st, "slow-1", "lookup", 30*time.Millisecond)
	stallInstance(t, st, "slow-2", "lookup", 30*time.Millisecond)
	WaitRoutable(t, "lookup", 2, d)
	nc := st.Conn()
	const calls = 100
	for range calls {
		if _, err := nc.Request(streams.Subjects{}.Task("lookup"), []byte(`{}`), 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	s := d.Stats()
	t.Logf("%d calls, every one slower than the hedge delay: %d hedged, %d refused by the budget", calls, s.Hedged, s.HedgesOver)
	if s.Hedged > calls/10 || s.HedgesOver == 0 {
		t.Errorf("%d hedges and %d refused over %d deliveries with a 10%% budget", s.Hedged, s.HedgesOver, calls)
	}
}

func TestWritesAreNeverHedged(t *testing.T) {
	nc := &nats.Conn{}
	_, err := dispatcher.New(nc, config.Config{Writes: []string{"pay.charge"}, Hedges: map[string]selection.HedgeConfig{"pay.charge": {}}})
	if !errors.Is(err, config.ErrInvalid) {
		t.Fatalf("hedging a write: %v, want ErrInvalidConfig", err)
	}
}

// Hedged calls of an idempotent capability, whose agents stall now and
// then: every call's side effect happens exactly once, whichever delivery
// ran it.
func TestHedgedIdempotentCallsTakeEffectOnce(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{Hedges: map[string]selection.HedgeConfig{"ledger.add": {After: 20 * time.Millisecond, Budget: 0.2}}})
	effects := make(map[string]int)
	var mu sync.Mutex
	var n atomic.Int64
	handler := func(_ context.Context, r *agentkit.Request) (any, error) {
		mu.Lock()
		effects[r.Header.Get(streams.HeaderIdempotencyKey)]++
		mu.Unlock()
		if n.Add(1)%50 == 0 { // 2% stall
			time.Sleep(200 * time.Millisecond)
		}
		return map[string]bool{"ok": true}, nil
	}
	for _, id := range []string{"ledger-1", "ledger-2"} {
		st.Agent(agentkit.Config{Type: "ledger", ID: id, MaxConcurrent: 16}, map[string]agentkit.Handler{"ledger.add": handler})
	}
	WaitRoutable(t, "ledger.add", 2, d)
	c := st.Client()
	const calls, callers = 1000, 16
	var wg sync.WaitGroup
	errs := make(chan error, calls)
	var next, hedgedAnswers atomic.Int64
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > calls {
					return
				}
				res, err := c.Call(context.Background(), "ledger.add", map[string]int64{"i": i},
					agentkit.WithIdempotencyKey(fmt.Sprint("entry-", i)))
				if err != nil {
					errs <- err
					continue
				}
				if res.Header.Get(streams.HeaderHedged) == "1" {
					hedgedAnswers.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("call: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	twice := 0
	for _, k := range effects {
		if k > 1 {
			twice++
		}
	}
	s := d.Stats()
	t.Logf("ledger: %d calls, %d keys executed, %d executed more than once; %d hedges", calls, len(effects), twice, s.Hedged)
	if len(effects) != calls || twice > 0 {
		t.Fatalf("%d keys executed (want %d), %d more than once", len(effects), calls, twice)
	}
	if s.Hedged == 0 {
		t.Error("no call was hedged: the test proves nothing")
	}
	// Which delivery answers is timing: a hedge that finds the key claimed
	// waits for the first delivery's outcome and replays it, so the first
	// usually wins here. TestAnAgentkitHedgeAnswersItsCaller shows a
	// winning hedge reaching the caller.
	t.Logf("%d answers came from the hedge", hedgedAnswers.Load())
}

// agentkit agents answer callers directly when offered; a task that may be
// hedged is not offered that, so the caller learns the hedge answered.
func TestAnAgentkitHedgeAnswersItsCaller(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{Hedges: map[string]selection.HedgeConfig{"lookup": {After: 250 * time.Millisecond, Budget: 1}}})
	for _, id := range []string{"slow-1", "fast-1"} {
		stall := id == "slow-1"
		st.Agent(agentkit.Config{Type: "lookup-svc", ID: id}, map[string]agentkit.Handler{"lookup": func(ctx context.Context, _ *agentkit.Request) (any, error) {
			if stall {
				<-ctx.Done() // until the hedge wins and the dispatcher cancels this delivery
				return nil, ctx.Err()
			}
			return map[string]string{"from": id}, nil
		}})
	}
	WaitRoutable(t, "lookup", 2, d)
	c := st.Client()
	hedged := 0
	for i := range 20 {
		res, err := c.Call(context.Background(), "lookup", map[string]int{"i": i}, agentkit.WithTimeout(10*time.Second))
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if node := res.Header.Get(streams.HeaderNode); node != "fast-1" {
			t.Fatalf("call %d answered by %q, want fast-1", i, node)
		}
		if res.Header.Get(streams.HeaderHedged) == "1" {
			hedged++
		}
	}
	if hedged == 0 {
		t.Fatal("no call's first delivery went to slow-1: the test proves nothing")
	}
	if s := d.Stats(); s.Hedged != int64(hedged) {
		t.Errorf("stats count %d hedges, %d answers said %s: 1", s.Hedged, hedged, streams.HeaderHedged)
	}
}

// Hedging from the policy applies only where a second delivery is
// harmless: a capability its declarations call read-only, not one they
// say nothing about.
func TestThePolicyHedgesOnlyWhatIsSafeToRepeat(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	nc := st.Conn()
	putDeclaration(t, nc, "type: lookup-svc\ncapabilities: [{name: lookup, mode: read}, {name: book}]\n", d)
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(context.Background(), streams.BucketPolicy)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"lookup", "book"} {
		if _, err := registry.PutPolicy(context.Background(), kv, "capability."+c, []byte(`{"hedge": {"after_ms": 50, "budget": 1}}`)); err != nil {
			t.Fatal(err)
		}
	}
	natstest.WaitFor(t, 5*time.Second, func() error {
		if _, ok := d.Policies().Current().Value("capability.book"); !ok {
			return errors.New("the policy has not arrived")
		}
		return nil
	})
	for _, id := range []string{"svc-1", "svc-2"} {
		typedStall(t, st, id, "lookup-svc", 300*time.Millisecond, "lookup", "book")
	}
	WaitRoutable(t, "lookup", 2, d)
	for range 4 {
		for _, c := range []string{"lookup", "book"} {
			if _, err := nc.Request(streams.Subjects{}.Task(c), []byte(`{}`), 10*time.Second); err != nil {
				t.Fatal(err)
			}
		}
	}
	if s := d.Stats(); s.Hedged != 4 {
		t.Errorf("%d hedges for 4 calls of a read-only capability and 4 of an undeclared one, want 4", s.Hedged)
	}
}
