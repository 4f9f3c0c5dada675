package relay

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/streams"
)

func agentChunk(seq, ct string) nats.Header {
	h := nats.Header{}
	h.Set(streams.HeaderSeq, seq)
	if ct != "" {
		h.Set(streams.HeaderContentType, ct)
	}
	return h
}

var route = Route{Subject: "_INBOX.c", RequestID: "req-1", OrchID: "orch-1", Node: "a-1", ContentType: streams.ContentTypeJSON}

// The first delivery to send a chunk pins the stream; another's chunk is
// refused (a hedge's loser), the pinned one's always accepted.
func TestAStreamIsPinnedToItsFirstChunksDelivery(t *testing.T) {
	s := NewStream[*int](Inline(func(*nats.Msg) {}))
	a, b := new(int), new(int)
	if _, ok := s.Pinned(); ok || !s.First().IsZero() {
		t.Fatal("a stream without chunks is pinned")
	}
	if first, ok := s.Pin(a); !first || !ok {
		t.Fatalf("first pin: %v %v", first, ok)
	}
	if first, ok := s.Pin(b); first || ok {
		t.Errorf("another delivery: %v %v, want refused", first, ok)
	}
	if first, ok := s.Pin(a); first || !ok {
		t.Errorf("the pinned delivery again: %v %v", first, ok)
	}
	if p, ok := s.Pinned(); !ok || p != a || s.First().IsZero() {
		t.Errorf("pinned %v %v", p, ok)
	}
}

// Each chunk the caller gets carries the same headers as one built alone
// (Chunk), in both modes: the Inline relay reuses one message, which its
// sink is done with when it returns; a queued relay's messages are each
// their own. An agent's Content-Type wins over the task's.
func TestRelayedChunksCarryTheCallersHeaders(t *testing.T) {
	for _, inline := range []bool{true, false} {
		var got []*nats.Msg
		var seen []string
		sink := func(m *nats.Msg) {
			got = append(got, m)
			seen = append(seen, headerLine(m))
		}
		out := Inline(sink)
		if !inline {
			out = New(8, sink)
		}
		s := NewStream[int](out)
		s.Pin(1)
		cts := []string{"", streams.ContentTypeMsgpack, ""}
		for i, ct := range cts {
			if err := s.Relay(route, agentChunk(string(rune('1'+i)), ct), []byte{byte('a' + i)}, i+1, 1<<20); err != nil {
				t.Fatal(err)
			}
		}
		done := make(chan struct{})
		s.Finish(nil, func() { close(done) })
		<-done
		for i, ct := range cts {
			if ct == "" {
				ct = route.ContentType
			}
			want := headerLine(Chunk(route.Subject, route.RequestID, route.OrchID, route.Node, i+1, ct, []byte{byte('a' + i)}))
			if seen[i] != want {
				t.Errorf("inline %v, chunk %d: %s, want %s", inline, i+1, seen[i], want)
			}
			if !inline && headerLine(got[i]) != want {
				t.Errorf("queued chunk %d changed after its relay: %s", i+1, headerLine(got[i]))
			}
		}
		if s.Sent() != 3 {
			t.Errorf("sent %d", s.Sent())
		}
	}
}

func headerLine(m *nats.Msg) string {
	var b strings.Builder
	b.WriteString(m.Subject + " " + string(m.Data))
	for _, k := range []string{streams.HeaderStatus, streams.HeaderRequestID, streams.HeaderOrchestrationID, streams.HeaderNode, streams.HeaderSeq, streams.HeaderContentType} {
		b.WriteString(" " + k + "=" + strings.Join(m.Header.Values(k), ","))
	}
	return b.String()
}

// A chunk out of order is ErrSeq; one that does not fit max_payload with
// the caller's headers ErrTooLarge (the size the check computes is the
// message's own); its control, one byte less, is relayed.
func TestRelayRefusesAGapAndAChunkTooLarge(t *testing.T) {
	s := NewStream[int](Inline(func(*nats.Msg) {}))
	s.Pin(1)
	if err := s.Relay(route, agentChunk("2", ""), nil, 1, 0); !errors.Is(err, ErrSeq) || !strings.Contains(err.Error(), "where 1 was due") {
		t.Errorf("a gap: %v", err)
	}
	data := []byte("0123456789")
	exact := int64(streams.HeaderSize(Chunk(route.Subject, route.RequestID, route.OrchID, route.Node, 1, route.ContentType, nil)) + len(data))
	err := s.Relay(route, agentChunk("1", ""), data, 1, exact-1)
	var se *streams.Error
	if !errors.Is(err, ErrTooLarge) || !errors.As(err, &se) || se.Code != streams.CodePayloadTooLarge {
		t.Errorf("one byte over: %v", err)
	}
	if err := s.Relay(route, agentChunk("1", ""), data, 1, exact); err != nil {
		t.Errorf("at the limit: %v", err)
	}
}
