package durable

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/streams"
)

// FuzzRequestIDOfSubmission: whatever Nats-Msg-Id a submission carries,
// the id read from it is part of it, with no dot when it had one, and
// SubmissionID of a source and a valid request id reads back as that id.
func FuzzRequestIDOfSubmission(f *testing.F) {
	for _, s := range []string{"alice.r1", "_.r1", "r1", "", ".", "a..b", "a.b.c"} {
		f.Add(s, "r1")
	}
	f.Fuzz(func(t *testing.T, msgID, id string) {
		h := nats.Header{}
		h.Set(streams.HeaderMsgID, msgID)
		in := h.Get(streams.HeaderMsgID)
		if got := RequestIDOfSubmission(h); !strings.Contains(in, got) || (strings.Contains(in, ".") && strings.Contains(got, ".")) {
			t.Fatalf("RequestIDOfSubmission(%q) = %q", msgID, got)
		}
		if streams.ValidateInstanceID(id) != nil {
			return
		}
		for _, msgID := range []string{streams.SubmissionID("alice", id), streams.SubmissionID("alice", id) + ".proof"} {
			h.Set(streams.HeaderMsgID, msgID)
			if got := RequestIDOfSubmission(h); got != id {
				t.Fatalf("RequestIDOfSubmission(%q) = %q", msgID, got)
			}
		}
	})
}
