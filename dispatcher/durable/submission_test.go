package durable

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/streams"
)

func TestRequestIDOfSubmission(t *testing.T) {
	for msgID, want := range map[string]string{
		"alice.r1": "r1", "_.r1": "r1", "r1": "r1", "": "", "a.b.c": "b", "alice.r1.proof": "r1",
	} {
		h := nats.Header{}
		if msgID != "" {
			h.Set(streams.HeaderMsgID, msgID)
		}
		if got := RequestIDOfSubmission(h); got != want {
			t.Errorf("RequestIDOfSubmission(%q) = %q, want %q", msgID, got, want)
		}
	}
}
