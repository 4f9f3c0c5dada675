package integration

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/durable"
	"github.com/agent-reach/agentreach/dispatcher/events"
	"github.com/agent-reach/agentreach/dispatcher/selection"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// payer is an idempotent write agent: each execution publishes one side
// effect (its request id) on EffectsSubject.
func payer(nc *nats.Conn) agentkit.Handler { return writer(nc, 0) }

func jsOf(tb testing.TB, nc *nats.Conn) jetstream.JetStream {
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	return js
}

func submitAll(t *testing.T, l *Ledger, c *agentkit.Client, capability string, n int) {
	t.Helper()
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := l.Submit(ctx, c, capability, map[string]int{"n": i})
		cancel()
		if err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
	}
}

func TestDurableSubmitResultAndWait(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	st.Agent(agentkit.Config{Type: "echo", ID: "echo-d"}, map[string]agentkit.Handler{"echo": echoHandler(),
		"order.place": func(context.Context, *agentkit.Request) (any, error) { return nil, agentkit.Reject("closed") }})
	WaitRoutable(t, "echo", 1, d)
	c := st.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := c.SubmitAndWait(ctx, "echo", echoIn{Text: "durable"})
	if err != nil {
		t.Fatal(err)
	}
	var out echoIn
	if err := res.Decode(&out); err != nil || out.Text != "durable" || res.Node != "echo-d" {
		t.Fatalf("result %+v %v node %s", out, err, res.Node)
	}
	// Fetched later, the same result.
	again, err := c.Result(ctx, res.RequestID)
	if err != nil || string(again.Data) != string(res.Data) {
		t.Fatalf("Result: %v %s", err, again.Data)
	}
	// A business rejection is an outcome too, recorded as such.
	_, err = c.SubmitAndWait(ctx, "order.place", echoIn{})
	if !errors.Is(err, streams.ErrBizReject) {
		t.Fatalf("want BIZ_REJECT, got %v", err)
	}
	// A poison task is dead-lettered, and a waiter hears so at once.
	_, err = c.SubmitAndWait(ctx, "echo", []byte{0xc1}, agentkit.WithHeader(streams.HeaderContentType, "text/plain"))
	if !errors.Is(err, agentkit.ErrParked) || !errors.Is(err, streams.ErrBadRequest) {
		t.Fatalf("want a parked BAD_REQUEST, got %v", err)
	}
	t.Log(err)
	if _, err := c.Result(ctx, "never-submitted"); !errors.Is(err, agentkit.ErrNoResult) {
		t.Fatalf("want ErrNoResult, got %v", err)
	}
	// Resubmitting the same request id is deduplicated.
	id, err := c.Submit(ctx, "echo", echoIn{Text: "once"}, agentkit.WithRequestID("fixed-id-1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(ctx, "echo", echoIn{Text: "once"}, agentkit.WithRequestID(id)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx, id); err != nil {
		t.Fatal(err)
	}
}

// Submission beyond the buffer bound is refused with OVERLOADED.
func TestDurableBufferBoundRefusesSubmission(t *testing.T) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	natstest.Provision(t, nc, streams.Topology{Memory: true, PendingPerCapability: 50})
	c, _ := agentkit.NewClient(nc)
	ctx := context.Background()
	for i := range 50 {
		if _, err := c.Submit(ctx, "nobody.home", map[string]int{"i": i}); err != nil {
			t.Fatalf("submission %d within the bound: %v", i+1, err)
		}
	}
	_, err := c.Submit(ctx, "nobody.home", map[string]int{"i": 50})
	if !errors.Is(err, streams.ErrOverloaded) {
		t.Fatalf("submission 51 of a bound of 50: want OVERLOADED, got %v", err)
	}
	t.Log(err)
	// Other capabilities are not affected.
	if _, err := c.Submit(ctx, "other.cap", map[string]int{}); err != nil {
		t.Fatalf("another capability: %v", err)
	}
}

// An agent failing every task sends them to the DLQ with the reason; once it
// is fixed, the replayer (interval shortened) completes all of them.
func TestDeadLettersAreReplayedOnceTheAgentIsFixed(t *testing.T) {
	const tasks = 40
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{DeadLetterRetryInterval: 500 * time.Millisecond, DeadLetterReplayRate: 200,
		Breaker: selection.BreakerConfig{ConsecutiveFailures: 1000, MinVolume: 1000}})
	var broken atomic.Bool
	broken.Store(true)
	st.Agent(agentkit.Config{Type: "flap", ID: "flappy"}, map[string]agentkit.Handler{"flap": Flapping(&broken)})
	WaitRoutable(t, "flap", 1, d)
	nc := st.Conn()
	js := jsOf(t, nc)
	l := NewLedger(t, nc)
	c := st.Client()
	submitAll(t, l, c, "flap", tasks)
	natstest.WaitFor(t, 20*time.Second, func() error {
		o, err := ReadOutcomes(context.Background(), js)
		if err != nil {
			return err
		}
		if len(o.DeadLettered) != tasks {
			return fmt.Errorf("%d dead letters", len(o.DeadLettered))
		}
		return nil
	})
	list, err := durable.ListParked(context.Background(), js, streams.Subjects{}, streams.StreamDLQ)
	if err != nil {
		t.Fatal(err)
	}
	first := list[0]
	if first.Reason != durable.ReasonFailed || first.Code != string(streams.CodeInternal) || first.Attempts != 1 || first.LastError == "" {
		t.Fatalf("dead letter lacks its reason: %+v", first)
	}
	t.Logf("dead letter: reason %s, code %s, attempts %d, last error %q", first.Reason, first.Code, first.Attempts, first.LastError)

	broken.Store(false)
	natstest.WaitFor(t, 30*time.Second, func() error {
		o, err := ReadOutcomes(context.Background(), js)
		if err != nil {
			return err
		}
		if len(o.Completed) != tasks || len(o.DeadLettered) != 0 {
			return fmt.Errorf("%d completed, %d still dead letters", len(o.Completed), len(o.DeadLettered))
		}
		return nil
	})
	l.Check(t, js)
	if s := d.Stats(); s.Replayed < tasks {
		t.Fatalf("replayed %d", s.Replayed)
	}
}

// Every task, direct or durable, leaves one feedback record in REACH_EVENTS.
func TestEveryTaskLeavesOneEvent(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	st.Agent(agentkit.Config{Type: "echo", ID: "echo-ev"}, map[string]agentkit.Handler{"echo": echoHandler()})
	WaitRoutable(t, "echo", 1, d)
	c := st.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	direct, err := c.Call(ctx, "echo", echoIn{Text: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Call(ctx, "nobody.serves", echoIn{}); !errors.Is(err, streams.ErrNoAgent) {
		t.Fatal(err)
	}
	submitted, err := c.SubmitAndWait(ctx, "echo", echoIn{Text: "b"})
	if err != nil {
		t.Fatal(err)
	}
	js := jsOf(t, st.Conn())
	var records []events.Event
	natstest.WaitFor(t, 5*time.Second, func() error {
		list, err := durable.ListParked(ctx, js, streams.Subjects{}, streams.StreamEvents)
		if err != nil {
			return err
		}
		records = records[:0]
		for _, p := range list {
			evs, err := events.DecodeEvents(p.Data)
			if err != nil {
				return err
			}
			if n := p.Header.Get(events.HeaderEvents); n != strconv.Itoa(len(evs)) {
				return fmt.Errorf("a message says it holds %s records and holds %d", n, len(evs))
			}
			records = append(records, evs...)
		}
		if len(records) != 3 {
			return fmt.Errorf("%d event records", len(records))
		}
		return nil
	})
	byID := map[string]events.Event{}
	for _, ev := range records {
		byID[ev.RequestID] = ev
	}
	if ev := byID[direct.RequestID]; ev.Tier != "direct" || ev.Status != "FINISHED" || ev.Node != "echo-ev" || ev.Attempts != 1 || ev.Candidates != 1 || ev.Outcome != events.OutcomeReply {
		t.Fatalf("direct task's record: %+v", ev)
	}
	if ev := byID[submitted.RequestID]; ev.Tier != "durable" || ev.Outcome != events.OutcomeResult || ev.Status != "FINISHED" {
		t.Fatalf("durable task's record: %+v", ev)
	}
	failed := 0
	for _, ev := range records {
		if ev.Code == string(streams.CodeNoAgent) && ev.Capability == "nobody.serves" && ev.Candidates == 0 {
			failed++
		}
	}
	if failed != 1 {
		t.Fatalf("the NO_AGENT task's record is missing: %+v", records)
	}
}

// Enough direct tasks to fill several event batches, from concurrent
// callers, each leave exactly one intact record: batch buffers are reused
// once published, and none may be overwritten before.
func TestManyTasksLeaveOneEventEach(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	st.Agent(agentkit.Config{Type: "echo", ID: "echo-many", MaxConcurrent: 64}, map[string]agentkit.Handler{"echo": echoHandler()})
	WaitRoutable(t, "echo", 1, d)
	c := st.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const callers, each = 8, 100 // 800 records: six full batches and a partial one
	ids := make(chan string, callers*each)
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				res, err := c.Call(ctx, "echo", echoIn{Text: "many"})
				if err != nil {
					t.Error(err)
					return
				}
				ids <- res.RequestID
			}
		}()
	}
	wg.Wait()
	close(ids)
	if t.Failed() {
		t.FailNow()
	}
	want := map[string]bool{}
	for id := range ids {
		want[id] = true
	}
	js := jsOf(t, st.Conn())
	natstest.WaitFor(t, 10*time.Second, func() error {
		list, err := durable.ListParked(ctx, js, streams.Subjects{}, streams.StreamEvents)
		if err != nil {
			return err
		}
		seen := map[string]int{}
		for _, p := range list {
			evs, err := events.DecodeEvents(p.Data)
			if err != nil {
				return err
			}
			for _, ev := range evs {
				if ev.Capability != "echo" || ev.Status != "FINISHED" || ev.Node != "echo-many" {
					return fmt.Errorf("a damaged record: %+v", ev)
				}
				seen[ev.RequestID]++
			}
		}
		for id := range want {
			if seen[id] != 1 {
				return fmt.Errorf("request %s has %d records (%d records for %d tasks)", id, seen[id], len(seen), len(want))
			}
		}
		if len(seen) != len(want) {
			return fmt.Errorf("%d records for %d tasks", len(seen), len(want))
		}
		return nil
	})
}

// A redelivered durable task whose result is already recorded (its first
// delivery's acknowledgement was lost) ends there: it is not run again and
// gets no second outcome.
func TestARedeliveredTaskWithARecordedResultEndsThere(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	nc := st.Conn()
	js := jsOf(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The result of "paid-7", as a delivery whose ack got lost recorded it.
	res := nats.NewMsg(streams.Subjects{}.Result(streams.NoSource, "paid-7")) // st.Client names no Reach-Source
	res.Header.Set(streams.HeaderStatus, string(streams.StatusFinished))
	res.Header.Set(streams.HeaderRequestID, "paid-7")
	res.Data = []byte(`{"charged":"paid-7"}`)
	if _, err := js.PublishMsg(ctx, res); err != nil {
		t.Fatal(err)
	}
	// Submitted with no agent: the first delivery waits in the stream, so
	// the one that finds the agent is a redelivery.
	if _, err := st.Client().Submit(ctx, "pay.charge", map[string]int{"n": 7}, agentkit.WithRequestID("paid-7")); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if d.Stats().Buffered == 0 {
			return errors.New("the task has not waited in the stream yet")
		}
		return nil
	})
	effects := countEffects(t, st.Conn())
	st.Agent(agentkit.Config{Type: "pay", ID: "payer-1"}, map[string]agentkit.Handler{"pay.charge": payer(st.Conn())})
	natstest.WaitFor(t, 10*time.Second, func() error {
		s, err := js.Stream(ctx, streams.StreamTasks)
		if err != nil {
			return err
		}
		if info, err := s.Info(ctx); err != nil || info.State.Msgs != 0 {
			return fmt.Errorf("REACH_TASKS holds %v tasks (%v)", info.State.Msgs, err)
		}
		return nil
	})
	o, err := ReadOutcomes(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	if o.Completed["paid-7"] != 1 || o.DeadLettered["paid-7"] != 0 || o.InReview["paid-7"] != 0 || effects.Load() != 0 {
		t.Errorf("outcomes %+v, %d side effects; want the one recorded result and no execution", o, effects.Load())
	}
}

// A durable task's outcome is claimed before it is recorded, and only the
// claimed one is recorded: here another delivery of the task (as a second
// replica holding it, or a first whose acknowledgement was lost) claimed
// it first. Claimed a dead letter, the task is dead-lettered although its
// agent now succeeds — no result beside it; claimed a result whose publish
// was lost, the result is obtained again (the agent's idempotency key
// replays it, one execution) and recorded once.
func TestADurableTaskGetsTheOutcomeClaimedFirst(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	nc := st.Conn()
	js := jsOf(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	effects := countEffects(t, st.Conn())
	st.Agent(agentkit.Config{Type: "pay", ID: "payer-1"}, map[string]agentkit.Handler{"pay.charge": payer(st.Conn())})
	WaitRoutable(t, "pay.charge", 1, d)
	claims, err := js.KeyValue(ctx, streams.BucketOutcomes)
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := js.Stream(ctx, streams.StreamTasks)
	if err != nil {
		t.Fatal(err)
	}
	c := st.Client()
	for _, tc := range []struct {
		id, claim                      string
		completed, deadLettered, execs int
	}{
		{"claimed-dlq", `{"outcome":"dead_letter","reason":"failed","code":"INTERNAL","message":"failed on another replica","node":"payer-1","attempts":3,"request_id":"claimed-dlq","by":"d-other"}`, 0, 1, 1},
		{"claimed-result", `{"outcome":"result","node":"payer-1","attempts":1,"request_id":"claimed-result","by":"d-other"}`, 1, 0, 1},
	} {
		info, err := tasks.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprintf("task.%d.%s", info.State.LastSeq+1, tc.id) // the submission below
		if _, err := claims.Create(ctx, key, []byte(tc.claim)); err != nil {
			t.Fatal(err)
		}
		before := effects.Load()
		if _, err := c.Submit(ctx, "pay.charge", map[string]string{"n": tc.id}, agentkit.WithRequestID(tc.id)); err != nil {
			t.Fatal(err)
		}
		natstest.WaitFor(t, 20*time.Second, func() error { // acknowledged once its outcome is recorded
			if info, err := tasks.Info(ctx); err != nil || info.State.Msgs != 0 {
				return fmt.Errorf("REACH_TASKS still holds %s (%v)", tc.id, err)
			}
			return nil
		})
		o, err := ReadOutcomes(ctx, js)
		if err != nil {
			t.Fatal(err)
		}
		if o.Completed[tc.id] != tc.completed || o.DeadLettered[tc.id] != tc.deadLettered || o.InReview[tc.id] != 0 {
			t.Errorf("%s: %d results, %d dead letters, %d review entries; want %d, %d, 0", tc.id,
				o.Completed[tc.id], o.DeadLettered[tc.id], o.InReview[tc.id], tc.completed, tc.deadLettered)
		}
		if n := effects.Load() - before; n != int64(tc.execs) {
			t.Errorf("%s executed %d times, want %d", tc.id, n, tc.execs)
		}
	}
}

// A durable task whose only instance is unreachable (it never ACKs: a
// process gone, or stopped, that the registry still lists) waits in the
// stream like one that found no instance, instead of being dead-lettered
// for the outage; once a working agent comes it runs, and gets its result.
func TestADurableTaskWaitsOutAnUnreachableInstance(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{AckTimeout: 200 * time.Millisecond})
	NeverAck(t, st.Conn(), "hung-1", time.Second, "pay.charge")
	WaitRoutable(t, "pay.charge", 1, d)
	js := jsOf(t, st.Conn())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := st.Client().Submit(ctx, "pay.charge", map[string]int{"n": 1}, agentkit.WithRequestID("outage-1")); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if d.Stats().Buffered == 0 {
			return errors.New("the task has not waited in the stream yet")
		}
		return nil
	})
	st.Agent(agentkit.Config{Type: "pay", ID: "payer-1"}, map[string]agentkit.Handler{"pay.charge": payer(st.Conn())})
	tasks, err := js.Stream(ctx, streams.StreamTasks)
	if err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 20*time.Second, func() error {
		if info, err := tasks.Info(ctx); err != nil || info.State.Msgs != 0 {
			return fmt.Errorf("REACH_TASKS still holds the task (%v)", err)
		}
		return nil
	})
	o, err := ReadOutcomes(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	if o.Completed["outage-1"] != 1 || o.DeadLettered["outage-1"] != 0 || o.InReview["outage-1"] != 0 {
		t.Errorf("outcomes %+v: want the one result, no dead letter", o)
	}
}
