package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/streams"
)

const (
	rawStream      = "BENCH_RAW"
	rawSubject     = "bench.raw.echo"
	durableMaxPend = 1024
)

// runDurable compares raw JetStream async publishing to a plain stream with
// durable-tier submission: reach.submit.<cap>, captured by REACH_TASKS,
// with a request id as Nats-Msg-Id for deduplication. Both streams are file
// streams, as in production.
func runDurable(r *run) error {
	topo := streams.Topology{Memory: false}
	e, err := startEnv(r.ctx, topo)
	if err != nil {
		return err
	}
	defer e.close()
	js, _, err := e.js("durable-admin")
	if err != nil {
		return err
	}
	// fresh empties both streams (and REACH_TASKS's duplicate window), so
	// that every run starts from the same state.
	fresh := func() error {
		ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
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
	submitSubject := streams.Subjects{}.Submit(echoCapability)
	raw := func(pjs jetstream.JetStream) (jetstream.PubAckFuture, error) {
		return pjs.PublishAsync(rawSubject, payload, jetstream.WithStallWait(10*time.Second))
	}
	submit := func(pjs jetstream.JetStream) (jetstream.PubAckFuture, error) {
		id := uuid.NewString()
		m := &nats.Msg{Subject: submitSubject, Data: payload, Header: nats.Header{
			streams.HeaderContentType: []string{streams.ContentTypeJSON},
			streams.HeaderRequestID:   []string{id},
		}}
		return pjs.PublishMsgAsync(m, jetstream.WithMsgID(id), jetstream.WithStallWait(10*time.Second))
	}

	dur := pick(r, 3*time.Second, 500*time.Millisecond)
	rounds := pick(r, 3, 1)
	sum := map[string]float64{}
	var rows [][]string
	for round := range rounds {
		for _, m := range []struct {
			name string
			pub  func(jetstream.JetStream) (jetstream.PubAckFuture, error)
		}{{"raw_publish", raw}, {"submit", submit}} {
			if err := fresh(); err != nil {
				return err
			}
			rps, acked, failed, err := r.publishAsync(e, fmt.Sprintf("%s, round %d", m.name, round+1), dur, m.pub)
			if err != nil {
				return err
			}
			sum[m.name] += rps
			rows = append(rows, []string{m.name, strconv.Itoa(round + 1), fmt.Sprint(acked), fmt.Sprint(failed), f(rps)})
			r.logf("durable %s round %d: %d acked, %d failed, %.0f msgs/s", m.name, round+1, acked, failed, rps)
		}
	}
	rawRPS, submitRPS := sum["raw_publish"]/float64(rounds), sum["submit"]/float64(rounds)
	r.set("raw_publish_rps", rawRPS)
	r.set("submit_rps", submitRPS)
	r.set("submit_ratio", ratio(submitRPS, rawRPS))
	r.set("durable_e2e_available", 0)
	r.set("point_seconds", dur.Seconds())
	r.set("rounds", float64(rounds))
	r.set("max_pending", durableMaxPend)

	r.addTable("durable: JetStream async publish, one publisher connection, file streams",
		[]string{"method", "round", "acked", "failed", "acked/s"}, rows)
	r.addTable("durable: summary", []string{"figure", "value"}, [][]string{
		{"raw_publish_rps (mean)", f(rawRPS)},
		{"submit_rps (mean)", f(submitRPS)},
		{"submit_ratio", f(r.rep.Figures["submit_ratio"])},
		{"durable end-to-end tasks/s", "not available yet"},
	})
	r.note("raw_publish: js.PublishAsync of the payload to a plain limits stream. submit: the same payload to %s "+
		"(stream %s, work-queue retention, 2 min duplicate window) with Content-Type, Reach-Request-Id and "+
		"Nats-Msg-Id set to a fresh UUID v4, as a real submission does. At most %d publishes are unacknowledged; "+
		"throughput counts acknowledged messages, %v per run, each run on freshly created streams, rounds "+
		"alternating, the mean reported.",
		submitSubject, streams.StreamTasks, durableMaxPend, dur)
	r.note("End-to-end durable tasks/s (submit → dispatcher's durable consumer → agent → REACH_RESULTS) is not " +
		"available yet: no durable consumer exists in the dispatcher. durable_e2e_available is 0 until it does.")
	r.goal("durable_submit_ratio", fmt.Sprintf("submission ≥ 0.8 × raw async publish: %.2f", r.rep.Figures["submit_ratio"]),
		r.rep.Figures["submit_ratio"] >= 0.8)
	return nil
}

// publishAsync publishes with pub for dur on a fresh connection, keeping at
// most durableMaxPend acknowledgements outstanding, and returns the rate of
// acknowledged messages.
func (r *run) publishAsync(e *env, step string, dur time.Duration, pub func(jetstream.JetStream) (jetstream.PubAckFuture, error)) (float64, int64, int64, error) {
	var acked, failed atomic.Int64
	pjs, nc, err := e.js("publisher-"+step,
		jetstream.WithPublishAsyncMaxPending(durableMaxPend),
		jetstream.WithPublishAsyncAckHandler(func(jetstream.JetStream, *nats.Msg, *jetstream.PubAck) { acked.Add(1) }),
		jetstream.WithPublishAsyncErrHandler(func(jetstream.JetStream, *nats.Msg, error) { failed.Add(1) }))
	if err != nil {
		return 0, 0, 0, err
	}
	defer nc.Close()
	r.prog.begin("durable "+step, func() string { return fmt.Sprintf("%d acked", acked.Load()) })
	start := time.Now()
	end := start.Add(dur)
	for time.Now().Before(end) && r.ctx.Err() == nil {
		if _, err := pub(pjs); err != nil {
			failed.Add(1)
		}
	}
	select {
	case <-pjs.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
	case <-r.ctx.Done():
		return 0, 0, 0, r.ctx.Err()
	}
	elapsed := time.Since(start)
	return float64(acked.Load()) / elapsed.Seconds(), acked.Load(), failed.Load(), nil
}
