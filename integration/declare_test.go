package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/selection"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/registry/declare"
	"github.com/agent-reach/agentreach/streams"
)

func TestAgentkitWritesItsDeclarationAndRefusesABadOne(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	cost := 0.002
	decl := &declare.Declaration{Capabilities: []declare.DeclaredCapability{{Name: "orders.query", Mode: declare.ModeRead, Cost: &cost,
		InputSchema: []byte(`{"type":"object","required":["sku"]}`)}}, Labels: map[string][]string{"engine": {"postgres"}}}
	st.Agent(agentkit.Config{Type: "orders", Declaration: decl}, map[string]agentkit.Handler{"orders.query": echoHandler()})
	WaitRoutable(t, "orders.query", 1, d)
	natstest.WaitFor(t, 5*time.Second, func() error {
		got, ok := d.Catalog().Lookup("orders")
		if !ok || got.Declaration().Labels["engine"][0] != "postgres" {
			return errors.New("the dispatcher has no declaration of orders yet")
		}
		return nil
	})
	// The dispatcher now checks payloads against the declared schema.
	_, err := st.Client(agentkit.WithJSON()).Call(context.Background(), "orders.query", map[string]int{"qty": 1})
	if !errors.Is(err, streams.ErrBadRequest) || !strings.Contains(err.Error(), "sku") {
		t.Errorf("a payload without sku: %v, want BAD_REQUEST naming sku", err)
	}

	for _, c := range []struct {
		name string
		cfg  agentkit.Config
		want string
	}{
		{"a schema that does not compile", agentkit.Config{Type: "bad", Declaration: &declare.Declaration{
			Capabilities: []declare.DeclaredCapability{{Name: "x.y", InputSchema: []byte(`{"type": 7}`)}}}}, "capabilities[0].input_schema"},
		{"a permission granted and refused", agentkit.Config{Type: "bad", Declaration: &declare.Declaration{
			Capabilities: []declare.DeclaredCapability{{Name: "x.y"}}, Permissions: []string{"write"}, Refuses: []string{"write"}}}, "write"},
		{"another type", agentkit.Config{Type: "bad", Declaration: &declare.Declaration{Type: "other",
			Capabilities: []declare.DeclaredCapability{{Name: "x.y"}}}}, `"other"`},
	} {
		if _, err := agentkit.New(st.Conn(), c.cfg); !errors.Is(err, declare.ErrInvalidDeclaration) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInvalidDeclaration naming %s", c.name, err, c.want)
		}
	}
	// A declared capability without a handler stops Start, and nothing is written.
	a, err := agentkit.New(st.Conn(), agentkit.Config{Type: "half", Declaration: &declare.Declaration{
		Capabilities: []declare.DeclaredCapability{{Name: "half.a"}, {Name: "half.b"}}}}, agentkit.WithoutSignals())
	if err != nil {
		t.Fatal(err)
	}
	_ = a.Handle("half.a", echoHandler())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Start(ctx); err == nil || !strings.Contains(err.Error(), "half.b") {
		t.Errorf("Start with a declared capability that has no handler: %v", err)
		_ = a.Drain(ctx)
	}
	js, _ := jetstream.New(st.Conn())
	kv, _ := js.KeyValue(ctx, streams.BucketCaps)
	if _, err := kv.Get(ctx, "half"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("a refused declaration was written: %v", err)
	}
}

func TestFeedbackSteersReachPreferQuality(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	var counts sync.Map
	typed(t, st, "good-1", "writer", nil, &counts, "draft")
	typed(t, st, "poor-1", "writer", nil, &counts, "draft")
	WaitRoutable(t, "draft", 2, d)
	c := st.Client(agentkit.WithJSON())
	ctx := context.Background()
	// Score a handful of results of each: the good one 0.9, the poor 0.1.
	scored := map[string]int{}
	for scored["good-1"] < 5 || scored["poor-1"] < 5 {
		res, err := c.Call(ctx, "draft", map[string]any{})
		if err != nil {
			t.Fatal(err)
		}
		score := 0.1
		if res.Node == "good-1" {
			score = 0.9
		}
		if err := c.Feedback(ctx, res.RequestID, score); err != nil {
			t.Fatal(err)
		}
		scored[res.Node]++
	}
	if err := c.Feedback(ctx, "never-called", 1); !errors.Is(err, agentkit.ErrUnknownCall) {
		t.Errorf("feedback for a call never made: %v", err)
	}
	if err := c.FeedbackFor(ctx, "r-1", "good-1", 1.5); !errors.Is(err, streams.ErrBadRequest) {
		t.Errorf("a score above 1: %v", err)
	}
	nc := st.Conn()
	before := count(&counts, "good-1")
	natstest.WaitFor(t, 5*time.Second, func() error { // the records reach the dispatcher asynchronously
		m := nats.NewMsg(streams.Subjects{}.Task("draft"))
		m.Header.Set(streams.HeaderPrefer, selection.PreferQuality)
		for range 20 {
			if _, err := nc.RequestMsg(m, 5*time.Second); err != nil {
				return err
			}
		}
		if got := count(&counts, "good-1") - before; got < 19 {
			before = count(&counts, "good-1")
			return fmt.Errorf("%d of 20 calls preferring quality went to the better-scored instance", got)
		}
		return nil
	})
}
