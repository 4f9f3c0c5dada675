package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/workflow/spec"
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
	d, err := dispatcher.New(nc, config.Config{}, dispatcher.WithResolver(e))
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
	m := e.Direct(&nats.Msg{Subject: "reach.task.wf.x", Header: nats.Header{streams.HeaderRequestID: []string{"r-1"}}}, "wf.x")
	if m.Header.Get(streams.HeaderError) != string(streams.CodeCancelled) || m.Header.Get(streams.HeaderRequestID) != "r-1" {
		t.Fatalf("answer after Close: %v %s", m.Header, m.Data)
	}
}

// Two replicas that both hold a run: the first write wins, the second
// fails its revision check with errLostRun — a new run's creation too.
func TestARunRecordIsWrittenByOneOwnerAtATime(t *testing.T) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	natstest.Provision(t, nc, streams.Topology{Memory: true})
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, streams.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	def, err := spec.Parse([]byte(`{"name":"wf.t","steps":[{"name":"a","call":"t.a"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(def)
	fresh := func() *Run {
		return &Run{ID: "run-1", Workflow: "wf.t", Status: RunRunning, Steps: []*StepRun{{Name: "a", Status: StepPending}},
			Definition: b, Input: json.RawMessage("null")}
	}
	if err := writeRun(ctx, kv, fresh()); err != nil {
		t.Fatal(err)
	}
	if err := writeRun(ctx, kv, fresh()); !errors.Is(err, errLostRun) {
		t.Fatalf("a second creation: %v, want errLostRun", err)
	}
	first, err := GetRun(ctx, kv, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	second, err := GetRun(ctx, kv, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	first.Owner, second.Owner = "replica-1", "replica-2"
	if err := writeRun(ctx, kv, second); err != nil {
		t.Fatal(err)
	}
	if err := writeRun(ctx, kv, first); !errors.Is(err, errLostRun) {
		t.Fatalf("the slower replica's write: %v, want errLostRun", err)
	}
	if r, err := GetRun(ctx, kv, "run-1"); err != nil || r.Owner != "replica-2" {
		t.Fatalf("record %+v, %v: want replica-2's", r, err)
	}
	if _, err := GetRun(ctx, kv, "run-2"); !errors.Is(err, ErrNoRun) {
		t.Fatalf("GetRun of no run: %v", err)
	}
}
