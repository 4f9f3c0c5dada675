package registry_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

func setup(t *testing.T, hb time.Duration) (*registry.Registry, jetstream.JetStream) {
	t.Helper()
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	natstest.Provision(t, nc, streams.Topology{Heartbeat: hb, Memory: true})
	js, _ := jetstream.New(nc)
	reg, err := registry.Open(context.Background(), js)
	if err != nil {
		t.Fatal(err)
	}
	return reg, js
}

func rec(id string, caps ...string) registry.Record {
	return registry.Record{ID: id, Type: "echo", Capabilities: caps, MaxConcurrent: 4, HeartbeatMS: 200}
}

func TestRecordValidation(t *testing.T) {
	cases := []struct {
		name string
		mod  func(*registry.Record)
		want string
	}{
		{"ok", func(*registry.Record) {}, ""},
		{"bad id", func(r *registry.Record) { r.ID = "a.b" }, "instance id"},
		{"no caps", func(r *registry.Record) { r.Capabilities = nil }, "at least one"},
		{"upper cap", func(r *registry.Record) { r.Capabilities = []string{"Echo"} }, "dotted lowercase"},
		{"wildcard cap", func(r *registry.Record) { r.Capabilities = []string{"echo.>"} }, "dotted lowercase"},
		{"dup cap", func(r *registry.Record) { r.Capabilities = []string{"a", "a"} }, "twice"},
		{"zero slots", func(r *registry.Record) { r.MaxConcurrent = 0 }, "max_concurrent"},
		{"bad status", func(r *registry.Record) { r.Status = "zombie" }, "status"},
		{"fast heartbeat", func(r *registry.Record) { r.HeartbeatMS = 5 }, "heartbeat_ms"},
		{"weight", func(r *registry.Record) { r.Weight = -3 }, "weight"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := rec("a-1", "echo")
			tc.mod(&r)
			r.Normalize()
			err := r.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if !errors.Is(err, registry.ErrInvalidRecord) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want ErrInvalidRecord mentioning %q, got %v", tc.want, err)
			}
		})
	}
}

func TestTableFollowsPutsDeletesAndExpiry(t *testing.T) {
	reg, _ := setup(t, 200*time.Millisecond)
	ctx := context.Background()
	if _, err := reg.Put(ctx, rec("keep", "echo")); err != nil {
		t.Fatal(err)
	}
	removals := make(chan string, 4)
	tab := registry.NewTable(reg, registry.WithLogger(zerolog.Nop()),
		registry.WithRemoveHook(func(id string, how registry.Removal) { removals <- id + " " + how.String() }))
	if err := tab.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer tab.Close()
	if got := tab.Candidates("echo").Len(); got != 1 {
		t.Fatalf("initial listing: want 1 candidate, got %d", got)
	}

	// A put becomes routable.
	if _, err := reg.Put(ctx, rec("new", "echo", "math.add")); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if n := tab.Candidates("math.add").Len(); n != 1 {
			return fmt.Errorf("math.add candidates %d", n)
		}
		return nil
	})
	// Draining leaves routing but stays in the table.
	d := rec("new", "echo", "math.add")
	d.Status = registry.StatusDraining
	if _, err := reg.Put(ctx, d); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if n := tab.Candidates("math.add").Len(); n != 0 {
			return fmt.Errorf("draining still routable: %d", n)
		}
		return nil
	})
	// A delete after draining leaves the table: the instance left.
	if err := reg.Delete(ctx, "new"); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if _, ok := tab.Lookup("new"); ok {
			return errors.New("deleted instance still in table")
		}
		return nil
	})
	if got := <-removals; got != "new left" {
		t.Errorf("removal of a draining instance's deleted record: %q, want \"new left\"", got)
	}
	// A delete without draining is a lost instance.
	if _, err := reg.Put(ctx, rec("abrupt", "echo")); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if _, ok := tab.Lookup("abrupt"); !ok {
			return errors.New("abrupt not in the table yet")
		}
		return nil
	})
	if err := reg.Delete(ctx, "abrupt"); err != nil {
		t.Fatal(err)
	}
	if got := <-removals; got != "abrupt lost" {
		t.Errorf("removal of a ready instance's deleted record: %q, want \"abrupt lost\"", got)
	}
	// Without heartbeats "keep" expires on the server's clock (TTL 600ms).
	start := time.Now()
	natstest.WaitFor(t, 10*time.Second, func() error {
		if tab.Len() != 0 {
			return fmt.Errorf("table still has %d", tab.Len())
		}
		return nil
	})
	t.Logf("expired %v after the last put (TTL 600ms)", time.Since(start))
	if got := <-removals; got != "keep lost" {
		t.Errorf("removal of an expired record: %q, want \"keep lost\"", got)
	}
}

func TestHeartbeatKeepsRecordAliveAndDeregisters(t *testing.T) {
	// The record heartbeats every 200ms against a TTL of 1.5s: a loaded
	// machine may stall a few puts (each bounded by the interval) in a row.
	reg, _ := setup(t, 500*time.Millisecond)
	ctx := context.Background()
	tab := registry.NewTable(reg)
	if err := tab.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer tab.Close()
	hb, err := registry.NewHeartbeat(reg, rec("hb-1", "echo"), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if err := hb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	hb.SetActive(3)
	natstest.WaitFor(t, 10*time.Second, func() error {
		if _, ok := tab.Lookup("hb-1"); !ok {
			return errors.New("not registered yet")
		}
		return nil
	})
	// Over 2 TTLs it must never leave the table, and the active count arrives.
	deadline := time.Now().Add(2 * 1500 * time.Millisecond)
	sawActive := false
	for time.Now().Before(deadline) {
		inst, ok := tab.Lookup("hb-1")
		if !ok {
			t.Fatal("heartbeating record left the table")
		}
		sawActive = sawActive || inst.Entry().Active == 3
		select {
		case <-tab.Changed():
		case <-time.After(50 * time.Millisecond):
		}
	}
	if !sawActive {
		t.Fatal("active count never reported")
	}
	if err := hb.Stop(ctx, true); err != nil {
		t.Fatal(err)
	}
	if err := hb.Stop(ctx, true); err != nil {
		t.Fatalf("second stop: %v", err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if _, ok := tab.Lookup("hb-1"); ok {
			return errors.New("still present after deregistration")
		}
		return nil
	})
}

func TestPutRefusesInvalidRecord(t *testing.T) {
	reg, _ := setup(t, 0)
	_, err := reg.Put(context.Background(), rec("x", "Bad Cap"))
	if !errors.Is(err, registry.ErrInvalidRecord) {
		t.Fatalf("want ErrInvalidRecord, got %v", err)
	}
}

func TestTableIgnoresGarbageRecords(t *testing.T) {
	reg, _ := setup(t, 0)
	ctx := context.Background()
	if _, err := reg.KeyValue().Put(ctx, "junk", []byte("not json")); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Put(ctx, rec("good", "echo")); err != nil {
		t.Fatal(err)
	}
	tab := registry.NewTable(reg)
	if err := tab.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer tab.Close()
	if tab.Len() != 1 {
		t.Fatalf("want only the good record, got %d", tab.Len())
	}
	list, err := reg.List(ctx)
	if len(list) != 1 || err == nil {
		t.Fatalf("List: want 1 entry and an error for junk, got %d, %v", len(list), err)
	}
}

// After the server restarts a KV watcher goes silent for good (measured: with
// only the periodic reconcile the table stayed stale). The table re-creates
// its watcher on reconnect, reconciles, and keeps following. The reconcile
// interval is an hour here, so only the reconnect path can pass.
func TestTableFollowsThroughServerRestart(t *testing.T) {
	opts := natstest.Options(t.TempDir())
	opts.Port = natstest.FreePort(t) // the same after the restart
	s, err := natstest.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	current := s
	t.Cleanup(func() { natstest.Stop(current) })
	nc, err := nats.Connect(s.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	natstest.Provision(t, nc, streams.Topology{Heartbeat: 10 * time.Second}) // file store, records outlive the restart
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	reg, err := registry.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Put(ctx, rec("before", "echo")); err != nil {
		t.Fatal(err)
	}
	tab := registry.NewTable(reg, registry.WithReconcileInterval(time.Hour))
	if err := tab.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer tab.Close()

	natstest.Stop(current)
	if current, err = natstest.Start(opts); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if !nc.IsConnected() {
			return errors.New("client not reconnected")
		}
		return nil
	})
	if _, err := reg.Put(ctx, rec("after", "echo")); err != nil {
		t.Fatal(err)
	}
	if err := reg.Delete(ctx, "before"); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		_, hasAfter := tab.Lookup("after")
		_, hasBefore := tab.Lookup("before")
		if !hasAfter || hasBefore {
			return fmt.Errorf("after the restart: has new %v, still has deleted %v", hasAfter, hasBefore)
		}
		return nil
	})
}
