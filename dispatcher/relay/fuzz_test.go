package relay

import (
	"strconv"
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

// FuzzStreamRelay feeds an agent's chunk headers to a stream: Relay never
// panics, relays only the chunk due, and what it relays is the caller's
// chunk (the caller's ids, the agent's body).
func FuzzStreamRelay(f *testing.F) {
	f.Add("1", "application/json", []byte(`"a"`), int64(0))
	f.Add("2", "", []byte{}, int64(10))
	f.Add("1", "x\r\ny", []byte("b"), int64(1<<20))
	f.Fuzz(func(t *testing.T, seq, ct string, data []byte, max int64) {
		var got *nats.Msg
		s := NewStream[int](Inline(func(m *nats.Msg) { got = m }))
		s.Pin(1)
		h := nats.Header{}
		h.Set(streams.HeaderSeq, seq)
		h.Set(streams.HeaderContentType, ct)
		err := s.Relay(Route{Subject: "s", RequestID: "r", Node: "n", ContentType: "application/json"}, h, data, 1, max)
		if err == nil && (got == nil || got.Header.Get(streams.HeaderSeq) != "1" || got.Header.Get(streams.HeaderRequestID) != "r" || string(got.Data) != string(data)) {
			t.Fatalf("relayed %v for Reach-Seq %q", got, seq)
		}
		if n, perr := strconv.ParseUint(seq, 10, 31); err == nil && (perr != nil || n != 1) {
			t.Fatalf("Reach-Seq %q relayed as 1", seq)
		}
	})
}
