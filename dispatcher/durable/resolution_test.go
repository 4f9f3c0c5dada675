package durable

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/dispatcher/events"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// RecordResolution stores one record per decision, in the format of every
// other event record, however often it is retried.
func TestRecordResolutionRecordsOnce(t *testing.T) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	natstest.Provision(t, nc, streams.Topology{Memory: true})
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	subjects := streams.Subjects{}
	p := Parked{Stream: streams.StreamReview, Seq: 7, Capability: "orders.write", RequestID: "req-1", Reason: ReasonInDoubt,
		Code: string(streams.CodeInternal), Attempts: 2,
		Header: nats.Header{streams.HeaderNode: {"writer-1"}, streams.HeaderOrchestrationID: {"orch-1"}}}
	for range 2 { // a retry is not recorded twice
		if err := RecordResolution(ctx, js, subjects, p, events.OutcomeReviewRerun, "alice"); err != nil {
			t.Fatal(err)
		}
	}
	if err := RecordResolution(ctx, js, subjects, p, events.OutcomeReviewDrop, "bob"); err != nil { // another decision is
		t.Fatal(err)
	}
	list, err := ListParked(ctx, js, subjects, streams.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	var got []events.Event
	for _, m := range list {
		if m.Header.Get(events.HeaderEvents) != "1" {
			t.Errorf("message without %s: 1: %v", events.HeaderEvents, m.Header)
		}
		evs, err := events.DecodeEvents(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, evs...)
	}
	if len(got) != 2 {
		t.Fatalf("%d records, want 2: %+v", len(got), got)
	}
	for i, want := range []struct{ outcome, by string }{{events.OutcomeReviewRerun, "alice"}, {events.OutcomeReviewDrop, "bob"}} {
		ev := got[i]
		if ev.Outcome != want.outcome || ev.By != want.by || ev.RequestID != "req-1" || ev.Capability != "orders.write" ||
			ev.Code != "INTERNAL" || ev.Node != "writer-1" || ev.OrchestrationID != "orch-1" || ev.Attempts != 2 ||
			ev.Tier != "durable" || ev.Start.IsZero() {
			t.Errorf("record %d: %+v, want outcome %s by %s", i, ev, want.outcome, want.by)
		}
	}
	if list[0].Header.Get(streams.HeaderMsgID) == "" {
		t.Error("record without a message id")
	}
}

func TestRecordResolutionRefusesBadInput(t *testing.T) {
	p := Parked{Stream: streams.StreamReview, Seq: 1, Capability: "echo", RequestID: "r"}
	for _, tt := range []struct {
		p          Parked
		resolution string
		by         string
		err        string
	}{
		{p, "review_retry", "alice", `unknown resolution "review_retry"`},
		{p, events.OutcomeReviewDrop, " ", "no one named"},
		{Parked{Stream: streams.StreamReview, Seq: 1}, events.OutcomeReviewDrop, "alice", "capability name is empty"},
	} {
		// Checked before any I/O: no server needed.
		err := RecordResolution(context.Background(), nil, streams.Subjects{}, tt.p, tt.resolution, tt.by)
		if err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%s by %q: error %v, want one containing %q", tt.resolution, tt.by, err, tt.err)
		}
	}
}
