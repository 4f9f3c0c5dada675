package inbox

import (
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

var errNotYet = errors.New("not yet")

// Each delivery's replies reach it in order, on its shard; a reply to a
// closed delivery reaches nobody, and a CHUNK among them is counted late.
func TestRepliesInOrderAndLateChunksCounted(t *testing.T) {
	nc := natstest.Connect(t, natstest.RunServer(t))
	var mu sync.Mutex
	got := map[string][]string{}
	ib, err := New(nc, 2, func(d string, m *nats.Msg) {
		mu.Lock()
		got[d] = append(got[d], string(m.Data))
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ib.Stop() })
	tokens := map[string]string{}
	for _, d := range []string{"a", "b", "c"} {
		tokens[d] = ib.Token()
		subject := ib.Open(tokens[d], d)
		if subject != ib.Subject(tokens[d]) {
			t.Fatalf("Open gave %s, Subject %s", subject, ib.Subject(tokens[d]))
		}
	}
	if all := ib.All(); len(all) != 3 {
		t.Fatalf("All: %v, want the three open deliveries", all)
	}
	for i := range 20 {
		for _, d := range []string{"a", "b", "c"} {
			if err := nc.Publish(ib.Subject(tokens[d]), []byte(strconv.Itoa(i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	ib.Close(tokens["c"])
	chunk := nats.NewMsg(ib.Subject(tokens["c"]))
	chunk.Header.Set(streams.HeaderStatus, string(streams.StatusChunk))
	if err := nc.PublishMsg(chunk); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(got["a"]) < 20 || len(got["b"]) < 20 || ib.Late() < 1 {
			return errNotYet
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	for _, d := range []string{"a", "b"} {
		want := make([]string, 20)
		for i := range want {
			want[i] = strconv.Itoa(i)
		}
		if !slices.Equal(got[d], want) {
			t.Errorf("delivery %s got %v, want 0…19 in order", d, got[d])
		}
	}
	if ib.Late() != 1 {
		t.Errorf("late chunks %d, want 1", ib.Late())
	}
	if all := ib.All(); len(all) != 2 || slices.Contains(all, "c") {
		t.Errorf("All after closing c: %v", all)
	}
}
