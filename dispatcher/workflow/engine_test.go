package workflow

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

func TestNewRefusesABadConfig(t *testing.T) {
	if _, err := New(nil, Config{}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("nil connection: %v", err)
	}
	if _, err := New(&nats.Conn{}, Config{CompensationTimeout: -time.Second}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("negative compensation timeout: %v", err)
	}
}

// The engine's lifecycle: started once, before its dispatcher; closed
// twice harmlessly; after Close a task gets an answer, not silence.
func TestTheEngineStartsOnceAndAnswersAfterClose(t *testing.T) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	natstest.Provision(t, nc, streams.Topology{Memory: true})
	e, err := New(nc, Config{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := dispatcher.New(nc, dispatcher.Config{}, dispatcher.WithResolver(e))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Start(ctx, nil); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Start without a dispatcher: %v", err)
	}
	if err := e.Start(ctx, d); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx, d); !errors.Is(err, ErrAlreadyStarted) {
		t.Fatalf("second Start: %v", err)
	}
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.Close() }()
	if e.Serves("wf.none") {
		t.Fatal("serves a workflow nobody defined")
	}
	if err := e.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	sub, err := nc.SubscribeSync(nats.NewInbox())
	if err != nil {
		t.Fatal(err)
	}
	e.Direct(&nats.Msg{Subject: "reach.task.wf.x", Reply: sub.Subject, Header: nats.Header{streams.HeaderRequestID: []string{"r-1"}}}, "wf.x")
	m, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if m.Header.Get(streams.HeaderError) != string(streams.CodeCancelled) || m.Header.Get(streams.HeaderRequestID) != "r-1" {
		t.Fatalf("answer after Close: %v %s", m.Header, m.Data)
	}
}
