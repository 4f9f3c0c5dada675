package registry_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

// The store is down for longer than a record's TTL (a file-backed server
// stopped and restarted on the same port): every record expires, though the
// agent heartbeating "live" is up all along. The table keeps it routed
// (stale at most) and never removes it; the agent that died before the
// outage leaves within a TTL of the store coming back. Figures are logged.
func TestTableKeepsLiveAgentThroughStoreOutage(t *testing.T) {
	const hb = 500 * time.Millisecond
	opts := natstest.Options(t.TempDir())
	opts.Port = natstest.FreePort(t)
	s, err := natstest.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	current := s
	t.Cleanup(func() { natstest.Stop(current) })
	connect := func(wait time.Duration) *nats.Conn {
		nc, err := nats.Connect(s.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(wait))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	// The agent's connection comes back a few heartbeats after the
	// table's, so the server has expired its record by then (as in a
	// cluster, where the expiry comes when the bucket has a leader again
	// and the agent's retried put some moments later).
	tableConn, agentConn := connect(50*time.Millisecond), connect(4*hb)
	natstest.Provision(t, tableConn, streams.Topology{Heartbeat: hb}) // file store
	ctx := context.Background()
	open := func(nc *nats.Conn) *registry.Registry {
		js, _ := jetstream.New(nc)
		reg, err := registry.Open(ctx, js)
		if err != nil {
			t.Fatal(err)
		}
		return reg
	}
	agentReg := open(agentConn)
	beat := func(id string) *registry.Heartbeat {
		r := rec(id, "echo")
		r.HeartbeatMS = hb.Milliseconds()
		h, err := registry.NewHeartbeat(agentReg, r, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Start(ctx); err != nil {
			t.Fatal(err)
		}
		return h
	}
	live, dead := beat("live"), beat("dead")
	defer func() { _ = live.Stop(ctx, false) }()

	var mu sync.Mutex
	removed := map[string]time.Time{}
	tab := registry.NewTable(open(tableConn), registry.WithReconcileInterval(time.Hour), registry.WithProbeInterval(100*time.Millisecond),
		registry.WithRemoveHook(func(id string, _ registry.Removal) {
			mu.Lock()
			removed[id] = time.Now()
			mu.Unlock()
		}))
	if err := tab.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer tab.Close()
	natstest.WaitFor(t, 5*time.Second, func() error {
		if tab.Candidates("echo").Len() != 2 {
			return errors.New("both agents not routable yet")
		}
		return nil
	})
	if err := dead.Stop(ctx, false); err != nil { // dies without deregistering
		t.Fatal(err)
	}

	natstest.Stop(current)
	// The fault: the store is gone for twice the record TTL.
	<-time.After(6 * hb)
	if current, err = natstest.Start(opts); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	sawStale := false
	natstest.WaitFor(t, 15*time.Second, func() error {
		inst, ok := tab.Lookup("live")
		if !ok {
			return errors.New("live agent left the table")
		}
		if inst.Stale() {
			sawStale = true
			return errors.New("live agent still stale")
		}
		if !inst.Entry().Updated.After(back.Add(-time.Second)) {
			return errors.New("no heartbeat stored since the restart")
		}
		return nil
	})
	fresh := time.Since(back)
	natstest.WaitFor(t, 15*time.Second, func() error {
		if _, ok := tab.Lookup("dead"); ok {
			return errors.New("dead agent still in the table")
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if at, ok := removed["live"]; ok {
		t.Fatalf("the live agent was removed %v after the restart", at.Sub(back))
	}
	if tab.Candidates("echo").Len() != 1 {
		t.Fatalf("routes after the outage: %d, want the live agent only", tab.Candidates("echo").Len())
	}
	t.Logf("store down %v (TTL %v): live agent stayed routed (stale seen: %v), heartbeat stored %v after the restart; dead agent removed %v after it",
		6*hb, 3*hb, sawStale, fresh.Round(time.Millisecond), removed["dead"].Sub(back).Round(time.Millisecond))
}

// Control: with the store healthy, an agent that stops heartbeating leaves
// the table when its record expires, without a grace.
func TestTableRemovesDeadAgentWithoutOutage(t *testing.T) {
	const hb = 300 * time.Millisecond
	reg, _ := setup(t, hb)
	ctx := context.Background()
	r := rec("gone", "echo")
	r.HeartbeatMS = hb.Milliseconds()
	h, err := registry.NewHeartbeat(reg, r, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(ctx); err != nil {
		t.Fatal(err)
	}
	tab := registry.NewTable(reg, registry.WithProbeInterval(50*time.Millisecond))
	if err := tab.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer tab.Close()
	if _, ok := tab.Lookup("gone"); !ok {
		t.Fatal("not listed")
	}
	if err := h.Stop(ctx, false); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	natstest.WaitFor(t, 10*time.Second, func() error {
		if inst, ok := tab.Lookup("gone"); ok {
			return fmt.Errorf("still listed (stale %v)", inst.Stale())
		}
		return nil
	})
	t.Logf("dead agent left %v after its last heartbeat (TTL %v)", time.Since(stopped).Round(time.Millisecond), 3*hb)
}
