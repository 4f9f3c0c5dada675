package integration

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/selection"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// A never-acknowledging instance is skipped within the ack timeout and the
// task still succeeds.
func TestNeverAckIsSkippedWithinAckTimeout(t *testing.T) {
	const ack = 300 * time.Millisecond
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{AckTimeout: ack, DefaultStrategy: selection.StrategyRoundRobin})
	NeverAck(t, st.Conn(), "a-hung", time.Second, "echo")
	st.Agent(agentkit.Config{Type: "echo", ID: "b-echo"}, map[string]agentkit.Handler{"echo": echoHandler()})
	WaitRoutable(t, "echo", 2, d)
	c := st.Client()
	redirected := 0
	for range 6 {
		start := time.Now()
		res, err := c.Call(context.Background(), "echo", echoIn{Text: "x"})
		if err != nil {
			t.Fatal(err)
		}
		if res.Node != "b-echo" {
			t.Fatalf("answered by %s", res.Node)
		}
		if res.Attempt == 2 {
			redirected++
			if took := time.Since(start); took < ack || took > ack+2*time.Second {
				t.Fatalf("redirect after %v; the ack timeout is %v", took, ack)
			}
		}
	}
	if redirected == 0 {
		t.Fatal("round robin never tried the hung instance")
	}
}

// BIZ_REJECT comes back once and is not retried; TIMEOUT is retried on
// another instance with the same request id.
func TestRejectIsFinalTimeoutIsRetriedElsewhere(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{DefaultStrategy: selection.StrategyRoundRobin,
		MinCallTimeout: 300 * time.Millisecond, BackoffBase: 10 * time.Millisecond})
	var rejects atomic.Int64
	st.Agent(agentkit.Config{Type: "rej", ID: "rej-1"}, map[string]agentkit.Handler{"order.place": func(context.Context, *agentkit.Request) (any, error) {
		rejects.Add(1)
		return nil, agentkit.Reject("out of stock")
	}})
	var mu sync.Mutex
	seen := map[string][]string{} // instance → request ids
	record := func(id string, h agentkit.Handler) agentkit.Handler {
		return func(ctx context.Context, r *agentkit.Request) (any, error) {
			mu.Lock()
			seen[id] = append(seen[id], r.RequestID)
			mu.Unlock()
			return h(ctx, r)
		}
	}
	st.Agent(agentkit.Config{Type: "q", ID: "a-slow"}, map[string]agentkit.Handler{"quote": record("a-slow", Slow(3*time.Second))})
	st.Agent(agentkit.Config{Type: "q", ID: "b-fast"}, map[string]agentkit.Handler{"quote": record("b-fast", echoHandler())})
	WaitRoutable(t, "order.place", 1, d)
	WaitRoutable(t, "quote", 2, d)
	c := st.Client()

	res, err := c.Call(context.Background(), "order.place", echoIn{})
	if !errors.Is(err, streams.ErrBizReject) || rejects.Load() != 1 || res.Attempt != 1 {
		t.Fatalf("want one BIZ_REJECT on attempt 1, got %v after %d executions (attempt %d)", err, rejects.Load(), res.Attempt)
	}

	res, err = c.Call(context.Background(), "quote", echoIn{Text: "q"})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if res.Node != "b-fast" || res.Attempt != 2 {
		t.Fatalf("want the answer of b-fast on attempt 2, got %s on %d", res.Node, res.Attempt)
	}
	if len(seen["a-slow"]) != 1 || len(seen["b-fast"]) != 1 || seen["a-slow"][0] != seen["b-fast"][0] || seen["b-fast"][0] != res.RequestID {
		t.Fatalf("request ids differ across attempts: %v (result %s)", seen, res.RequestID)
	}
}

// countEffects counts side-effect messages on EffectsSubject.
func countEffects(t *testing.T, nc *nats.Conn) *atomic.Int64 {
	var n atomic.Int64
	sub, err := nc.Subscribe(EffectsSubject, func(*nats.Msg) { n.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return &n
}

// writer records a side effect on EffectsSubject, after a pause so that
// concurrent duplicates overlap.
func writer(nc *nats.Conn, pause time.Duration) agentkit.Handler {
	return func(_ context.Context, r *agentkit.Request) (any, error) {
		if err := nc.Publish(EffectsSubject, []byte(r.RequestID)); err != nil {
			return nil, err
		}
		time.Sleep(pause)
		return map[string]string{"charged": r.RequestID}, nil
	}
}

// A write runs exactly once when its agent dies after the side effect and
// before replying, and when two identical requests race.
func TestWriteRunsExactlyOnce(t *testing.T) {
	const hb = 300 * time.Millisecond
	st := NewStack(t, hb)
	d := st.Dispatcher(config.Config{DefaultStrategy: selection.StrategyRoundRobin, Writes: []string{"pay.charge"},
		MinCallTimeout: 10 * time.Second})
	effects := countEffects(t, st.Conn())
	StartChild(t, ChildCrasher, st.Server.ClientURL(), "a-crasher", hb, nil)
	wnc := st.Conn()
	st.Agent(agentkit.Config{Type: "pay", ID: "b-payer"}, map[string]agentkit.Handler{"pay.charge": writer(wnc, 0)})
	WaitRoutable(t, "pay.charge", 2, d)
	c := st.Client()

	// Round robin sends the first task to a-crasher, which charges and dies.
	// The retry reaches b-payer with the same idempotency key: the outcome of
	// the first execution is unknown, so it is not executed again.
	_, err := c.Call(context.Background(), "pay.charge", echoIn{Text: "order-1"})
	natstest.WaitFor(t, 5*time.Second, func() error {
		if effects.Load() != 1 {
			return fmt.Errorf("%d side effects", effects.Load())
		}
		return nil
	})
	if !errors.Is(err, streams.ErrInternal) {
		t.Fatalf("want INTERNAL (outcome in doubt), got %v", err)
	}
	t.Logf("crash after side effect: %v; side effects: %d", err, effects.Load())

	// Two identical requests race, through the dispatcher, on one key.
	WaitRoutable(t, "pay.charge", 1, d)
	before := effects.Load()
	st.Agent(agentkit.Config{Type: "pay", ID: "c-payer"}, map[string]agentkit.Handler{"pay.charge": writer(wnc, 200*time.Millisecond)})
	WaitRoutable(t, "pay.charge", 2, d)
	var wg sync.WaitGroup
	results := make([]*agentkit.Result, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			results[i], err = c.Call(context.Background(), "pay.charge", echoIn{Text: "order-2"}, agentkit.WithIdempotencyKey("order-2"))
			if err != nil {
				t.Errorf("racing call %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if got := effects.Load() - before; got != 1 {
		t.Fatalf("two racing identical requests executed %d times", got)
	}
	if string(results[0].Data) != string(results[1].Data) {
		t.Fatalf("racing calls got different results: %s / %s", results[0].Data, results[1].Data)
	}
	replayed := results[0].Header.Get(agentkit.HeaderReplayed) + results[1].Header.Get(agentkit.HeaderReplayed)
	if replayed != "true" {
		t.Fatalf("want exactly one replayed result, got %q", replayed)
	}
}

func breakerOf(d *dispatcher.Dispatcher, id string) selection.BreakerStatus {
	for _, b := range d.Breakers() {
		if b.Instance == id {
			return b
		}
	}
	return selection.BreakerStatus{}
}

// A breaker opens at its threshold, half-opens after the cooldown, closes
// after its probes and ramps back; replicas agree; the penalty decays.
func TestBreakerLifecycleAcrossReplicas(t *testing.T) {
	st := NewStack(t, time.Second)
	// The states are read by sampling: the open one (Cooldown) and each
	// ramp stage last long enough for a poll on a loaded machine to see it.
	bc := selection.BreakerConfig{ConsecutiveFailures: 3, Cooldown: 2 * time.Second, Probes: 2, RampStep: 1500 * time.Millisecond}
	d1 := st.Dispatcher(config.Config{Name: "d1", Breaker: bc, PenaltyDecay: 2 * time.Second})
	// d2 serves another prefix so that every call goes through d1; it shares
	// the registry and the breaker transitions.
	d2 := st.Dispatcher(config.Config{Name: "d2", Breaker: bc, Subjects: streams.Subjects{Prefix: "elsewhere"}})
	var broken atomic.Bool
	broken.Store(true)
	st.Agent(agentkit.Config{Type: "flap", ID: "flappy"}, map[string]agentkit.Handler{"flap": Flapping(&broken)})
	WaitRoutable(t, "flap", 1, d1, d2)
	c := st.Client()
	call := func() error {
		_, err := c.Call(context.Background(), "flap", echoIn{Text: "x"})
		return err
	}
	for i := range 3 {
		if err := call(); !errors.Is(err, streams.ErrInternal) {
			t.Fatalf("failure %d: %v", i+1, err)
		}
	}
	if s := breakerOf(d1, "flappy"); s.State != selection.BreakerOpen || s.Penalty <= 0 {
		t.Fatalf("after 3 failures: %+v", s)
	}
	firstPenalty := breakerOf(d1, "flappy").Penalty
	natstest.WaitFor(t, 10*time.Second, func() error {
		if s := breakerOf(d2, "flappy"); s.State != selection.BreakerOpen {
			return fmt.Errorf("replica d2 sees %q", s.State)
		}
		return nil
	})
	if err := call(); !errors.Is(err, streams.ErrCircuitOpen) {
		t.Fatalf("call with the breaker open: %v", err)
	}

	broken.Store(false)
	natstest.WaitFor(t, 10*time.Second, func() error {
		if s := breakerOf(d1, "flappy"); s.State != selection.BreakerHalfOpen {
			return fmt.Errorf("state %s", s.State)
		}
		return nil
	})
	for i := range 2 {
		if err := call(); err != nil {
			t.Fatalf("probe %d: %v", i+1, err)
		}
	}
	// The probes' results reach the caller first; the dispatcher learns of
	// them a moment later.
	natstest.WaitFor(t, bc.RampStep, func() error { // 0.25 lasts one step
		if s := breakerOf(d1, "flappy"); s.State != selection.BreakerClosed || s.Share != 0.25 {
			return fmt.Errorf("after the probes: %+v", s)
		}
		return nil
	})
	natstest.WaitFor(t, 10*time.Second, func() error {
		if s := breakerOf(d2, "flappy"); s.State != selection.BreakerClosed {
			return fmt.Errorf("replica d2 sees %q", s.State)
		}
		return nil
	})
	var shares []float64
	natstest.WaitFor(t, 10*time.Second, func() error {
		s := breakerOf(d1, "flappy").Share
		if len(shares) == 0 || shares[len(shares)-1] != s {
			shares = append(shares, s)
		}
		if s != 1 {
			return fmt.Errorf("share %v", s)
		}
		return nil
	})
	if fmt.Sprint(shares) != "[0.25 0.5 1]" {
		t.Fatalf("ramp went %v, want [0.25 0.5 1]", shares)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if p := breakerOf(d1, "flappy").Penalty; p != 0 {
			return fmt.Errorf("penalty %v (was %v)", p, firstPenalty)
		}
		return nil
	})
}

// A loop A → B → C → A ends with LOOP_DETECTED; a caller's deadline travels
// through a 3-hop chain and the last hop sees what remains of it.
func TestLoopsAndDeadlinePropagation(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	client := st.Client()
	forward := func(next string) agentkit.Handler {
		return func(ctx context.Context, r *agentkit.Request) (any, error) {
			res, err := client.Call(ctx, next, r.Data)
			if err != nil {
				return nil, err
			}
			return res.Data, nil
		}
	}
	var lastDeadline, lastHops atomic.Int64
	st.Agent(agentkit.Config{Type: "a", ID: "loop-a"}, map[string]agentkit.Handler{"loop.a": forward("loop.b"), "chain.one": forward("chain.two")})
	st.Agent(agentkit.Config{Type: "b", ID: "loop-b"}, map[string]agentkit.Handler{"loop.b": forward("loop.c"), "chain.two": forward("chain.three")})
	st.Agent(agentkit.Config{Type: "c", ID: "loop-c"}, map[string]agentkit.Handler{"loop.c": forward("loop.a"),
		"chain.three": func(_ context.Context, r *agentkit.Request) (any, error) {
			lastDeadline.Store(r.Deadline.UnixMilli())
			lastHops.Store(int64(r.Hops))
			return strconv.FormatInt(time.Until(r.Deadline).Milliseconds(), 10), nil
		}})
	WaitRoutable(t, "loop.c", 1, d)

	_, err := client.Call(context.Background(), "loop.a", echoIn{})
	if !errors.Is(err, streams.ErrLoopDetected) {
		t.Fatalf("A → B → C → A: want LOOP_DETECTED, got %v", err)
	}
	t.Log(err)

	deadline := time.Now().Add(20 * time.Second)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	res, err := client.Call(ctx, "chain.one", echoIn{})
	if err != nil {
		t.Fatal(err)
	}
	var remaining string
	_ = res.Decode(&remaining)
	if lastDeadline.Load() != deadline.UnixMilli() || lastHops.Load() != 3 {
		t.Fatalf("third hop saw deadline %d (want %d) after %d hops", lastDeadline.Load(), deadline.UnixMilli(), lastHops.Load())
	}
	t.Logf("the third hop had %sms of the caller's 20s left", remaining)
}
