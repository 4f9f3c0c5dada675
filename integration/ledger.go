package integration

import (
	"context"
	"fmt"
	"github.com/agent-reach/agentreach/dispatcher/durable"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// Ledger accounts for every durable task of a fault test: what was
// submitted and accepted, and where each accepted task ended.
type Ledger struct {
	mu        sync.Mutex
	Submitted int
	accepted  map[string]bool
	effects   map[string]int // side effects per request id
}

// NewLedger starts counting side effects published on EffectsSubject.
func NewLedger(tb testing.TB, nc *nats.Conn) *Ledger {
	l := &Ledger{accepted: map[string]bool{}, effects: map[string]int{}}
	sub, err := nc.Subscribe(EffectsSubject, func(m *nats.Msg) {
		l.mu.Lock()
		l.effects[string(m.Data)]++
		l.mu.Unlock()
	})
	if err != nil {
		tb.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	if err := nc.Flush(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = sub.Unsubscribe() })
	return l
}

// Submit submits one task and records whether it was accepted.
func (l *Ledger) Submit(ctx context.Context, c *agentkit.Client, capability string, payload any) error {
	l.mu.Lock()
	l.Submitted++
	l.mu.Unlock()
	id, err := c.Submit(ctx, capability, payload)
	if err == nil {
		l.mu.Lock()
		l.accepted[id] = true
		l.mu.Unlock()
	}
	return err
}

// Accepted returns how many submissions JetStream acknowledged.
func (l *Ledger) Accepted() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.accepted)
}

// Outcomes reads where every task ended: results, dead letters, reviews.
type Outcomes struct {
	Completed, DeadLettered, InReview map[string]int
}

// ReadOutcomes collects the request ids recorded in REACH_RESULTS, REACH_DLQ
// and REACH_REVIEW. A read that fails returns no outcome at all, never the
// streams read before the failure: a caller that judged those would count
// every task of the unread streams lost.
func ReadOutcomes(ctx context.Context, js jetstream.JetStream) (Outcomes, error) {
	o := Outcomes{Completed: map[string]int{}, DeadLettered: map[string]int{}, InReview: map[string]int{}}
	for _, s := range []struct {
		stream string
		into   map[string]int
	}{{streams.StreamResults, o.Completed}, {streams.StreamDLQ, o.DeadLettered}, {streams.StreamReview, o.InReview}} {
		list, err := durable.ListParked(ctx, js, streams.Subjects{}, s.stream)
		if err != nil {
			return Outcomes{}, fmt.Errorf("%s: %w", s.stream, err)
		}
		for _, p := range list {
			s.into[p.RequestID]++
		}
	}
	return o, nil
}

// Settled reports nil once every accepted task has an outcome.
func (l *Ledger) Settled(ctx context.Context, js jetstream.JetStream) error {
	o, err := ReadOutcomes(ctx, js)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	missing := 0
	for id := range l.accepted {
		if o.Completed[id]+o.DeadLettered[id]+o.InReview[id] == 0 {
			missing++
		}
	}
	if missing > 0 {
		return fmt.Errorf("%d of %d accepted tasks have no outcome yet (%d completed, %d dead letters, %d in review)",
			missing, len(l.accepted), len(o.Completed), len(o.DeadLettered), len(o.InReview))
	}
	return nil
}

// Check prints the ledger and fails the test on any loss or duplicate. A
// listing that fails (in a cluster that lost a node, a stream's reader can
// stall) is read again, within a bound: only what it reads is judged.
func (l *Ledger) Check(tb testing.TB, js jetstream.JetStream) {
	tb.Helper()
	var o Outcomes
	natstest.WaitFor(tb, 2*time.Minute, func() (err error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		o, err = ReadOutcomes(ctx, js)
		return err
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	var lost, multiple, twice int
	for id := range l.accepted {
		n := o.Completed[id] + o.DeadLettered[id] + o.InReview[id]
		if n == 0 {
			lost++
		}
		if n > 1 {
			multiple++
		}
		if l.effects[id] > 1 {
			twice++
		}
	}
	tb.Logf("ledger: submitted %d, accepted %d, completed %d, dead-lettered %d, in review %d, executed twice %d, lost %d, more than one outcome %d",
		l.Submitted, len(l.accepted), len(o.Completed), len(o.DeadLettered), len(o.InReview), twice, lost, multiple)
	if lost > 0 || multiple > 0 || twice > 0 {
		tb.Fatalf("ledger: %d lost, %d with more than one outcome, %d executed twice", lost, multiple, twice)
	}
}
