package breakers

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/dispatcher/selection"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

var errNotYet = errors.New("not yet")

// A transition one replica makes is adopted by another for an instance it
// routes to; its own transitions are not adopted back, nor one of an
// instance that left its table.
func TestTransitionsSharedBetweenReplicas(t *testing.T) {
	nc := natstest.Connect(t, natstest.RunServer(t))
	natstest.Provision(t, nc, streams.Topology{Memory: true, Heartbeat: time.Second})
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, streams.BucketBreakers)
	if err != nil {
		t.Fatal(err)
	}
	log := zerolog.Nop()
	live := func(id string) bool { return id != "gone-1" }
	var cfg selection.BreakerConfig
	cfg.SetDefaults()
	aLoads, bLoads := selection.Loads{Breaker: &cfg}, selection.Loads{Breaker: &cfg}
	a := &Sharing{KV: kv, NC: nc, By: "a", Loads: &aLoads, Live: live, Log: &log}
	b := &Sharing{KV: kv, NC: nc, By: "b", Loads: &bLoads, Live: live, Log: &log}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	for _, s := range []*Sharing{a, b} {
		go func() { s.Run(runCtx); done <- struct{}{} }()
	}
	t.Cleanup(func() { stop(); <-done; <-done })

	// In this order: once b has adopted echo-1, it has read gone-1.
	a.Changed("gone-1", selection.BreakerOpen)
	a.Changed("echo-1", selection.BreakerOpen)
	opened := func(l *selection.Loads, id string) bool {
		return l.Of(id).Breaker.Status(time.Now()).State == selection.BreakerOpen
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if !opened(&bLoads, "echo-1") {
			return errNotYet
		}
		return nil
	})
	if opened(&bLoads, "gone-1") {
		t.Error("the transition of an instance not in the table was adopted")
	}
	// Once a has adopted b's later transition, it has read its own.
	b.Changed("echo-2", selection.BreakerOpen)
	natstest.WaitFor(t, 10*time.Second, func() error {
		if !opened(&aLoads, "echo-2") {
			return errNotYet
		}
		return nil
	})
	if opened(&aLoads, "echo-1") {
		t.Error("a replica adopted its own transition back")
	}
}
