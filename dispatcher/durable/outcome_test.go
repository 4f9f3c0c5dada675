package durable

import (
	"errors"
	"testing"
	"time"

	"github.com/agent-reach/agentreach/dispatcher/events"
	"github.com/agent-reach/agentreach/streams"
)

// Each way a durable task can end, and where it goes.
func TestDecide(t *testing.T) {
	tk := Task{Owner: "alice", RequestID: "r1", Node: "n1", Attempts: 2}
	later, past := time.Now().Add(time.Hour), time.Now().Add(-time.Second)
	e := func(c streams.Code) *streams.Error { return streams.NewError(c, "because") }
	for _, c := range []struct {
		name      string
		e         *streams.Error
		resultErr error
		inDoubt   bool
		deadline  time.Time
		outcome   string
		reason    string
		waits     bool
	}{
		{"a result", nil, nil, false, later, events.OutcomeResult, "", false},
		{"a result too large to store", nil, errors.New("too large"), false, later, events.OutcomeDeadLetter, ReasonPoison, false},
		{"a business rejection is a result", e(streams.CodeBizReject), nil, false, later, events.OutcomeResult, "", false},
		{"the deadline passed", e(streams.CodeDeadlineExceeded), nil, false, later, events.OutcomeReview, ReasonDeadline, false},
		{"in doubt", e(streams.CodeInternal), nil, true, later, events.OutcomeReview, ReasonInDoubt, false},
		{"no capacity: waits", e(streams.CodeNoAgent), nil, false, later, "", "", true},
		{"no capacity past the deadline", e(streams.CodeTargetBusy), nil, false, past, events.OutcomeReview, ReasonDeadline, false},
		{"bad request", e(streams.CodeBadRequest), nil, false, later, events.OutcomeDeadLetter, ReasonPoison, false},
		{"unauthorized", e(streams.CodeUnauthorized), nil, false, later, events.OutcomeDeadLetter, ReasonPoison, false},
		{"a failure", e(streams.CodeTimeout), nil, false, later, events.OutcomeDeadLetter, ReasonFailed, false},
	} {
		got, wait := Decide(tk, c.e, c.resultErr, c.inDoubt, c.deadline, 1)
		if got.Outcome != c.outcome || got.Reason != c.reason || (wait > 0) != c.waits {
			t.Errorf("%s: %q %q, wait %v; want %q %q, waits %v", c.name, got.Outcome, got.Reason, wait, c.outcome, c.reason, c.waits)
		}
		if c.outcome != "" && (got.Node != "n1" || got.Attempts != 2) {
			t.Errorf("%s: claim names node %q after %d attempts, want n1 after 2", c.name, got.Node, got.Attempts)
		}
	}
	// The wait grows with the deliveries, up to BufferDelayMax.
	_, first := Decide(tk, e(streams.CodeOverloaded), nil, false, later, 1)
	_, many := Decide(tk, e(streams.CodeOverloaded), nil, false, later, 40)
	if first != BufferDelayBase || many != BufferDelayMax {
		t.Fatalf("waits %v and %v, want %v and %v", first, many, BufferDelayBase, BufferDelayMax)
	}
}
