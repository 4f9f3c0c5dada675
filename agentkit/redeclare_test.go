package agentkit_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/registry/declare"
	"github.com/agent-reach/agentreach/streams"
)

func TestRedeclareChangesWhatARunningAgentServes(t *testing.T) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	natstest.Provision(t, nc, streams.Topology{Heartbeat: time.Second, Memory: true})
	answer := func(v string) agentkit.Handler {
		return func(context.Context, *agentkit.Request) (any, error) { return v, nil }
	}
	decl := func(caps ...string) *declare.Declaration {
		d := &declare.Declaration{}
		for _, c := range caps {
			d.Capabilities = append(d.Capabilities, declare.DeclaredCapability{Name: c, Mode: declare.ModeRead})
		}
		return d
	}
	a, err := agentkit.New(natstest.Connect(t, s), agentkit.Config{Type: "up", ID: "up-1", Declaration: decl("up.a")}, agentkit.WithoutSignals())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := a.Redeclare(ctx, map[string]agentkit.Handler{"up.a": answer("a")}, nil); !errors.Is(err, agentkit.ErrNotStarted) {
		t.Errorf("Redeclare before Start: %v, want ErrNotStarted", err)
	}
	if err := a.Handle("up.a", answer("a")); err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	caps, err := js.KeyValue(ctx, streams.BucketCaps)
	if err != nil {
		t.Fatal(err)
	}
	agents, err := js.KeyValue(ctx, streams.BucketAgents)
	if err != nil {
		t.Fatal(err)
	}
	stored := func() (record []string, declared []string) {
		if e, err := agents.Get(ctx, "up-1"); err == nil {
			var r registry.Record
			_ = json.Unmarshal(e.Value(), &r)
			record = r.Capabilities
		}
		if e, err := caps.Get(ctx, "up"); err == nil {
			var d declare.Declaration
			_ = json.Unmarshal(e.Value(), &d)
			for _, c := range d.Capabilities {
				declared = append(declared, c.Name)
			}
		}
		return record, declared
	}

	// Refused: nothing changes.
	for _, c := range []struct {
		name     string
		handlers map[string]agentkit.Handler
		decl     *declare.Declaration
	}{
		{"no handlers", nil, nil},
		{"a bad name", map[string]agentkit.Handler{"Up A": answer("x")}, nil},
		{"a declared capability without a handler", map[string]agentkit.Handler{"up.a": answer("a")}, decl("up.a", "up.b")},
		{"a declaration that does not compile", map[string]agentkit.Handler{"up.a": answer("a")},
			&declare.Declaration{Capabilities: []declare.DeclaredCapability{{Name: "up.a", InputSchema: []byte(`{"type":7}`)}}}},
	} {
		if err := a.Redeclare(ctx, c.handlers, c.decl); err == nil {
			t.Errorf("Redeclare with %s: no error", c.name)
		}
	}
	if rec, declared := stored(); !slices.Equal(rec, []string{"up.a"}) || !slices.Equal(declared, []string{"up.a"}) {
		t.Fatalf("after refused changes: record %v, declaration %v; want up.a alone", rec, declared)
	}

	// Accepted: the declaration and the record follow, the new handler answers.
	if err := a.Redeclare(ctx, map[string]agentkit.Handler{"up.a": answer("a2"), "up.b": answer("b")}, decl("up.a", "up.b")); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if rec, declared := stored(); !slices.Equal(rec, []string{"up.a", "up.b"}) || !slices.Equal(declared, []string{"up.a", "up.b"}) {
			return errors.New("record or declaration not rewritten yet")
		}
		return nil
	})
	d := deliverer{t, natstest.Connect(t, s)}
	if out := d.deliver("up-1", "up.b", nil); string(out[len(out)-1].Data) != `"b"` {
		t.Errorf("up.b answered %q", out[len(out)-1].Data)
	}
	// A capability dropped is answered NO_AGENT.
	if err := a.Redeclare(ctx, map[string]agentkit.Handler{"up.b": answer("b")}, decl("up.b")); err != nil {
		t.Fatal(err)
	}
	if out := d.deliver("up-1", "up.a", nil); out[len(out)-1].Header.Get(streams.HeaderError) != string(streams.CodeNoAgent) {
		t.Errorf("a dropped capability: %v, want NO_AGENT", out[len(out)-1].Header)
	}
	if err := a.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Redeclare(ctx, map[string]agentkit.Handler{"up.b": answer("b")}, nil); !errors.Is(err, agentkit.ErrNotStarted) {
		t.Errorf("Redeclare after Drain: %v, want ErrNotStarted", err)
	}
}
