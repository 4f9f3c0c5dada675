package agentkit_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

// deliverer talks to one agent directly, the way a dispatcher does, so the
// agent's side of the protocol is tested without a dispatcher.
type deliverer struct {
	t  *testing.T
	nc *nats.Conn
}

// deliver sends one task and returns every reply up to the final one.
func (d deliverer) deliver(id, capability string, data []byte, hdr ...string) []*nats.Msg {
	d.t.Helper()
	inbox := nats.NewInbox()
	sub, err := d.nc.SubscribeSync(inbox)
	if err != nil {
		d.t.Fatal(err)
	}
	defer sub.Unsubscribe()
	m := nats.NewMsg(streams.Subjects{}.Agent(id))
	m.Reply, m.Data = inbox, data
	m.Header.Set(streams.HeaderCapability, capability)
	m.Header.Set(streams.HeaderRequestID, "req-1")
	for i := 0; i+1 < len(hdr); i += 2 {
		m.Header.Set(hdr[i], hdr[i+1])
	}
	if err := d.nc.PublishMsg(m); err != nil {
		d.t.Fatal(err)
	}
	var out []*nats.Msg
	for {
		r, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			d.t.Fatalf("waiting for replies (got %d): %v", len(out), err)
		}
		out = append(out, r)
		if streams.Status(r.Header.Get(streams.HeaderStatus)).Terminal() {
			return out
		}
	}
}

func statuses(ms []*nats.Msg) []string {
	var s []string
	for _, m := range ms {
		s = append(s, m.Header.Get(streams.HeaderStatus))
	}
	return s
}

func startAgent(t *testing.T, nc *nats.Conn, cfg agentkit.Config, handlers map[string]agentkit.Handler) *agentkit.Agent {
	t.Helper()
	a, err := agentkit.New(nc, cfg, agentkit.WithoutSignals())
	if err != nil {
		t.Fatal(err)
	}
	for c, h := range handlers {
		if err := a.Handle(c, h); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Drain(context.Background()) })
	return a
}

// heartbeat is the agents' interval in these tests. A record lives 3 of
// them: at 500ms, heartbeats that a loaded machine stalls (each put is
// bounded by the interval) cannot make a live agent look dead to an
// idempotency waiter.
const heartbeat = 500 * time.Millisecond

func setup(t *testing.T) (*nats.Conn, deliverer, *registry.Registry) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	natstest.Provision(t, nc, streams.Topology{Heartbeat: heartbeat, Memory: true})
	js, _ := jetstream.New(nc)
	reg, err := registry.Open(context.Background(), js)
	if err != nil {
		t.Fatal(err)
	}
	return natstest.Connect(t, s), deliverer{t: t, nc: nc}, reg
}

func TestProtocolAckProgressFinish(t *testing.T) {
	nc, d, _ := setup(t)
	startAgent(t, nc, agentkit.Config{Type: "work", ID: "w1", Heartbeat: heartbeat}, map[string]agentkit.Handler{
		"work": func(_ context.Context, r *agentkit.Request) (any, error) {
			if err := r.Progress(); err != nil {
				return nil, err
			}
			r.SetCost(1.5)
			return map[string]string{"got": string(r.Data)}, nil
		},
	})
	replies := d.deliver("w1", "work", []byte(`"x"`))
	if got := statuses(replies); len(got) != 3 || got[0] != "ACKED" || got[1] != "PROCESSING" || got[2] != "FINISHED" {
		t.Fatalf("statuses %v", got)
	}
	last := replies[2]
	if last.Header.Get(streams.HeaderNode) != "w1" || last.Header.Get(streams.HeaderCost) != "1.5" ||
		last.Header.Get(streams.HeaderContentType) != streams.ContentTypeJSON || string(last.Data) != `{"got":"\"x\""}` {
		t.Fatalf("final reply %v %s", last.Header, last.Data)
	}
}

// A task finished within AckDelay is answered by its result alone; a slower
// one is acknowledged first.
func TestFastResultNeedsNoSeparateAck(t *testing.T) {
	nc, d, _ := setup(t)
	startAgent(t, nc, agentkit.Config{Type: "work", ID: "w2", Heartbeat: heartbeat}, map[string]agentkit.Handler{
		"fast": func(_ context.Context, r *agentkit.Request) (any, error) { return r.Data, nil },
		"slow": func(_ context.Context, r *agentkit.Request) (any, error) {
			time.Sleep(20 * agentkit.AckDelay) // the work itself, not synchronisation
			return r.Data, nil
		},
	})
	if got := statuses(d.deliver("w2", "slow", []byte(`1`))); len(got) != 2 || got[0] != "ACKED" || got[1] != "FINISHED" {
		t.Fatalf("slow task: %v", got)
	}
	fast := 0
	for range 20 {
		got := statuses(d.deliver("w2", "fast", []byte(`1`)))
		if got[len(got)-1] != "FINISHED" {
			t.Fatalf("fast task: %v", got)
		}
		if len(got) == 1 {
			fast++
		}
	}
	if fast == 0 {
		t.Fatal("no fast task was answered without a separate ACK")
	}
}

func TestErrorsAreClassified(t *testing.T) {
	nc, d, _ := setup(t)
	startAgent(t, nc, agentkit.Config{Type: "err", ID: "e1", Heartbeat: heartbeat}, map[string]agentkit.Handler{
		"reject": func(context.Context, *agentkit.Request) (any, error) { return nil, agentkit.Reject("out of stock") },
		"busy":   func(context.Context, *agentkit.Request) (any, error) { return nil, agentkit.Busy("quota") },
		"fail":   func(context.Context, *agentkit.Request) (any, error) { return nil, errors.New("disk full") },
		"panic":  func(context.Context, *agentkit.Request) (any, error) { panic("boom") },
		"typed": agentkit.Typed(func(_ context.Context, _ *agentkit.Request, in struct{ N int }) (int, error) {
			return in.N, nil
		}),
	})
	cases := []struct {
		capability string
		data       string
		want       streams.Code
	}{
		{"reject", "{}", streams.CodeBizReject},
		{"busy", "{}", streams.CodeTargetBusy},
		{"fail", "{}", streams.CodeInternal},
		{"panic", "{}", streams.CodeInternal},
		{"typed", `{"N":"x"}`, streams.CodeBadRequest},
		{"unknown", "{}", streams.CodeNoAgent},
	}
	for _, tc := range cases {
		replies := d.deliver("e1", tc.capability, []byte(tc.data))
		last := replies[len(replies)-1]
		e := streams.ErrorFromMessage(last)
		if e == nil || e.Code != tc.want || last.Header.Get(streams.HeaderStatus) != "FAILED" {
			t.Errorf("%s: want %s, got %v (%v)", tc.capability, tc.want, e, last.Header)
		}
	}
	// Still serving after all of that.
	if replies := d.deliver("e1", "typed", []byte(`{"N":7}`)); string(replies[len(replies)-1].Data) != "7" {
		t.Fatalf("agent broken after errors: %s", replies[len(replies)-1].Data)
	}
}

func TestFullSlotsAnswerTargetBusy(t *testing.T) {
	nc, d, _ := setup(t)
	release := make(chan struct{})
	var running atomic.Int64
	startAgent(t, nc, agentkit.Config{Type: "slow", ID: "s1", MaxConcurrent: 1, Heartbeat: heartbeat}, map[string]agentkit.Handler{
		"slow": func(ctx context.Context, _ *agentkit.Request) (any, error) {
			running.Add(1)
			<-release
			return "ok", nil
		},
	})
	done := make(chan []*nats.Msg)
	go func() { done <- d.deliver("s1", "slow", nil) }()
	natstest.WaitFor(t, 5*time.Second, func() error {
		if running.Load() != 1 {
			return errors.New("first task not running")
		}
		return nil
	})
	replies := d.deliver("s1", "slow", nil)
	if e := streams.ErrorFromMessage(replies[0]); len(replies) != 1 || e == nil || e.Code != streams.CodeTargetBusy {
		t.Fatalf("second task: want a lone TARGET_BUSY, got %v", statuses(replies))
	}
	close(release)
	if got := statuses(<-done); got[len(got)-1] != "FINISHED" {
		t.Fatalf("first task: %v", got)
	}
}

func TestDrainFinishesInFlightWorkAndDeregisters(t *testing.T) {
	nc, d, reg := setup(t)
	release := make(chan struct{})
	var running atomic.Int64
	a := startAgent(t, nc, agentkit.Config{Type: "slow", ID: "s2", Heartbeat: heartbeat}, map[string]agentkit.Handler{
		"slow": func(ctx context.Context, _ *agentkit.Request) (any, error) {
			running.Add(1)
			<-release
			return "finished", nil
		},
	})
	done := make(chan []*nats.Msg)
	go func() { done <- d.deliver("s2", "slow", nil) }()
	natstest.WaitFor(t, 5*time.Second, func() error {
		if running.Load() != 1 {
			return errors.New("task not running")
		}
		return nil
	})
	drained := make(chan error)
	go func() { drained <- a.Drain(context.Background()) }()
	natstest.WaitFor(t, 5*time.Second, func() error {
		e, err := reg.Get(context.Background(), "s2")
		if err != nil {
			return err
		}
		if e.Status != registry.StatusDraining {
			return errors.New("not draining yet")
		}
		return nil
	})
	close(release)
	if got := statuses(<-done); got[len(got)-1] != "FINISHED" {
		t.Fatalf("in-flight task did not finish: %v", got)
	}
	if err := <-drained; err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Get(context.Background(), "s2"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("record still present after drain: %v", err)
	}
	if err := a.Drain(context.Background()); err != nil {
		t.Fatalf("second drain: %v", err)
	}
}

func TestRunDrainsOnContextCancel(t *testing.T) {
	nc, _, reg := setup(t)
	a, err := agentkit.New(nc, agentkit.Config{Type: "echo", ID: "r1", Heartbeat: heartbeat}, agentkit.WithoutSignals())
	if err != nil {
		t.Fatal(err)
	}
	_ = a.Handle("echo", func(_ context.Context, r *agentkit.Request) (any, error) { return r.Data, nil })
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error)
	go func() { ran <- a.Run(ctx) }()
	natstest.WaitFor(t, 5*time.Second, func() error {
		_, err := reg.Get(context.Background(), "r1")
		return err
	})
	cancel()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Get(context.Background(), "r1"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("record left behind: %v", err)
	}
}

// A handler calling another capability passes on the orchestration id, the
// hop count and what remains of the deadline.
func TestClientPropagatesFromHandlerContext(t *testing.T) {
	nc, d, _ := setup(t)
	inner := make(chan *nats.Msg, 1)
	sub, err := nc.Subscribe("reach.task.inner", func(m *nats.Msg) {
		inner <- m
		_ = m.Respond([]byte(`"ok"`))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	c, _ := agentkit.NewClient(nc, agentkit.WithJSON())
	startAgent(t, nc, agentkit.Config{Type: "outer", ID: "o1", Heartbeat: heartbeat}, map[string]agentkit.Handler{
		"outer": func(ctx context.Context, _ *agentkit.Request) (any, error) {
			res, err := c.Call(ctx, "inner", map[string]int{"x": 1})
			if err != nil {
				return nil, err
			}
			return res.Data, nil
		},
	})
	deadline := time.Now().Add(20 * time.Second).UnixMilli()
	replies := d.deliver("o1", "outer", []byte(`{}`), streams.HeaderOrchestrationID, "orch-9", streams.HeaderHops, "2",
		streams.HeaderDeadline, strconv.FormatInt(deadline, 10))
	if got := statuses(replies); got[len(got)-1] != "FINISHED" {
		t.Fatalf("outer: %v %s", got, replies[len(replies)-1].Data)
	}
	m := <-inner
	if m.Header.Get(streams.HeaderOrchestrationID) != "orch-9" || m.Header.Get(streams.HeaderHops) != "2" ||
		m.Header.Get(streams.HeaderSource) != "o1" {
		t.Fatalf("inner call headers: %v", m.Header)
	}
	if got := streams.IntHeader(m.Header, streams.HeaderDeadline); got != deadline {
		t.Fatalf("inner deadline %d, want the caller's %d", got, deadline)
	}
}

// An agent without Config.Heartbeat takes the bucket's (TTL / 3), and one
// whose Heartbeat differs from it is refused at Start.
func TestHeartbeatFromBucket(t *testing.T) {
	nc, _, reg := setup(t) // provisioned with heartbeat
	startAgent(t, nc, agentkit.Config{Type: "echo", ID: "hb1"}, map[string]agentkit.Handler{
		"echo": func(_ context.Context, r *agentkit.Request) (any, error) { return r.Data, nil },
	})
	e, err := reg.Get(context.Background(), "hb1")
	if err != nil {
		t.Fatal(err)
	}
	if e.HeartbeatMS != heartbeat.Milliseconds() {
		t.Fatalf("heartbeat_ms %d, want the bucket's %d", e.HeartbeatMS, heartbeat.Milliseconds())
	}

	a, err := agentkit.New(nc, agentkit.Config{Type: "echo", ID: "hb2", Heartbeat: 5 * time.Second}, agentkit.WithoutSignals())
	if err != nil {
		t.Fatal(err)
	}
	_ = a.Handle("echo", func(_ context.Context, r *agentkit.Request) (any, error) { return r.Data, nil })
	err = a.Start(context.Background())
	if !errors.Is(err, agentkit.ErrHeartbeatMismatch) || !strings.Contains(err.Error(), "TTL "+(3*heartbeat).String()) {
		t.Fatalf("Start with a 5s heartbeat on a %v bucket: %v, want ErrHeartbeatMismatch naming the TTL", heartbeat, err)
	}
	if _, err := reg.Get(context.Background(), "hb2"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("a refused agent registered: %v", err)
	}
}

// A drain that begins while tasks are delivered, which the caller of Drain
// knows nothing of, counts every task the agent took before it waits: when
// Drain returns each has ended (here cancelled, as the handlers wait for
// that), and no task starts after. The others are answered TARGET_BUSY.
func TestDrainEndsEveryTaskItTook(t *testing.T) {
	nc, d, _ := setup(t)
	var started, ended atomic.Int64
	a := startAgent(t, nc, agentkit.Config{Type: "hold", ID: "h1", Heartbeat: heartbeat, MaxConcurrent: 64,
		DrainTimeout: 50 * time.Millisecond}, map[string]agentkit.Handler{
		"hold": func(ctx context.Context, _ *agentkit.Request) (any, error) {
			started.Add(1)
			<-ctx.Done()
			ended.Add(1)
			return nil, ctx.Err()
		},
	})
	const sent = 32
	var finals atomic.Int64
	inbox := nats.NewInbox()
	sub, err := d.nc.Subscribe(inbox, func(m *nats.Msg) {
		switch streams.Status(m.Header.Get(streams.HeaderStatus)) {
		case streams.StatusAcked, streams.StatusProcessing:
		default:
			if code := streams.ErrorFromMessage(m).Code; code != streams.CodeCancelled && code != streams.CodeTargetBusy {
				t.Errorf("final answer %s", code)
			}
			finals.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	for range sent {
		m := nats.NewMsg(streams.Subjects{}.Agent("h1"))
		m.Reply = inbox
		m.Header.Set(streams.HeaderCapability, "hold")
		m.Header.Set(streams.HeaderRequestID, streams.NewRequestID())
		if err := nc.PublishMsg(m); err != nil { // nc is the agent's: these come before its unsubscribe
			t.Fatal(err)
		}
	}
	if err := a.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	s, e := started.Load(), ended.Load()
	if s != e {
		t.Fatalf("Drain returned with %d of %d started tasks running", s-e, s)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if n := finals.Load(); n != sent {
			return fmt.Errorf("%d of %d tasks answered", n, sent)
		}
		return nil
	})
	if s2 := started.Load(); s2 != s {
		t.Fatalf("%d tasks started after Drain returned", s2-s)
	}
}
