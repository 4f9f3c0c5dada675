package dispatcher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/agent-reach/agentreach/dispatcher/durable"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

// smallMaxPayload is the max_payload of the size tests' server.
const smallMaxPayload = 8192

// nearlyFull returns a task for capability whose body, a JSON string,
// leaves only a few bytes of max_payload free with the caller's headers:
// it fits as sent, but not with the headers a dispatcher adds to deliver it.
func nearlyFull(subject string) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Header.Set(streams.HeaderContentType, streams.ContentTypeJSON)
	m.Header.Set(streams.HeaderRequestID, "big-1")
	m.Header.Set(streams.HeaderMsgID, "big-1")
	fill := smallMaxPayload - streams.HeaderSize(m) - 2 - 10
	m.Data = append(append([]byte(`"`), bytes.Repeat([]byte("x"), fill)...), '"')
	return m
}

func sizeHarness(t *testing.T) *harness {
	opts := natstest.Options(t.TempDir())
	opts.MaxPayload = smallMaxPayload
	h := newHarness(t, opts)
	h.instance(registry.Record{ID: "echo-1", Type: "echo", Capabilities: []string{"echo"}})
	return h
}

func checkTooLarge(t *testing.T, e *streams.Error) {
	t.Helper()
	if e == nil || e.Code != streams.CodePayloadTooLarge {
		t.Fatalf("want PAYLOAD_TOO_LARGE, got %+v", e)
	}
	for _, part := range []string{"echo-1", "of headers", " of body", "max_payload of " + strconv.Itoa(smallMaxPayload)} {
		if !strings.Contains(e.Message, part) {
			t.Errorf("%q does not say %q", e.Message, part)
		}
	}
}

// A task that fits as the caller sent it but not with the headers of its
// delivery is answered PAYLOAD_TOO_LARGE at once, naming the sizes, and
// never delivered (nothing would answer it here: it would time out).
func TestDeliveryThatOutgrowsMaxPayload(t *testing.T) {
	h := sizeHarness(t)
	m := nearlyFull(streams.Subjects{}.Task("echo"))
	if size := streams.MsgSize(m); size > smallMaxPayload {
		t.Fatalf("the task does not fit as sent: %d bytes", size)
	}
	reply, err := h.nc.RequestMsg(m, 10*time.Second)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	checkTooLarge(t, streams.ErrorFromMessage(reply))
}

// The same on the durable tier: the task is dead-lettered as poison with
// the error, once, not redelivered for ever because its dead letter (the
// task with the dispatcher's headers) does not fit either.
func TestDurableDeliveryThatOutgrowsMaxPayload(t *testing.T) {
	h := sizeHarness(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := h.js.PublishMsg(ctx, nearlyFull(streams.Subjects{}.Submit("echo"))); err != nil {
		t.Fatal(err)
	}
	var parked []durable.Parked
	natstest.WaitFor(t, 15*time.Second, func() error {
		var err error
		if parked, err = durable.ListParked(ctx, h.js, streams.Subjects{}, streams.StreamDLQ); err != nil || len(parked) == 0 {
			return errNotYet
		}
		return nil
	})
	p := parked[0]
	if p.RequestID != "big-1" || p.Reason != durable.ReasonPoison || p.Code != string(streams.CodePayloadTooLarge) {
		t.Fatalf("dead letter %+v", p)
	}
	checkTooLarge(t, &streams.Error{Code: streams.Code(p.Code), Message: p.LastError})
	if p.Header.Get(streams.HeaderDLQDropped) != strconv.Itoa(smallMaxPayload-streams.HeaderSize(nearlyFull("x"))-10) || len(p.Data) != 0 {
		t.Fatalf("the payload is not reported left out: %s %q, %d bytes kept", streams.HeaderDLQDropped, p.Header.Get(streams.HeaderDLQDropped), len(p.Data))
	}
	if err := durable.Replay(ctx, h.js, streams.Subjects{}, p, time.Time{}); !errors.Is(err, ErrNotReplayable) {
		t.Fatalf("replaying an entry without its payload: %v", err)
	}
	// Its outcome is recorded: the task has left REACH_TASKS.
	natstest.WaitFor(t, 10*time.Second, func() error {
		s, err := h.js.Stream(ctx, streams.StreamTasks)
		if err != nil {
			return err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs != 0 {
			return fmt.Errorf("REACH_TASKS holds %d tasks", info.State.Msgs)
		}
		return nil
	})
}

// A durable task whose result fits as the agent sends it but not with the
// headers of its record in REACH_RESULTS is dead-lettered with
// PAYLOAD_TOO_LARGE, once, instead of being redelivered for ever.
func TestDurableResultThatOutgrowsMaxPayload(t *testing.T) {
	opts := natstest.Options(t.TempDir())
	opts.MaxPayload = smallMaxPayload
	h := newHarness(t, opts)
	// The agent's reply headers, Reach-Active at its widest included.
	reply := nats.NewMsg("x")
	for k, v := range map[string]string{streams.HeaderStatus: string(streams.StatusFinished), streams.HeaderRequestID: "big-2",
		streams.HeaderNode: "echo-1", streams.HeaderContentType: streams.ContentTypeJSON, streams.HeaderActive: "8"} {
		reply.Header.Set(k, v)
	}
	result := append(append([]byte(`"`), bytes.Repeat([]byte{'x'}, smallMaxPayload-streams.HeaderSize(reply)-2-4)...), '"')
	a, err := agentkit.New(h.nc, agentkit.Config{Type: "echo", ID: "echo-1"}, agentkit.WithoutSignals(), agentkit.WithLogger(zerolog.Nop()))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Handle("echo", func(context.Context, *agentkit.Request) (any, error) { return result, nil }); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Drain(context.Background()) })
	natstest.WaitFor(t, 10*time.Second, func() error {
		if _, ok := h.d.Table().Lookup("echo-1"); !ok {
			return errNotYet
		}
		return nil
	})
	m := nats.NewMsg(streams.Subjects{}.Submit("echo"))
	m.Data = []byte(`{}`)
	m.Header.Set(streams.HeaderRequestID, "big-2")
	if _, err := h.js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	var parked []durable.Parked
	natstest.WaitFor(t, 15*time.Second, func() error {
		var err error
		if parked, err = durable.ListParked(ctx, h.js, streams.Subjects{}, streams.StreamDLQ); err != nil || len(parked) == 0 {
			return errNotYet
		}
		return nil
	})
	if p := parked[0]; p.RequestID != "big-2" || p.Code != string(streams.CodePayloadTooLarge) ||
		!strings.Contains(p.LastError, "the result of echo-1, with the dispatcher's headers") || string(p.Data) != `{}` {
		t.Fatalf("dead letter %+v", p)
	}
}
