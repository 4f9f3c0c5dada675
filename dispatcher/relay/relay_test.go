package relay

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/streams"
)

func TestARelayKeepsOrderAndItsBound(t *testing.T) {
	block, took := make(chan struct{}), make(chan struct{}, 16)
	got := make(chan *nats.Msg, 16)
	r := New(2, func(m *nats.Msg) {
		took <- struct{}{}
		<-block
		got <- m
	})
	// The goroutine takes the first and blocks on it; two more wait; the
	// fourth is refused.
	var err error
	for i := 1; i <= 4 && err == nil; i++ {
		err = r.Push(Chunk("s", "id", "", "n", i, "application/json", nil))
		if i == 1 {
			<-took // the goroutine holds it
		}
	}
	if !errors.Is(err, ErrFull) || r.Sent() != 3 {
		t.Fatalf("pushes: %v, %d sent; want ErrFull after 3", err, r.Sent())
	}
	final := streams.StatusReply("s", streams.StatusFinished, "id")
	done := make(chan struct{})
	r.Finish(final, func() { close(done) })
	close(block)
	<-done
	close(got)
	var seqs []string
	for m := range got {
		seqs = append(seqs, m.Header.Get(streams.HeaderSeq)+m.Header.Get(streams.HeaderChunks))
	}
	if want := []string{"1", "2", "3", "3"}; len(seqs) != 4 || seqs[0] != want[0] || seqs[2] != want[2] || seqs[3] != want[3] {
		t.Errorf("sink got %v, want chunks 1-3 then a final with Reach-Chunks 3", seqs)
	}
}

func TestCheckSeqAndCount(t *testing.T) {
	for _, c := range []struct {
		seq  string
		want int
		ok   bool
	}{{"1", 1, true}, {"3", 2, false}, {"", 1, false}, {"-1", 1, false}, {"x", 1, false}} {
		h := nats.Header{}
		h.Set(streams.HeaderSeq, c.seq)
		if err := CheckSeq(h, c.want); (err == nil) != c.ok {
			t.Errorf("CheckSeq(%q, %d) = %v", c.seq, c.want, err)
		}
	}
	h := nats.Header{}
	if CheckCount(h, 3) != nil {
		t.Error("a final without Reach-Chunks is accepted")
	}
	h.Set(streams.HeaderChunks, "2")
	if CheckCount(h, 3) == nil || CheckCount(h, 2) != nil {
		t.Error("Reach-Chunks 2 must match 2 chunks only")
	}
}
