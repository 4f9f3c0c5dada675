package relay

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/streams"
)

// FuzzCheckSeq feeds agents' Reach-Seq and Reach-Chunks values: a check
// never panics, and accepts a value only when it is the number expected.
func FuzzCheckSeq(f *testing.F) {
	for _, s := range []string{"1", "0", "", "-1", "99999999999999999999", " 1", "1e3"} {
		f.Add(s, 1)
	}
	f.Fuzz(func(t *testing.T, v string, want int) {
		h := nats.Header{}
		h.Set(streams.HeaderSeq, v)
		h.Set(streams.HeaderChunks, v)
		if CheckSeq(h, want) == nil && h.Get(streams.HeaderSeq) == "" {
			t.Fatal("an empty Reach-Seq accepted")
		}
		_ = CheckCount(h, want)
	})
}
