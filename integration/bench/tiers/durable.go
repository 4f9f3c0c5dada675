package tiers

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/integration/bench/harness"
	"github.com/agent-reach/agentreach/streams"
)

const (
	rawStream  = "BENCH_RAW"
	rawSubject = "bench.raw.echo"
	// benchIDHeader has the length of "Nats-Msg-Id".
	benchIDHeader  = "Bench-MsgId"
	durableMaxPend = 1024
	// durableWindow bounds the durable tasks submitted but not finished in
	// the end-to-end run, well below the capability's buffer bound.
	durableWindow = 2000
	// durableQuickWindow is the bound in quick mode, whose half-second
	// runs must see results: a full window of 3-step runs takes a loaded
	// machine longer than the 10 s stragglers' wait, and none finishes.
	durableQuickWindow = 200
)

// e2eWindow is the end-to-end runs' bound on unfinished tasks.
func e2eWindow(r *harness.Run) int { return harness.Pick(r, durableWindow, durableQuickWindow) }

// runDurable measures the durable tier. First submission alone: raw
// JetStream async publishing to a plain stream versus reach.submit.<cap>
// (REACH_TASKS, deduplicated by Nats-Msg-Id), with no consumer running.
// Then end to end: durable tasks through the dispatcher's durable consumer
// to echo agents and into REACH_RESULTS, versus direct-tier tasks on the
// same stack. File streams, as in production.
func Durable(r *harness.Run) error {
	// The capability's buffer bound is raised so the submission runs (no
	// consumer) are not refused; the bound's per-subject check still runs.
	topo := streams.Topology{PendingPerCapability: 1 << 40}
	e, err := harness.StartEnv(r.Ctx, topo, false)
	if err != nil {
		return err
	}
	defer e.Close()
	js, _, err := e.JS("durable-admin")
	if err != nil {
		return err
	}
	// fresh empties both streams (and REACH_TASKS's duplicate window), so
	// that every run starts from the same state.
	fresh := func() error {
		ctx, cancel := context.WithTimeout(r.Ctx, 30*time.Second)
		defer cancel()
		for _, name := range []string{rawStream, streams.StreamTasks} {
			if err := js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
				return err
			}
		}
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: rawStream, Subjects: []string{"bench.raw.>"},
			Storage: jetstream.FileStorage}); err != nil {
			return err
		}
		return streams.Provision(ctx, js, topo)
	}

	payload := []byte(`{"order":"A-1042","items":3,"note":"durable benchmark task"}`)
	submitSubject := streams.Subjects{}.Submit(harness.EchoCapability)
	// publish publishes m asynchronously with opts, waiting (up to 10 s)
	// while durableMaxPend acknowledgements are outstanding.
	publish := func(pjs jetstream.JetStream, m *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
		return pjs.PublishMsgAsync(m, append(opts, jetstream.WithStallWait(10*time.Second))...)
	}
	raw := func(pjs jetstream.JetStream) (jetstream.PubAckFuture, error) {
		return publish(pjs, &nats.Msg{Subject: rawSubject, Data: payload})
	}
	submitMsg := func() (*nats.Msg, string) {
		id := streams.NewRequestID()
		return &nats.Msg{Subject: submitSubject, Data: payload, Header: nats.Header{
			streams.HeaderContentType: []string{streams.ContentTypeJSON},
			streams.HeaderRequestID:   []string{id},
		}}, id
	}
	// The floor of any submission that names its task, deduplicated or not:
	// the same raw publish with a header of Nats-Msg-Id's size, which the
	// server stores with the message.
	header := func(pjs jetstream.JetStream) (jetstream.PubAckFuture, error) {
		return publish(pjs, &nats.Msg{Subject: rawSubject, Data: payload,
			Header: nats.Header{benchIDHeader: []string{streams.NewRequestID()}}})
	}
	// The floor of any deduplicated submission: the same raw publish with a
	// fresh Nats-Msg-Id, which the server checks against its duplicate window.
	msgID := func(pjs jetstream.JetStream) (jetstream.PubAckFuture, error) {
		return publish(pjs, &nats.Msg{Subject: rawSubject, Data: payload}, jetstream.WithMsgID(streams.NewRequestID()))
	}
	submit := func(pjs jetstream.JetStream) (jetstream.PubAckFuture, error) {
		m, id := submitMsg()
		return publish(pjs, m, jetstream.WithMsgID(id))
	}

	dur := harness.Pick(r, 3*time.Second, 500*time.Millisecond)
	rounds := harness.Pick(r, 3, 1)
	sum := map[string]float64{}
	var rows [][]string
	for round := range rounds {
		for _, m := range []struct {
			name string
			pub  func(jetstream.JetStream) (jetstream.PubAckFuture, error)
		}{{"raw_publish", raw}, {"header_publish", header}, {"msgid_publish", msgID}, {"submit", submit}} {
			if err := fresh(); err != nil {
				return err
			}
			rps, acked, failed, err := publishAsync(r, e, fmt.Sprintf("%s, round %d", m.name, round+1), dur, m.pub)
			if err != nil {
				return err
			}
			sum[m.name] += rps
			rows = append(rows, []string{m.name, strconv.Itoa(round + 1), fmt.Sprint(acked), fmt.Sprint(failed), harness.Cell(rps)})
			r.Logf("durable %s round %d: %d acked, %d failed, %.0f msgs/s", m.name, round+1, acked, failed, rps)
		}
	}
	rawRPS, submitRPS := sum["raw_publish"]/float64(rounds), sum["submit"]/float64(rounds)
	headerRPS, msgIDRPS := sum["header_publish"]/float64(rounds), sum["msgid_publish"]/float64(rounds)
	r.Set("raw_publish_rps", rawRPS)
	r.Set("header_publish_rps", headerRPS)
	r.Set("msgid_publish_rps", msgIDRPS)
	r.Set("submit_rps", submitRPS)
	r.Set("submit_ratio", harness.Ratio(submitRPS, rawRPS))
	r.Set("header_floor_ratio", harness.Ratio(headerRPS, rawRPS))
	r.Set("dedup_floor_ratio", harness.Ratio(msgIDRPS, rawRPS))
	r.Set("submit_vs_dedup_floor", harness.Ratio(submitRPS, msgIDRPS))
	r.Set("point_seconds", dur.Seconds())
	r.Set("rounds", float64(rounds))
	r.Set("max_pending", durableMaxPend)

	// End to end, on an empty REACH_TASKS: the same echo agents and
	// dispatcher serve the direct tier and the durable tier.
	if err := fresh(); err != nil {
		return err
	}
	echo, err := r.StartEcho(e, config.Config{}, false)
	if err != nil {
		return err
	}
	defer echo.Stop()
	e2eDur := harness.Pick(r, 5*time.Second, 500*time.Millisecond)
	callers, err := e.ConnectN("caller", 4)
	if err != nil {
		return err
	}
	taskSubject := streams.Subjects{}.Task(harness.EchoCapability)
	direct, err := r.ClosedLoop(callers, harness.ClosedSpec{Step: "durable: direct tier, 64 callers", Callers: harness.OverheadCallers,
		Dur: e2eDur, Timeout: 5 * time.Second, Build: func() *nats.Msg {
			return &nats.Msg{Subject: taskSubject, Data: payload, Header: harness.JSONHeader}
		}})
	if err != nil {
		return err
	}
	r.Logf("durable direct tier: %v", direct)
	e2e, e2eRPS, err := durableE2E(r, e, e2eDur, submitMsg)
	if err != nil {
		return err
	}
	r.Logf("durable end to end: %.0f tasks/s; %v", e2eRPS, e2e)
	r.Set("durable_e2e_available", 1)
	r.Set("direct_tier_rps", direct.RPS())
	r.Set("durable_e2e_rps", e2eRPS)
	r.Set("durable_e2e_ratio", harness.Ratio(e2eRPS, direct.RPS()))
	r.Set("durable_e2e_p50_ms", harness.Millis(e2e.P(50)))
	r.Set("durable_e2e_p99_ms", harness.Millis(e2e.P(99)))
	r.Set("durable_e2e_failed", float64(e2e.Failed()))
	r.Set("durable_e2e_window", float64(e2eWindow(r)))

	r.AddTable("durable: JetStream async publish, one publisher connection, file streams, no consumer",
		[]string{"method", "round", "acked", "failed", "acked/s"}, rows)
	r.AddTable("durable: summary", []string{"figure", "value"}, [][]string{
		{"raw_publish_rps (mean)", harness.Cell(rawRPS)},
		{"header_publish_rps (mean)", harness.Cell(headerRPS)},
		{"msgid_publish_rps (mean)", harness.Cell(msgIDRPS)},
		{"submit_rps (mean)", harness.Cell(submitRPS)},
		{"submit_ratio", harness.Cell(r.Rep.Figures["submit_ratio"])},
		{"header_floor_ratio (header_publish / raw_publish)", harness.Cell(r.Rep.Figures["header_floor_ratio"])},
		{"dedup_floor_ratio (msgid_publish / raw_publish)", harness.Cell(r.Rep.Figures["dedup_floor_ratio"])},
		{"submit_vs_dedup_floor (submit / msgid_publish)", harness.Cell(r.Rep.Figures["submit_vs_dedup_floor"])},
		{"direct_tier_rps (64 callers, reach.task)", harness.Cell(direct.RPS())},
		{"durable_e2e_rps (submit → result)", harness.Cell(e2eRPS)},
		{"durable_e2e_ratio", harness.Cell(r.Rep.Figures["durable_e2e_ratio"])},
		{"durable_e2e p50 / p99 ms", harness.Cell(harness.Millis(e2e.P(50))) + " / " + harness.Cell(harness.Millis(e2e.P(99)))},
		{"durable_e2e_failed", fmt.Sprint(e2e.Failed())},
	})
	r.Note("raw_publish: js.PublishAsync of the payload to a plain limits stream. submit: the same payload to %s "+
		"(stream %s: work-queue retention, 2 min duplicate window, per-capability bound checked) with Content-Type, "+
		"Reach-Request-Id and Nats-Msg-Id set to a fresh UUID v4, as agentkit.Client.Submit does, but asynchronously. "+
		"At most %d publishes are unacknowledged; throughput counts acknowledged messages, %v per run, each run on "+
		"freshly created streams, rounds alternating, the mean reported. No consumer runs, so the bound is raised "+
		"for these runs. header_publish: the raw publish with one header of Nats-Msg-Id's size (%s: a fresh UUID), "+
		"which the server stores but does not deduplicate by: the floor of any submission that carries its request "+
		"id. msgid_publish: the raw publish with a fresh Nats-Msg-Id (the stream's default 2 min duplicate window): "+
		"the floor of any submission the server deduplicates, as docs/protocol.md has REACH_TASKS do.",
		submitSubject, streams.StreamTasks, durableMaxPend, dur, benchIDHeader)
	r.Note("End to end: %d echo agents behind one dispatcher (default config, so its durable consumer runs). "+
		"direct_tier_rps is %d callers' closed-loop requests on %s; durable_e2e_rps is tasks submitted to %s "+
		"(at most %d unfinished at a time) whose result reached reach.result.<id> (REACH_RESULTS), per second, "+
		"%v each. Durable latency is submit to result under that window, so mostly queueing.",
		harness.OverheadAgents, harness.OverheadCallers, taskSubject, submitSubject, e2eWindow(r), e2eDur)
	r.Goal("durable_submit_ratio", fmt.Sprintf("submission ≥ 0.8 × raw async publish: %.2f (one header alone: %.2f; deduplication: %.2f)",
		r.Rep.Figures["submit_ratio"], r.Rep.Figures["header_floor_ratio"], r.Rep.Figures["dedup_floor_ratio"]), r.Rep.Figures["submit_ratio"] >= 0.8)
	return nil
}

// publishAsync publishes with pub for dur on a fresh connection, keeping at
// most durableMaxPend acknowledgements outstanding, and returns the rate of
// acknowledged messages.
func publishAsync(r *harness.Run, e *harness.Env, step string, dur time.Duration, pub func(jetstream.JetStream) (jetstream.PubAckFuture, error)) (float64, int64, int64, error) {
	var acked, failed atomic.Int64
	pjs, nc, err := e.JS("publisher-"+step,
		jetstream.WithPublishAsyncMaxPending(durableMaxPend),
		jetstream.WithPublishAsyncAckHandler(func(jetstream.JetStream, *nats.Msg, *jetstream.PubAck) { acked.Add(1) }),
		jetstream.WithPublishAsyncErrHandler(func(jetstream.JetStream, *nats.Msg, error) { failed.Add(1) }))
	if err != nil {
		return 0, 0, 0, err
	}
	defer nc.Close()
	r.Prog.Begin("durable "+step, func() string { return fmt.Sprintf("%d acked", acked.Load()) })
	start := time.Now()
	end := start.Add(dur)
	for time.Now().Before(end) && r.Ctx.Err() == nil {
		if _, err := pub(pjs); err != nil {
			failed.Add(1)
		}
	}
	select {
	case <-pjs.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
	case <-r.Ctx.Done():
		return 0, 0, 0, r.Ctx.Err()
	}
	elapsed := time.Since(start)
	return float64(acked.Load()) / elapsed.Seconds(), acked.Load(), failed.Load(), nil
}

// durableE2E submits durable tasks for dur, keeping at most e2eWindow
// unfinished, and times each from its submission until its result is
// published on reach.result.<id>. Tasks without a result within 10 s of
// the end count as timeouts.
func durableE2E(r *harness.Run, e *harness.Env, dur time.Duration, submitMsg func() (*nats.Msg, string)) (*harness.Latency, float64, error) {
	res := harness.NewLatency()
	var mu sync.Mutex
	sent := map[string]time.Time{}
	var finished atomic.Int64
	var lastAt time.Time // when the latest result arrived; under mu
	nc, err := e.Connect("durable-results")
	if err != nil {
		return nil, 0, err
	}
	defer nc.Close()
	sub, err := nc.Subscribe(streams.Subjects{}.ResultWildcard(), func(m *nats.Msg) {
		id := m.Header.Get(streams.HeaderRequestID)
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		t0, ok := sent[id]
		if !ok {
			return
		}
		delete(sent, id)
		if harness.IsFailure(m) {
			res.Errors++
			res.Codes[harness.ErrorCode(m)]++
		} else {
			res.OK++
		}
		_ = res.Hist.RecordValue(max(now.Sub(t0).Microseconds(), 1))
		lastAt = now
		finished.Add(1)
	})
	if err != nil {
		return nil, 0, err
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return nil, 0, err
	}
	if err := nc.Flush(); err != nil {
		return nil, 0, err
	}
	var submitted atomic.Int64
	pjs, pnc, err := e.JS("durable-submitter", jetstream.WithPublishAsyncMaxPending(durableMaxPend),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, m *nats.Msg, err error) {
			mu.Lock()
			if _, ok := sent[m.Header.Get(streams.HeaderRequestID)]; ok {
				delete(sent, m.Header.Get(streams.HeaderRequestID))
				res.Errors++
				res.Codes["submit: "+err.Error()]++
				finished.Add(1)
			}
			mu.Unlock()
		}))
	if err != nil {
		return nil, 0, err
	}
	defer pnc.Close()
	r.Prog.Begin("durable: end to end", func() string {
		return fmt.Sprintf("%d submitted, %d finished", submitted.Load(), finished.Load())
	})
	window := int64(e2eWindow(r))
	start := time.Now()
	end := start.Add(dur)
	for time.Now().Before(end) && r.Ctx.Err() == nil {
		if submitted.Load()-finished.Load() >= window {
			time.Sleep(100 * time.Microsecond)
			continue
		}
		m, id := submitMsg()
		mu.Lock()
		sent[id] = time.Now()
		mu.Unlock()
		if _, err := pjs.PublishMsgAsync(m, jetstream.WithMsgID(id), jetstream.WithStallWait(10*time.Second)); err != nil {
			mu.Lock()
			delete(sent, id)
			res.Errors++
			res.Codes["submit: "+err.Error()]++
			finished.Add(1)
			mu.Unlock()
		}
		submitted.Add(1)
	}
	// Wait for the stragglers' results, so that the latencies are complete.
	r.Poll(10*time.Second, func() bool { return finished.Load() >= submitted.Load() })
	mu.Lock()
	defer mu.Unlock()
	// The rate is every completed task over the time until the last result:
	// with a short run (quick mode) the pipeline may not have filled yet
	// when submission stops.
	res.Elapsed = time.Since(start)
	if !lastAt.IsZero() {
		res.Elapsed = lastAt.Sub(start)
	}
	for range sent {
		res.Timeouts++
		_ = res.Hist.RecordValue((10 * time.Second).Microseconds())
	}
	clear(sent)
	return res, float64(res.OK) / res.Elapsed.Seconds(), r.Ctx.Err()
}
