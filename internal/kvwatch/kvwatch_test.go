package kvwatch_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/internal/kvwatch"
	"github.com/agent-reach/agentreach/internal/natstest"
)

// recorder is a Handler and Observer keeping the keys it was given.
type recorder struct {
	mu      sync.Mutex
	keys    map[string]bool
	stalled int
}

func (r *recorder) Replace(l map[string]jetstream.KeyValueEntry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keys = map[string]bool{}
	for k := range l {
		r.keys[k] = true
	}
}

func (r *recorder) Apply(e jetstream.KeyValueEntry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keys[e.Key()] = e.Operation() == jetstream.KeyValuePut
}

func (r *recorder) Health(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if errors.Is(err, kvwatch.ErrStalled) {
		r.stalled++
	}
}

func (r *recorder) has(k string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.keys[k]
}

// The watcher's consumer is deleted behind its back: no reconnect, no
// closed channel, nothing delivered. The stall probe notices the stream
// holds a message the watcher never delivered and re-creates it, well
// before the hour-long reconcile.
func TestStalledWatcherIsRecreated(t *testing.T) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "T", Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	ready := make(chan struct{})
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		kvwatch.RunWith(wctx, nc, kv, kvwatch.Options{Reconcile: time.Hour, Probe: 50 * time.Millisecond}, rec, zerolog.Nop(), ready)
	}()
	defer func() { cancel(); <-done }()
	<-ready
	if !rec.has("a") {
		t.Fatal("listing lacks a")
	}
	str, err := js.Stream(ctx, "KV_T")
	if err != nil {
		t.Fatal(err)
	}
	names := str.ConsumerNames(ctx)
	n := 0
	for name := range names.Name() {
		if err := str.DeleteConsumer(ctx, name); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n == 0 {
		t.Fatal("no consumer to delete")
	}
	deleted := time.Now()
	if _, err := kv.Put(ctx, "b", []byte("2")); err != nil {
		t.Fatal(err)
	}
	// The update comes first by a direct listing (the watcher left it
	// undelivered for a probe interval), then the stall is detected and the
	// watcher re-created: a later update comes through it.
	var seen time.Duration
	natstest.WaitFor(t, 20*time.Second, func() error {
		if !rec.has("b") {
			return errors.New("b not seen")
		}
		if seen == 0 {
			seen = time.Since(deleted)
		}
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if rec.stalled == 0 {
			return errors.New("no stall detected yet")
		}
		return nil
	})
	if _, err := kv.Put(ctx, "c", []byte("3")); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 20*time.Second, func() error {
		if !rec.has("c") {
			return errors.New("c not seen")
		}
		return nil
	})
	rec.mu.Lock()
	stalled := rec.stalled
	rec.mu.Unlock()
	t.Logf("update seen %v after the watcher's consumer was deleted (stalls detected: %d)", seen.Round(time.Millisecond), stalled)
}
