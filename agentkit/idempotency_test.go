package agentkit_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// writer returns a handler whose side effect is counted, gated by release.
func writer(effects *atomic.Int64, release <-chan struct{}) agentkit.Handler {
	return func(ctx context.Context, r *agentkit.Request) (any, error) {
		n := effects.Add(1)
		if release != nil {
			<-release
		}
		return map[string]int64{"effect": n}, nil
	}
}

func TestIdempotentKeyRunsOnceAcrossInstances(t *testing.T) {
	nc, d, _ := setup(t)
	var effects atomic.Int64
	release := make(chan struct{})
	for _, id := range []string{"w1", "w2"} {
		startAgent(t, nc, agentkit.Config{Type: "pay", ID: id, Heartbeat: heartbeat},
			map[string]agentkit.Handler{"pay.charge": writer(&effects, release)})
	}
	// Two identical requests race on two instances.
	var wg sync.WaitGroup
	results := make([][]*nats.Msg, 2)
	for i, id := range []string{"w1", "w2"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = d.deliver(id, "pay.charge", []byte(`{}`), streams.HeaderIdempotencyKey, "order-42")
		}()
	}
	natstest.WaitFor(t, 5*time.Second, func() error {
		if effects.Load() == 0 {
			return errors.New("no execution yet")
		}
		return nil
	})
	close(release)
	wg.Wait()
	if effects.Load() != 1 {
		t.Fatalf("side effect ran %d times", effects.Load())
	}
	replayed := 0
	for _, r := range results {
		last := r[len(r)-1]
		if string(last.Data) != `{"effect":1}` {
			t.Fatalf("result %s", last.Data)
		}
		if last.Header.Get(agentkit.HeaderReplayed) == "true" {
			replayed++
		}
	}
	if replayed != 1 {
		t.Fatalf("want exactly one replayed result, got %d", replayed)
	}
	// A later retry replays too.
	r := d.deliver("w1", "pay.charge", []byte(`{}`), streams.HeaderIdempotencyKey, "order-42")
	if last := r[len(r)-1]; last.Header.Get(agentkit.HeaderReplayed) != "true" || effects.Load() != 1 {
		t.Fatalf("retry re-executed: %v, effects %d", last.Header, effects.Load())
	}
	// Another key, and the same key for another capability, execute.
	d.deliver("w1", "pay.charge", []byte(`{}`), streams.HeaderIdempotencyKey, "order-43")
	if effects.Load() != 2 {
		t.Fatalf("a new key did not execute: %d", effects.Load())
	}
}

func TestIdempotentKeyOfDeadOwnerIsInDoubt(t *testing.T) {
	nc, d, _ := setup(t)
	var effects atomic.Int64
	startAgent(t, nc, agentkit.Config{Type: "pay", ID: "w1", Heartbeat: heartbeat},
		map[string]agentkit.Handler{"pay.charge": writer(&effects, nil)})
	// A claim left by an instance that died after its side effect.
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(context.Background(), streams.BucketIdempotency)
	if err != nil {
		t.Fatal(err)
	}
	claim, _ := msgpack.Marshal(map[string]string{"state": "pending", "owner": "crashed-1", "request_id": "r"})
	if _, err := kv.Create(context.Background(), "pay.charge.=.order-7", claim); err != nil {
		t.Fatal(err)
	}
	r := d.deliver("w1", "pay.charge", []byte(`{}`), streams.HeaderIdempotencyKey, "order-7")
	e := streams.ErrorFromMessage(r[len(r)-1])
	if e == nil || e.Code != streams.CodeInternal || effects.Load() != 0 {
		t.Fatalf("want INTERNAL in doubt without execution, got %v (effects %d)", e, effects.Load())
	}
	t.Log(e)
}

// A claim of the agent's own that it is not executing — its store failed,
// or it restarted under the same id — is in doubt too, at once, instead of
// a wait for itself that only the deadline ends.
func TestAnOwnClaimWithoutExecutionIsInDoubt(t *testing.T) {
	nc, d, _ := setup(t)
	var effects atomic.Int64
	startAgent(t, nc, agentkit.Config{Type: "pay", ID: "w1", Heartbeat: heartbeat},
		map[string]agentkit.Handler{"pay.charge": writer(&effects, nil)})
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(context.Background(), streams.BucketIdempotency)
	if err != nil {
		t.Fatal(err)
	}
	claim, _ := msgpack.Marshal(map[string]string{"state": "pending", "owner": "w1", "request_id": "r"})
	if _, err := kv.Create(context.Background(), "pay.charge.=.order-8", claim); err != nil {
		t.Fatal(err)
	}
	r := d.deliver("w1", "pay.charge", []byte(`{}`), streams.HeaderIdempotencyKey, "order-8")
	last := r[len(r)-1]
	if e := streams.ErrorFromMessage(last); e == nil || e.Code != streams.CodeInternal || last.Header.Get(streams.HeaderInDoubt) != "true" || effects.Load() != 0 {
		t.Fatalf("want INTERNAL in doubt without execution, got %v, headers %v (effects %d)", e, last.Header, effects.Load())
	}
}

func TestBusyOutcomeReleasesTheKey(t *testing.T) {
	nc, d, _ := setup(t)
	var calls atomic.Int64
	startAgent(t, nc, agentkit.Config{Type: "pay", ID: "w1", Heartbeat: heartbeat},
		map[string]agentkit.Handler{"pay.charge": func(context.Context, *agentkit.Request) (any, error) {
			if calls.Add(1) == 1 {
				return nil, agentkit.Busy("rate limited")
			}
			return "charged", nil
		}})
	r := d.deliver("w1", "pay.charge", []byte(`{}`), streams.HeaderIdempotencyKey, "k1")
	if e := streams.ErrorFromMessage(r[len(r)-1]); e == nil || e.Code != streams.CodeTargetBusy {
		t.Fatalf("first: %v", e)
	}
	r = d.deliver("w1", "pay.charge", []byte(`{}`), streams.HeaderIdempotencyKey, "k1")
	if last := r[len(r)-1]; string(last.Data) != `"charged"` || last.Header.Get(agentkit.HeaderReplayed) != "" {
		t.Fatalf("retry after busy: %s %v", last.Data, last.Header)
	}
	if calls.Load() != 2 {
		t.Fatalf("calls %d", calls.Load())
	}
}

// The same key from two callers (Reach-Source) is two executions, each
// replayed only to its own caller; the bucket holds both under
// <capability>.<caller>.<key>.
func TestIdempotentKeyIsPerCaller(t *testing.T) {
	nc, d, _ := setup(t)
	var effects atomic.Int64
	startAgent(t, nc, agentkit.Config{Type: "pay", ID: "w1", Heartbeat: heartbeat},
		map[string]agentkit.Handler{"pay.charge": writer(&effects, nil)})
	for i, c := range []struct {
		source, want string
		replayed     bool
	}{
		{"alice", `{"effect":1}`, false},
		{"bob", `{"effect":2}`, false},
		{"alice", `{"effect":1}`, true},
		{"", `{"effect":3}`, false},
		{"bob", `{"effect":2}`, true},
	} {
		hdr := []string{streams.HeaderIdempotencyKey, "order-9"}
		if c.source != "" {
			hdr = append(hdr, streams.HeaderSource, c.source)
		}
		r := d.deliver("w1", "pay.charge", []byte(`{}`), hdr...)
		last := r[len(r)-1]
		if string(last.Data) != c.want || (last.Header.Get(agentkit.HeaderReplayed) == "true") != c.replayed {
			t.Fatalf("delivery %d from %q: %s (replayed %q), want %s (replayed %v)", i, c.source, last.Data,
				last.Header.Get(agentkit.HeaderReplayed), c.want, c.replayed)
		}
	}
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(context.Background(), streams.BucketIdempotency)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"pay.charge.alice.order-9", "pay.charge.bob.order-9", "pay.charge.=.order-9"} {
		if _, err := kv.Get(context.Background(), k); err != nil {
			t.Errorf("%s: %v", k, err)
		}
	}
}

// A waiter polling a claim that its owner gives back (the task was busy)
// claims the key itself and executes it. (w2's delivery usually finds the
// claim pending; if it arrives after the release it finds the key free:
// either way it executes once, never replays.)
func TestAWaiterExecutesAReleasedClaim(t *testing.T) {
	nc, d, _ := setup(t)
	var calls atomic.Int64
	release := make(chan struct{})
	h := func(context.Context, *agentkit.Request) (any, error) {
		if calls.Add(1) == 1 {
			<-release
			return nil, agentkit.Busy("rate limited")
		}
		return "charged", nil
	}
	for _, id := range []string{"w1", "w2"} {
		startAgent(t, nc, agentkit.Config{Type: "pay", ID: id, Heartbeat: heartbeat}, map[string]agentkit.Handler{"pay.charge": h})
	}
	first := make(chan []*nats.Msg, 1)
	go func() { first <- d.deliver("w1", "pay.charge", []byte(`{}`), streams.HeaderIdempotencyKey, "k2") }()
	natstest.WaitFor(t, 5*time.Second, func() error {
		if calls.Load() == 0 {
			return errors.New("w1 has not claimed the key yet")
		}
		return nil
	})
	second := make(chan []*nats.Msg, 1)
	go func() { second <- d.deliver("w2", "pay.charge", []byte(`{}`), streams.HeaderIdempotencyKey, "k2") }()
	close(release)
	if r := <-first; streams.ErrorFromMessage(r[len(r)-1]) == nil {
		t.Fatalf("w1: %s, want TARGET_BUSY", r[len(r)-1].Data)
	}
	r := <-second
	if last := r[len(r)-1]; string(last.Data) != `"charged"` || last.Header.Get(agentkit.HeaderReplayed) != "" || calls.Load() != 2 {
		t.Fatalf("w2: %s %v (calls %d), want its own execution", last.Data, last.Header, calls.Load())
	}
}

// The idempotency bucket is gone after the handler ran (as when it has no
// leader): the agent retries storing the outcome and meanwhile sends
// PROCESSING, so a dispatcher's per-call timeout does not expire on work
// that was done. When the bucket is back the result goes out, once.
func TestOutcomeStoreRetryKeepsCallerInformed(t *testing.T) {
	nc, d, _ := setup(t)
	js, _ := jetstream.New(d.nc)
	var effects atomic.Int64
	startAgent(t, nc, agentkit.Config{Type: "pay", ID: "w1", Heartbeat: heartbeat},
		map[string]agentkit.Handler{"pay.charge": func(ctx context.Context, r *agentkit.Request) (any, error) {
			effects.Add(1)
			if err := js.DeleteKeyValue(ctx, streams.BucketIdempotency); err != nil {
				return nil, err
			}
			return "charged", nil
		}})
	inbox := nats.NewInbox()
	sub, err := d.nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(streams.Subjects{}.Agent("w1"))
	m.Reply, m.Data = inbox, []byte(`{}`)
	m.Header.Set(streams.HeaderCapability, "pay.charge")
	m.Header.Set(streams.HeaderRequestID, "req-1")
	m.Header.Set(streams.HeaderIdempotencyKey, "order-1")
	if err := d.nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	progress := 0
	var final *nats.Msg
	for final == nil {
		r, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("waiting for replies (%d PROCESSING so far): %v", progress, err)
		}
		switch streams.Status(r.Header.Get(streams.HeaderStatus)) {
		case streams.StatusProcessing:
			if progress++; progress == 2 { // the store comes back
				natstest.Provision(t, d.nc, streams.Topology{Heartbeat: heartbeat, Memory: true})
			}
		case streams.StatusAcked:
		default:
			final = r
		}
	}
	if got := final.Header.Get(streams.HeaderStatus); got != string(streams.StatusFinished) || string(final.Data) != `"charged"` {
		t.Fatalf("final reply %s %q (%v)", got, final.Data, final.Header)
	}
	if progress < 2 || effects.Load() != 1 {
		t.Fatalf("%d PROCESSING while storing, %d executions", progress, effects.Load())
	}
	// The outcome was stored: a retry replays it.
	r := d.deliver("w1", "pay.charge", []byte(`{}`), streams.HeaderIdempotencyKey, "order-1")
	if last := r[len(r)-1]; last.Header.Get(agentkit.HeaderReplayed) != "true" || effects.Load() != 1 {
		t.Fatalf("retry: %v, executions %d", last.Header, effects.Load())
	}
	t.Logf("%d PROCESSING sent while the outcome store was unavailable", progress)
}
