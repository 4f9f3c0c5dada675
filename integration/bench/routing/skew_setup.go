package routing

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/selection"
	"github.com/agent-reach/agentreach/integration/bench/harness"
	"github.com/agent-reach/agentreach/streams"
)

// skewVariant says how much slower each of the eight agents is, and whether
// agent 0 stalls periodically.
type skewVariant struct {
	name    string
	prefix  string // of its figure keys
	factors [skewAgents]float64
	stall   bool
	about   string
}

var skewVariants = []skewVariant{
	{name: "one_slow", factors: [skewAgents]float64{10, 1, 1, 1, 1, 1, 1, 1}, about: "1 of 8 agents 10× slower"},
	{name: "three_slow", prefix: "three_slow_", factors: [skewAgents]float64{3, 3, 3, 1, 1, 1, 1, 1}, about: "3 of 8 agents 3× slower"},
	{name: "stall", prefix: "stall_", factors: [skewAgents]float64{1, 1, 1, 1, 1, 1, 1, 1}, stall: true,
		about: "1 of 8 agents stalls periodically"},
}

// skewProfile is the service-time model of one variant: exponential times
// with mean 2 ms times the agent's factor, and for a stalling agent a
// periodic window in which every task waits for the window's end.
type skewProfile struct {
	v     skewVariant
	clock *stallClock
}

// serve spends agent i's service time for one task, ending early when ctx
// does.
func (p *skewProfile) serve(ctx context.Context, i int) error {
	if p.v.stall && i == 0 {
		if err := p.clock.wait(ctx); err != nil {
			return err
		}
	}
	return harness.SleepCtx(ctx, time.Duration(rand.ExpFloat64()*float64(skewMean)*p.v.factors[i]))
}

// stallClock holds the stall windows: from start on, the first length of
// every period.
type stallClock struct {
	start          atomic.Int64 // unix ns; 0 = never stall
	offset         time.Duration
	period, length time.Duration
}

// arm puts the first window offset after t.
func (c *stallClock) arm(t time.Time) { c.start.Store(t.Add(c.offset).UnixNano()) }

func (c *stallClock) wait(ctx context.Context) error {
	s := c.start.Load()
	if s == 0 {
		return nil
	}
	el := time.Since(time.Unix(0, s))
	if el < 0 || el%c.period >= c.length {
		return nil
	}
	return harness.SleepCtx(ctx, c.length-el%c.period)
}

// skewMethod sets up one way of spreading the work over the eight agents
// for one measurement point and returns how to build a request and how to
// tear it all down.
type skewMethod struct {
	name  string
	about string
	setup func(r *harness.Run, e *harness.Env, p *skewProfile, point int) (harness.Request, func(), error)
}

var skewMethods = []skewMethod{
	{name: "queue_group", about: "plain NATS queue group, 8 subscribers × 4 concurrent", setup: setupQueueGroup},
	{name: "pull", about: "JetStream work-queue, 8 workers × 4 slots, fetch when a slot is free", setup: setupPull},
	{name: "least_load", about: "dispatcher, least_load", setup: setupDispatched(selection.StrategyLeastLoad)},
	{name: "round_robin", about: "dispatcher, round_robin", setup: setupDispatched(selection.StrategyRoundRobin)},
}

// setupQueueGroup: eight queue subscribers, each running up to four tasks
// at once; a message beyond that waits in its subscriber's pending queue,
// as with any real queue group.
func setupQueueGroup(r *harness.Run, e *harness.Env, p *skewProfile, point int) (harness.Request, func(), error) {
	subject := fmt.Sprintf("bench.skew.qg.%d", point)
	ctx, cancel := context.WithCancel(context.Background())
	var active atomic.Int64
	var conns []*nats.Conn
	stop := func() {
		cancel()
		for _, nc := range conns {
			nc.Close()
		}
		r.Poll(2*time.Second, func() bool { return active.Load() == 0 })
	}
	for i := range skewAgents {
		nc, err := e.Connect(fmt.Sprintf("qg-%d-%d", point, i))
		if err != nil {
			stop()
			return nil, nil, err
		}
		conns = append(conns, nc)
		slots := make(chan struct{}, skewSlots)
		sub, err := nc.QueueSubscribe(subject, "q", func(m *nats.Msg) {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			active.Add(1)
			go func() {
				defer func() {
					<-slots
					active.Add(-1)
				}()
				if p.serve(ctx, i) == nil {
					_ = nc.PublishMsg(&nats.Msg{Subject: m.Reply, Data: m.Data, Header: harness.JSONHeader})
				}
			}()
		})
		if err == nil {
			err = sub.SetPendingLimits(-1, -1)
		}
		if err == nil {
			err = nc.Flush()
		}
		if err != nil {
			stop()
			return nil, nil, err
		}
	}
	build := func(reply string, _ time.Time) *nats.Msg {
		return &nats.Msg{Subject: subject, Reply: reply, Data: harness.SkewPayload, Header: harness.JSONHeader}
	}
	return build, stop, nil
}

// setupPull: a memory work-queue stream with one durable pull consumer;
// each of eight workers runs four slots, and a slot fetches one message
// only when it is free. The reply inbox travels in a header.
func setupPull(r *harness.Run, e *harness.Env, p *skewProfile, point int) (harness.Request, func(), error) {
	name := fmt.Sprintf("BENCH_WQ_%d", point)
	subject := fmt.Sprintf("bench.skew.wq.%d", point)
	js, admin, err := e.JS(fmt.Sprintf("wq-admin-%d", point))
	if err != nil {
		return nil, nil, err
	}
	cctx, ccancel := context.WithTimeout(r.Ctx, 10*time.Second)
	defer ccancel()
	if _, err := js.CreateStream(cctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.MemoryStorage}); err != nil {
		admin.Close()
		return nil, nil, err
	}
	if _, err := js.CreateOrUpdateConsumer(cctx, name, jetstream.ConsumerConfig{Durable: "workers",
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxWaiting: 512}); err != nil {
		admin.Close()
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var conns []*nats.Conn
	stop := func() {
		cancel()
		for _, nc := range conns {
			nc.Close()
		}
		waitGroup(&wg, 3*time.Second)
		dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = js.DeleteStream(dctx, name)
		dcancel()
		admin.Close()
	}
	for i := range skewAgents {
		nc, err := e.Connect(fmt.Sprintf("wq-%d-%d", point, i))
		if err != nil {
			stop()
			return nil, nil, err
		}
		conns = append(conns, nc)
		wjs, err := jetstream.New(nc)
		if err != nil {
			stop()
			return nil, nil, err
		}
		cons, err := wjs.Consumer(cctx, name, "workers")
		if err != nil {
			stop()
			return nil, nil, err
		}
		for range skewSlots {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					batch, err := cons.Fetch(1, jetstream.FetchMaxWait(500*time.Millisecond))
					if err != nil {
						if ctx.Err() == nil {
							time.Sleep(10 * time.Millisecond)
						}
						continue
					}
					for m := range batch.Messages() {
						if p.serve(ctx, i) == nil {
							_ = nc.PublishMsg(&nats.Msg{Subject: m.Headers().Get(replyHeader), Data: m.Data(), Header: harness.JSONHeader})
						}
						_ = m.Ack()
					}
				}
			}()
		}
	}
	build := func(reply string, _ time.Time) *nats.Msg {
		h := nats.Header{streams.HeaderContentType: []string{streams.ContentTypeJSON}, replyHeader: []string{reply}}
		return &nats.Msg{Subject: subject, Data: harness.SkewPayload, Header: h}
	}
	return build, stop, nil
}

// setupDispatched: a dispatcher with the given strategy in front of eight
// agentkit agents with four slots each. Requests carry Reach-Deadline =
// intended send time + timeout, as agentkit.Client does for a caller with
// that deadline.
func setupDispatched(strategy string) func(r *harness.Run, e *harness.Env, p *skewProfile, point int) (harness.Request, func(), error) {
	return func(r *harness.Run, e *harness.Env, p *skewProfile, point int) (harness.Request, func(), error) {
		capability := fmt.Sprintf("skew.p%d", point)
		ds, err := r.StartDispatcher(e, config.Config{DefaultStrategy: strategy}, false)
		if err != nil {
			return nil, nil, err
		}
		agents, err := r.StartAgents(e, []string{capability}, fmt.Sprintf("skew%d", point), skewAgents, skewSlots, func(i int) agentkit.Handler {
			return func(ctx context.Context, req *agentkit.Request) (any, error) {
				if err := p.serve(ctx, i); err != nil {
					return nil, err
				}
				return req.Data, nil
			}
		})
		if err != nil {
			ds.Stop()
			return nil, nil, err
		}
		stop := func() {
			agents.Stop()
			ds.Stop()
		}
		if err := r.WaitRoutable(ds, capability, skewAgents); err != nil {
			stop()
			return nil, nil, err
		}
		subject := streams.Subjects{}.Task(capability)
		build := func(reply string, intended time.Time) *nats.Msg {
			h := nats.Header{
				streams.HeaderContentType: []string{streams.ContentTypeJSON},
				streams.HeaderDeadline:    []string{strconv.FormatInt(intended.Add(skewTimeout).UnixMilli(), 10)},
			}
			return &nats.Msg{Subject: subject, Reply: reply, Data: harness.SkewPayload, Header: h}
		}
		return build, stop, nil
	}
}

// waitGroup waits for wg up to timeout.
func waitGroup(wg *sync.WaitGroup, timeout time.Duration) {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(timeout):
	}
}
