package dispatcher

import (
	"context"
	"fmt"
	"github.com/agent-reach/agentreach/dispatcher/durable"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// The log line of a parked task names the entry's stream and its sequence
// there (what `agentreach dlq show` takes), apart from the task's
// sequence in REACH_TASKS.
func TestParkedLogNamesTheStreamOfItsSeq(t *testing.T) {
	var logs natstest.LogBuffer
	h := newHarness(t, natstest.Options(t.TempDir()), WithLogger(zerolog.New(&logs)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	subjects := streams.Subjects{}
	// An older dead letter, so that the new one's sequence in REACH_DLQ
	// differs from the task's in REACH_TASKS.
	if _, err := h.js.Publish(ctx, subjects.DeadLetter("other"), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(subjects.Submit("echo"))
	m.Data = []byte(`{}`)
	m.Header.Set(streams.HeaderRequestID, "parked-1")
	m.Header.Set(streams.HeaderPrefer, "bogus") // BAD_REQUEST: parked as poison at once
	ack, err := h.js.PublishMsg(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	var line map[string]any
	natstest.WaitFor(t, 10*time.Second, func() error {
		lines := logs.Lines("durable task parked")
		if len(lines) == 0 {
			return errNotYet
		}
		line = lines[0]
		return nil
	})
	list, err := durable.ListParked(ctx, h.js, subjects, streams.StreamDLQ)
	if err != nil || len(list) != 2 || list[1].RequestID != "parked-1" {
		t.Fatalf("dead letters %+v (%v), want the older one and parked-1", list, err)
	}
	want := map[string]any{"request_id": "parked-1", "stream": streams.StreamTasks, "seq": float64(ack.Sequence),
		"parked_in": streams.StreamDLQ, "dlq_seq": float64(list[1].Seq)}
	for k, v := range want {
		if line[k] != v {
			t.Errorf("%s = %v, want %v in %v", k, line[k], v, line)
		}
	}
	if fmt.Sprint(line["dlq_seq"]) == fmt.Sprint(line["seq"]) {
		t.Fatalf("the test cannot tell the two sequences apart: %v", line)
	}
}
