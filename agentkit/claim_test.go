package agentkit_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

// sendKeyed delivers one idempotent task to agent id without waiting: its
// replies arrive on the returned subscription.
func sendKeyed(t *testing.T, nc *nats.Conn, id, key string) *nats.Subscription {
	t.Helper()
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	m := nats.NewMsg(streams.Subjects{}.Agent(id))
	m.Reply, m.Data = inbox, []byte(`{}`)
	m.Header.Set(streams.HeaderCapability, "pay.charge")
	m.Header.Set(streams.HeaderRequestID, "req-"+key)
	m.Header.Set(streams.HeaderIdempotencyKey, key)
	// Bounded: an agent that waits for a claim forever answers TIMEOUT.
	m.Header.Set(streams.HeaderDeadline, strconv.FormatInt(time.Now().Add(30*time.Second).UnixMilli(), 10))
	if err := nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	return sub
}

// untilFinal reads sub's replies up to the final one, calling onProgress
// with the count of PROCESSING so far after each.
func untilFinal(t *testing.T, sub *nats.Subscription, onProgress func(n int)) (final *nats.Msg, progress int) {
	t.Helper()
	for {
		r, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("waiting for replies (%d PROCESSING so far): %v", progress, err)
		}
		switch streams.Status(r.Header.Get(streams.HeaderStatus)) {
		case streams.StatusProcessing:
			progress++
			if onProgress != nil {
				onProgress(progress)
			}
		case streams.StatusAcked:
		default:
			return r, progress
		}
	}
}

// The idempotency bucket is gone when a keyed task arrives (as when it has
// no leader): the agent retries its claim and meanwhile sends PROCESSING,
// so the dispatcher's per-call timeout does not expire; once the bucket is
// back the task runs, once.
func TestClaimRetryKeepsCallerInformed(t *testing.T) {
	nc, d, _ := setup(t)
	js, _ := jetstream.New(d.nc)
	var effects atomic.Int64
	startAgent(t, nc, agentkit.Config{Type: "pay", ID: "w1", Heartbeat: heartbeat},
		map[string]agentkit.Handler{"pay.charge": writer(&effects, nil)})
	if err := js.DeleteKeyValue(context.Background(), streams.BucketIdempotency); err != nil {
		t.Fatal(err)
	}
	sub := sendKeyed(t, d.nc, "w1", "order-9")
	final, progress := untilFinal(t, sub, func(n int) {
		if n == 2 { // the store comes back
			natstest.Provision(t, d.nc, streams.Topology{Heartbeat: heartbeat, Memory: true})
		}
	})
	if final.Header.Get(streams.HeaderStatus) != string(streams.StatusFinished) || effects.Load() != 1 || progress < 2 {
		t.Fatalf("final %v %s, %d executions, %d PROCESSING", final.Header, final.Data, effects.Load(), progress)
	}
	t.Logf("%d PROCESSING while the claim was retried", progress)
}

// A pending claim left by an earlier run of an instance that restarted
// under the same id is in doubt for another instance, although a record
// under that id is alive: the claim's incarnation is not the record's.
// Control: a claim of the instance's current run is waited for (with
// PROCESSING), and once released the waiter executes the key, once.
func TestAClaimOfARestartedOwnerIsInDoubt(t *testing.T) {
	nc, d, reg := setup(t)
	var effects atomic.Int64
	for _, id := range []string{"w1", "w2"} {
		startAgent(t, nc, agentkit.Config{Type: "pay", ID: id, Heartbeat: heartbeat},
			map[string]agentkit.Handler{"pay.charge": writer(&effects, nil)})
	}
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(context.Background(), streams.BucketIdempotency)
	if err != nil {
		t.Fatal(err)
	}
	var w1 registry.Entry
	natstest.WaitFor(t, 5*time.Second, func() error { w1, err = reg.Get(context.Background(), "w1"); return err })
	if w1.Incarnation == "" {
		t.Fatal("w1's record names no incarnation")
	}
	claim := func(key, incarnation string) {
		b, _ := msgpack.Marshal(map[string]string{"state": "pending", "owner": "w1", "incarnation": incarnation, "request_id": "r"})
		if _, err := kv.Create(context.Background(), "pay.charge.=."+key, b); err != nil {
			t.Fatal(err)
		}
	}

	claim("order-old", "an-earlier-run")
	final, _ := untilFinal(t, sendKeyed(t, d.nc, "w2", "order-old"), nil)
	if e := streams.ErrorFromMessage(final); e == nil || e.Code != streams.CodeInternal || final.Header.Get(streams.HeaderInDoubt) != "true" {
		t.Fatalf("a claim of w1's earlier run: %v %s, want INTERNAL in doubt", final.Header, final.Data)
	}

	claim("order-now", w1.Incarnation)
	final, progress := untilFinal(t, sendKeyed(t, d.nc, "w2", "order-now"), func(n int) {
		if n == 2 { // w2 waits for live w1: w1 gives the key back
			if err := kv.Delete(context.Background(), "pay.charge.=.order-now"); err != nil {
				t.Error(err)
			}
		}
	})
	if final.Header.Get(streams.HeaderStatus) != string(streams.StatusFinished) || effects.Load() != 1 || progress < 2 {
		t.Fatalf("a claim of w1's current run: %v %s, %d executions, %d PROCESSING", final.Header, final.Data, effects.Load(), progress)
	}
}
