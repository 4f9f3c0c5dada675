package durable

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/internal/natstest"
)

// drained decides when a quiet listing is complete: only when nothing is
// left between the last entry read and the end the listing started with.
func TestDrainedOnlyWhenNothingIsLeftUpToTheEnd(t *testing.T) {
	s := natstest.RunServer(t)
	js, err := jetstream.New(natstest.Connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "LIST", Subjects: []string{"list.>"}})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := js.Publish(ctx, "list.a", nil); err != nil {
			t.Fatal(err)
		}
	}
	check := func(last, end uint64, want bool) {
		t.Helper()
		got, err := drained(ctx, st, last, end)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("drained(last %d, end %d) = %v, want %v", last, end, got, want)
		}
	}
	check(2, 5, false) // 3, 4 and 5 are still there
	check(5, 5, true)
	for _, seq := range []uint64{3, 5} {
		if err := st.DeleteMsg(ctx, seq); err != nil {
			t.Fatal(err)
		}
	}
	check(2, 5, false) // 4 is still there
	check(4, 5, true)  // 5 was deleted while the listing ran
	if err := st.DeleteMsg(ctx, 4); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "list.b", nil); err != nil { // sequence 6, after the end
		t.Fatal(err)
	}
	check(2, 5, true)
	check(2, 6, false)
}
