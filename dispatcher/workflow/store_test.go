package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/dispatcher/workflow/spec"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// lostAnswers is REACH_RUNS with the answers of its writes lost while
// lose is set: each write is stored, and its caller told it timed out.
type lostAnswers struct {
	jetstream.KeyValue
	lose bool
}

func (k *lostAnswers) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	rev, err := k.KeyValue.Create(ctx, key, value, opts...)
	if err == nil && k.lose {
		return 0, context.DeadlineExceeded
	}
	return rev, err
}

func (k *lostAnswers) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	rev, err := k.KeyValue.Update(ctx, key, value, last)
	if err == nil && k.lose {
		return 0, context.DeadlineExceeded
	}
	return rev, err
}

// A run's record written although the write's answer was lost is read
// back and taken as written (reconciled): the run goes on from it instead
// of going back to the stream and its step outcome being redone. Control:
// a write that did not land (another replica's record is there) is lost
// to that replica, and a store that cannot be read fails the write.
func TestARunRecordWrittenWithoutAnswerIsReconciled(t *testing.T) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	natstest.Provision(t, nc, streams.Topology{Memory: true})
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
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
	r := &Run{ID: "run-1", Workflow: "wf.t", Status: RunRunning, Steps: []*StepRun{{Name: "a", Status: StepPending}},
		Definition: b, Input: json.RawMessage("null"), Owner: "replica-1"}
	lossy := &lostAnswers{KeyValue: kv, lose: true}
	if err := writeRun(ctx, lossy, r); err != nil || r.revision == 0 {
		t.Fatalf("a creation whose answer was lost: %v (revision %d), want it reconciled", err, r.revision)
	}
	r.Steps[0].Status, r.Steps[0].Result = StepDone, json.RawMessage(`1`)
	if err := writeRun(ctx, lossy, r); err != nil {
		t.Fatalf("an update whose answer was lost: %v, want it reconciled", err)
	}
	if got, err := GetRun(ctx, kv, "run-1"); err != nil || got.revision != r.revision || got.Steps[0].Status != StepDone {
		t.Fatalf("stored %+v (%v), revision %d", got, err, r.revision)
	}
	// Another replica's record is there: the write is lost to it.
	other, err := GetRun(ctx, kv, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	other.Owner = "replica-2"
	if err := writeRun(ctx, kv, other); err != nil {
		t.Fatal(err)
	}
	r.Owner = "replica-1 again"
	if err := writeRun(ctx, lossy, r); !errors.Is(err, errLostRun) {
		t.Fatalf("a write over another replica's record: %v, want errLostRun", err)
	}
	// The bucket is gone: the write fails with the store's error.
	if err := js.DeleteKeyValue(ctx, streams.BucketRuns); err != nil {
		t.Fatal(err)
	}
	other.Owner = "replica-2 again"
	if err := writeRun(ctx, lossy, other); err == nil || errors.Is(err, errLostRun) {
		t.Fatalf("a write to no bucket: %v, want the store's error", err)
	}
}
