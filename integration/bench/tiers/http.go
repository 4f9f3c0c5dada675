package tiers

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/events"
	"github.com/agent-reach/agentreach/dispatcher/gateway"
	"github.com/agent-reach/agentreach/dispatcher/metrics"
	"github.com/agent-reach/agentreach/integration/bench/harness"
	"github.com/agent-reach/agentreach/streams"
)

const (
	// sampledShare is the share of traces the sampled round records.
	sampledShare = 0.1
	httpCallers  = 64
	httpRounds   = 3 // rounds per comparison (1 in quick mode)
)

// runHTTP measures, at 64 concurrent callers in closed loops:
//
//   - POST /v1/call/echo with keep-alive against a NATS request on
//     reach.task.echo, through the same dispatcher and agents, in
//     alternating rounds: http_throughput_ratio, goal ≥ 0.6;
//   - the routed NATS path with the dispatcher's Prometheus metrics and
//     OpenTelemetry tracing on (spans exported in batches to an in-process
//     collector that counts them, /metrics scraped every second) against
//     both off (the metrics' Observer switched off, no tracer provider
//     installed), on the same stack: observability_throughput_ratio, goal
//     ≥ 0.9; and metrics alone, metrics_only_throughput_ratio.
func HTTP(r *harness.Run) error {
	payload := []byte(`{"text":"hello, agent"}`)
	jsonHdr := nats.Header{streams.HeaderContentType: []string{streams.ContentTypeJSON}}
	routed := streams.Subjects{}.Task(harness.EchoCapability)
	build := func() *nats.Msg { return &nats.Msg{Subject: routed, Data: payload, Header: jsonHdr} }

	// One stack for every round: echo agents, a dispatcher whose Observer
	// (the metrics) and tracing are switched on for the observed rounds
	// only, and the gateway beside it; so every round runs on the same
	// server, dispatcher, agents and connections.
	e, err := harness.StartEnv(r.Ctx, streams.Topology{Memory: true}, false)
	if err != nil {
		return err
	}
	defer e.Close()
	agents, err := r.StartAgents(e, []string{harness.EchoCapability}, "echo", harness.OverheadAgents, 1024, echoHandler)
	if err != nil {
		return err
	}
	defer agents.Stop()
	m, err := metrics.New(metrics.Config{})
	if err != nil {
		return err
	}
	observer := &switchObserver{m: m}
	ds, err := startObservedDispatcher(r, e, observer, m)
	if err != nil {
		return err
	}
	defer ds.Stop()
	gw, err := gateway.New(ds.NC, ds.D, gateway.Config{})
	if err == nil {
		err = gw.Listen("127.0.0.1:0")
	}
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	defer func() { _ = gw.Shutdown(context.Background()) }()
	gwAddr, callPath := gw.Addr().String(), "/v1/call/"+harness.EchoCapability
	callers, err := e.ConnectN("caller", 4)
	if err != nil {
		return err
	}
	collector := &countingExporter{}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(collector))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	// As production would run it on a busy system: 10 % of the traces.
	sampled := sdktrace.NewTracerProvider(sdktrace.WithBatcher(&countingExporter{}),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(sampledShare))))
	defer func() { _ = sampled.Shutdown(context.Background()) }()
	defer switchTracing(nil) // the rest of the process traces nothing again

	dur := harness.Pick(r, 4*time.Second, 400*time.Millisecond)
	const timeout = 2 * time.Second
	natsLoop := func(step string) (*harness.Latency, error) {
		return r.ClosedLoop(callers, harness.ClosedSpec{Step: step, Callers: httpCallers, Dur: dur, Timeout: timeout, Build: build})
	}
	onLoop := func(step string, traced *sdktrace.TracerProvider) (*harness.Latency, error) {
		observer.on.Store(true)
		defer observer.on.Store(false)
		if traced != nil {
			switchTracing(traced)
			defer switchTracing(nil)
		}
		stop := scrapeEverySecond(m.Handler())
		defer stop()
		return natsLoop(step)
	}
	// Warm-up of every path.
	for _, warm := range []func() error{
		func() error { _, err := natsLoop("warm-up nats"); return err },
		func() error {
			_, err := httpLoop(r, gwAddr, callPath, payload, "warm-up http", dur/2, timeout)
			return err
		},
		func() error { _, err := onLoop("warm-up observed", tp); return err },
	} {
		if err := warm(); err != nil {
			return err
		}
	}
	collector.spans.Store(0)

	rounds := harness.Pick(r, httpRounds, 1)
	natsRes, httpRes, offRes, onRes, metricsRes, sampledRes := harness.NewLatency(), harness.NewLatency(), harness.NewLatency(), harness.NewLatency(), harness.NewLatency(), harness.NewLatency()
	var onTasks int64
	for round := range rounds {
		of := fmt.Sprintf("round %d of %d", round+1, rounds)
		l, err := natsLoop("nats, " + of)
		if err != nil {
			return err
		}
		natsRes.Add(l)
		offRes.Add(l)
		if l, err = httpLoop(r, gwAddr, callPath, payload, "http, "+of, dur, timeout); err != nil {
			return err
		}
		httpRes.Add(l)
		if l, err = onLoop("metrics and tracing on, "+of, tp); err != nil {
			return err
		}
		onRes.Add(l)
		onTasks += l.OK
		if l, err = onLoop("metrics on, "+of, nil); err != nil {
			return err
		}
		metricsRes.Add(l)
		if l, err = onLoop("metrics and tracing, 10 % sampled, "+of, sampled); err != nil {
			return err
		}
		sampledRes.Add(l)
	}
	_ = tp.ForceFlush(context.Background())

	httpRatio := harness.Ratio(httpRes.RPS(), natsRes.RPS())
	obsRatio := harness.Ratio(onRes.RPS(), offRes.RPS())
	r.Set("nats_rps", natsRes.RPS())
	r.Set("http_rps", httpRes.RPS())
	r.Set("http_throughput_ratio", httpRatio)
	r.Set("nats_p50_ms", harness.Millis(natsRes.P(50)))
	r.Set("http_p50_ms", harness.Millis(httpRes.P(50)))
	r.Set("http_p99_ms", harness.Millis(httpRes.P(99)))
	r.Set("http_failed", float64(httpRes.Failed()))
	r.Set("observability_off_rps", offRes.RPS())
	r.Set("observability_on_rps", onRes.RPS())
	r.Set("observability_throughput_ratio", obsRatio)
	// CPU per task (this process: server, dispatcher, agents and callers):
	// less disturbed than throughput when other processes take the cores.
	r.Set("nats_cpu_us_per_task", cpuPerTask(natsRes))
	r.Set("http_cpu_us_per_task", cpuPerTask(httpRes))
	r.Set("observability_on_cpu_us_per_task", cpuPerTask(onRes))
	r.Set("metrics_only_cpu_us_per_task", cpuPerTask(metricsRes))
	r.Set("metrics_only_rps", metricsRes.RPS())
	r.Set("observability_sampled_rps", sampledRes.RPS())
	r.Set("observability_sampled_throughput_ratio", harness.Ratio(sampledRes.RPS(), offRes.RPS()))
	r.Set("observability_sampled_cpu_us_per_task", cpuPerTask(sampledRes))
	r.Set("metrics_only_throughput_ratio", harness.Ratio(metricsRes.RPS(), offRes.RPS()))
	r.Set("observability_spans_per_task", harness.Ratio(float64(collector.spans.Load()), float64(onTasks)))
	r.AddTable(fmt.Sprintf("HTTP gateway and observability, %d callers, %d rounds of %v", httpCallers, rounds, dur),
		[]string{"path", "rps", "p50 ms", "p99 ms", "failed", "cpu µs/task"}, [][]string{
			latencyRow("NATS reach.task.echo", natsRes),
			latencyRow("HTTP POST /v1/call/echo", httpRes),
			latencyRow("NATS, metrics + tracing on", onRes),
			latencyRow("NATS, metrics on", metricsRes),
			latencyRow("NATS, metrics + tracing 10 % sampled", sampledRes),
		})
	r.Note("The HTTP calls go through the gateway beside the same dispatcher and agents as the NATS requests, " +
		"on keep-alive connections, one per caller, from a minimal HTTP/1.1 client (as wrk is: the gateway is measured, " +
		"not Go's HTTP client); rounds alternate so a slow stretch of the machine hits both.")
	r.Note("Observability on: the dispatcher's Prometheus Observer, /metrics scraped every second, and every span "+
		"(task, delivery, agent handler: %.1f per task) recorded and exported in batches to an in-process collector; "+
		"off: the same stack with the Observer switched off and no tracer provider installed.",
		harness.Ratio(float64(collector.spans.Load()), float64(onTasks)))
	r.Goal("http_throughput", fmt.Sprintf("HTTP gateway throughput at %d callers is ≥ 0.6 of NATS (%.2f)", httpCallers, httpRatio), httpRatio >= 0.6)
	r.Goal("observability_throughput", fmt.Sprintf("throughput with metrics and tracing on is ≥ 0.9 of off (%.2f)", obsRatio), obsRatio >= 0.9)
	return nil
}

func echoHandler(int) agentkit.Handler {
	return func(_ context.Context, req *agentkit.Request) (any, error) { return req.Data, nil }
}

// switchObserver hands records to the metrics while on.
type switchObserver struct {
	on atomic.Bool
	m  *metrics.Metrics
}

// Observed counts ev when the switch is on.
func (o *switchObserver) Observed(ev *events.Event) {
	if o.on.Load() {
		o.m.Observed(ev)
	}
}

// startObservedDispatcher starts a dispatcher on e with obs as its
// observer and m attached, and waits until it routes to the echo agents.
func startObservedDispatcher(r *harness.Run, e *harness.Env, obs dispatcher.Observer, m *metrics.Metrics) (ds *harness.Dispatch, err error) {
	harness.Labelled(r.Ctx, harness.CompDispatch, func(ctx context.Context) {
		var nc *nats.Conn
		if nc, err = e.Connect("dispatcher-observed"); err != nil {
			return
		}
		d, derr := dispatcher.New(nc, config.Config{}, dispatcher.WithObserver(obs))
		if derr == nil {
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			derr = d.Start(sctx)
			cancel()
		}
		if derr != nil {
			nc.Close()
			err = fmt.Errorf("dispatcher: %w", derr)
			return
		}
		js, _, _ := e.JS("metrics")
		m.Attach(d, js)
		ds = &harness.Dispatch{D: d, NC: nc}
	})
	if err != nil {
		return nil, err
	}
	return ds, r.WaitRoutable(ds, harness.EchoCapability, harness.OverheadAgents)
}
