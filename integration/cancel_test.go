package integration

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// holdInstance registers a raw instance that acknowledges every delivery
// and never finishes it, and reports the deliveries and the CANCELs it gets.
func holdInstance(t *testing.T, st *Stack, id, capability string) (deliveries, cancels chan *nats.Msg) {
	t.Helper()
	nc := st.Conn()
	deliveries, cancels = make(chan *nats.Msg, 16), make(chan *nats.Msg, 16)
	RawInstance(t, nc, id, st.Heartbeat, func(m *nats.Msg) {
		if m.Reply == "" {
			cancels <- m
			return
		}
		_ = nc.PublishMsg(streams.StatusReply(m.Reply, streams.StatusAcked, ""))
		deliveries <- m
	}, capability)
	return deliveries, cancels
}

func recv(t *testing.T, ch chan *nats.Msg, what string) *nats.Msg {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s within 10s", what)
		return nil
	}
}

func TestACallerCancelsOnReachCancel(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	deliveries, cancels := holdInstance(t, st, "hold-1", "hold")
	WaitRoutable(t, "hold", 1, d)
	nc := st.Conn()

	inbox := nc.NewRespInbox()
	replies, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	req := nats.NewMsg(streams.Subjects{}.Task("hold"))
	req.Reply = inbox
	req.Header.Set(streams.HeaderRequestID, "cancel-me")
	if err := nc.PublishMsg(req); err != nil {
		t.Fatal(err)
	}
	recvDelivered := recv(t, deliveries, "delivery")
	c := nats.NewMsg(streams.Subjects{}.Cancel())
	c.Header.Set(streams.HeaderRequestID, "cancel-me")
	if err := nc.PublishMsg(c); err != nil {
		t.Fatal(err)
	}
	got := recv(t, cancels, "CANCEL at the instance")
	dl := recvDelivered
	for k, want := range map[string]string{streams.HeaderStatus: "CANCEL", streams.HeaderRequestID: "cancel-me",
		streams.HeaderAttempt: "1", streams.HeaderCapability: "hold", streams.HeaderDelivery: dl.Reply} {
		if v := got.Header.Get(k); v != want {
			t.Errorf("CANCEL header %s = %q, want %q", k, v, want)
		}
	}
	reply, err := replies.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code := reply.Header.Get(streams.HeaderError); code != string(streams.CodeCancelled) {
		t.Errorf("the task ended with %q, want CANCELLED (headers %v)", code, reply.Header)
	}
	natstest.WaitFor(t, 5*time.Second, func() error {
		if n := d.Stats().InFlight; n != 0 {
			return errors.New("the cancelled task is still in flight")
		}
		return nil
	})
}

func TestCallInProcessAndItsCancellation(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{QueueWait: 20 * time.Second})
	nc := st.Conn()
	RawInstance(t, nc, "echo-1", time.Second, func(m *nats.Msg) { finish(nc, m, m.Data) }, "echo")
	deliveries, cancels := holdInstance(t, st, "hold-1", "hold")
	WaitRoutable(t, "echo", 1, d)
	WaitRoutable(t, "hold", 1, d)

	// An in-process call gets what a NATS caller would.
	req := nats.NewMsg("")
	req.Header.Set(streams.HeaderOrchestrationID, "orch-1")
	req.Data = []byte(`{"text":"hi"}`)
	res := d.Call(context.Background(), "echo", req)
	if res.Header.Get(streams.HeaderStatus) != "FINISHED" || string(res.Data) != `{"text":"hi"}` ||
		res.Header.Get(streams.HeaderNode) != "echo-1" || res.Header.Get(streams.HeaderOrchestrationID) != "orch-1" {
		t.Fatalf("in-process call: headers %v, body %q", res.Header, res.Data)
	}
	if res := d.Call(context.Background(), "Not.Valid", nats.NewMsg("")); res.Header.Get(streams.HeaderError) != string(streams.CodeBadRequest) {
		t.Errorf("invalid capability: headers %v", res.Header)
	}

	// Its context ending cancels the delivery: the instance hears of it.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan *nats.Msg, 1)
	go func() { done <- d.Call(ctx, "hold", nats.NewMsg("")) }()
	recv(t, deliveries, "delivery")
	cancel()
	if res := <-done; res.Header.Get(streams.HeaderError) != string(streams.CodeCancelled) {
		t.Errorf("cancelled call: headers %v", res.Header)
	}
	recv(t, cancels, "CANCEL at the instance")

	// A deadline that passes while waiting for a free slot: hold-1 has
	// 8 slots; fill them, then the next call waits in the queue.
	fill, unfill := context.WithCancel(context.Background())
	filled := make(chan struct{}, 8)
	defer func() { // the held calls end with the test, and are waited for
		unfill()
		for range 8 {
			<-filled
		}
	}()
	for range 8 {
		go func() {
			d.Call(fill, "hold", nats.NewMsg(""))
			filled <- struct{}{}
		}()
		recv(t, deliveries, "delivery")
	}
	ctx, cancelQueued := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancelQueued()
	if res := d.Call(ctx, "hold", nats.NewMsg("")); res.Header.Get(streams.HeaderError) != string(streams.CodeDeadlineExceeded) {
		t.Errorf("call whose context expired in the queue: headers %v", res.Header)
	}
	if s := d.Stats(); s.Queued == 0 {
		t.Errorf("the last call never waited in the queue (stats %+v): the test proves nothing", s)
	}
}

func TestADeliveryPastItsDeadlineIsCancelled(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	deliveries, cancels := holdInstance(t, st, "hold-1", "hold")
	WaitRoutable(t, "hold", 1, d)
	req := nats.NewMsg(streams.Subjects{}.Task("hold"))
	req.Header.Set(streams.HeaderDeadline, strconv.FormatInt(time.Now().Add(300*time.Millisecond).UnixMilli(), 10))
	res, err := st.Conn().RequestMsg(req, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code := res.Header.Get(streams.HeaderError); code != string(streams.CodeDeadlineExceeded) {
		t.Errorf("headers %v, want DEADLINE_EXCEEDED", res.Header)
	}
	dl := recv(t, deliveries, "delivery")
	c := recv(t, cancels, "CANCEL after the deadline")
	if c.Header.Get(streams.HeaderRequestID) != dl.Header.Get(streams.HeaderRequestID) {
		t.Errorf("CANCEL for %q, the delivery was %q", c.Header.Get(streams.HeaderRequestID), dl.Header.Get(streams.HeaderRequestID))
	}
}

func TestACancelReachesAnAgentkitHandler(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	started := make(chan struct{}, 1)
	stopped := make(chan time.Time, 1)
	st.Agent(agentkit.Config{Type: "waiter"}, map[string]agentkit.Handler{
		"wait": func(ctx context.Context, _ *agentkit.Request) (any, error) {
			started <- struct{}{}
			<-ctx.Done()
			stopped <- time.Now()
			return nil, ctx.Err()
		}})
	WaitRoutable(t, "wait", 1, d)
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 1)
	go func() {
		_, err := st.Client().Call(ctx, "wait", map[string]any{})
		errs <- err
	}()
	<-started
	at := time.Now()
	cancel()
	if err := <-errs; !errors.Is(err, streams.ErrCancelled) {
		t.Errorf("Call after its context was cancelled: %v, want CANCELLED", err)
	}
	select {
	case end := <-stopped:
		t.Logf("the handler's context ended %v after the caller's", end.Sub(at))
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's context did not end within 10s of the caller cancelling")
	}
}
