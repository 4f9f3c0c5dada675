package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/gateway"
	"github.com/agent-reach/agentreach/dispatcher/metrics"
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
func runHTTP(r *run) error {
	payload := []byte(`{"text":"hello, agent"}`)
	jsonHdr := nats.Header{streams.HeaderContentType: []string{streams.ContentTypeJSON}}
	routed := streams.Subjects{}.Task(echoCapability)
	build := func() *nats.Msg { return &nats.Msg{Subject: routed, Data: payload, Header: jsonHdr} }

	// One stack for every round: echo agents, a dispatcher whose Observer
	// (the metrics) and tracing are switched on for the observed rounds
	// only, and the gateway beside it; so every round runs on the same
	// server, dispatcher, agents and connections.
	e, err := startEnv(r.ctx, streams.Topology{Memory: true}, false)
	if err != nil {
		return err
	}
	defer e.close()
	agents, err := r.startAgents(e, []string{echoCapability}, "echo", overheadAgents, 1024, echoHandler)
	if err != nil {
		return err
	}
	defer agents.stop()
	m, err := metrics.New(metrics.Config{})
	if err != nil {
		return err
	}
	observer := &switchObserver{m: m}
	ds, err := r.startObservedDispatcher(e, observer, m)
	if err != nil {
		return err
	}
	defer ds.stop()
	gw, err := gateway.New(ds.nc, ds.d, gateway.Config{})
	if err == nil {
		err = gw.Listen("127.0.0.1:0")
	}
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	defer func() { _ = gw.Shutdown(context.Background()) }()
	gwAddr, callPath := gw.Addr().String(), "/v1/call/"+echoCapability
	callers, err := e.connectN("caller", 4)
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

	dur := pick(r, 4*time.Second, 400*time.Millisecond)
	const timeout = 2 * time.Second
	natsLoop := func(step string) (*latency, error) {
		return r.closedLoop(callers, closedSpec{step: step, callers: httpCallers, dur: dur, timeout: timeout, build: build})
	}
	onLoop := func(step string, traced *sdktrace.TracerProvider) (*latency, error) {
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
			_, err := r.httpLoop(gwAddr, callPath, payload, "warm-up http", dur/2, timeout)
			return err
		},
		func() error { _, err := onLoop("warm-up observed", tp); return err },
	} {
		if err := warm(); err != nil {
			return err
		}
	}
	collector.spans.Store(0)

	rounds := pick(r, httpRounds, 1)
	natsRes, httpRes, offRes, onRes, metricsRes, sampledRes := newLatency(), newLatency(), newLatency(), newLatency(), newLatency(), newLatency()
	var onTasks int64
	for round := range rounds {
		of := fmt.Sprintf("round %d of %d", round+1, rounds)
		l, err := natsLoop("nats, " + of)
		if err != nil {
			return err
		}
		natsRes.add(l)
		offRes.add(l)
		if l, err = r.httpLoop(gwAddr, callPath, payload, "http, "+of, dur, timeout); err != nil {
			return err
		}
		httpRes.add(l)
		if l, err = onLoop("metrics and tracing on, "+of, tp); err != nil {
			return err
		}
		onRes.add(l)
		onTasks += l.ok
		if l, err = onLoop("metrics on, "+of, nil); err != nil {
			return err
		}
		metricsRes.add(l)
		if l, err = onLoop("metrics and tracing, 10 % sampled, "+of, sampled); err != nil {
			return err
		}
		sampledRes.add(l)
	}
	_ = tp.ForceFlush(context.Background())

	httpRatio := ratio(httpRes.rps(), natsRes.rps())
	obsRatio := ratio(onRes.rps(), offRes.rps())
	r.set("nats_rps", natsRes.rps())
	r.set("http_rps", httpRes.rps())
	r.set("http_throughput_ratio", httpRatio)
	r.set("nats_p50_ms", ms(natsRes.p(50)))
	r.set("http_p50_ms", ms(httpRes.p(50)))
	r.set("http_p99_ms", ms(httpRes.p(99)))
	r.set("http_failed", float64(httpRes.failed()))
	r.set("observability_off_rps", offRes.rps())
	r.set("observability_on_rps", onRes.rps())
	r.set("observability_throughput_ratio", obsRatio)
	// CPU per task (this process: server, dispatcher, agents and callers):
	// less disturbed than throughput when other processes take the cores.
	perTask := func(l *latency) float64 { return ratio(usf(l.cpu), float64(l.ok)) }
	r.set("nats_cpu_us_per_task", perTask(natsRes))
	r.set("http_cpu_us_per_task", perTask(httpRes))
	r.set("observability_on_cpu_us_per_task", perTask(onRes))
	r.set("metrics_only_cpu_us_per_task", perTask(metricsRes))
	r.set("metrics_only_rps", metricsRes.rps())
	r.set("observability_sampled_rps", sampledRes.rps())
	r.set("observability_sampled_throughput_ratio", ratio(sampledRes.rps(), offRes.rps()))
	r.set("observability_sampled_cpu_us_per_task", perTask(sampledRes))
	r.set("metrics_only_throughput_ratio", ratio(metricsRes.rps(), offRes.rps()))
	r.set("observability_spans_per_task", ratio(float64(collector.spans.Load()), float64(onTasks)))
	r.addTable(fmt.Sprintf("HTTP gateway and observability, %d callers, %d rounds of %v", httpCallers, rounds, dur),
		[]string{"path", "rps", "p50 ms", "p99 ms", "failed", "cpu µs/task"}, [][]string{
			{"NATS reach.task.echo", f(natsRes.rps()), f(ms(natsRes.p(50))), f(ms(natsRes.p(99))), fmt.Sprint(natsRes.failed()), f(perTask(natsRes))},
			{"HTTP POST /v1/call/echo", f(httpRes.rps()), f(ms(httpRes.p(50))), f(ms(httpRes.p(99))), fmt.Sprint(httpRes.failed()), f(perTask(httpRes))},
			{"NATS, metrics + tracing on", f(onRes.rps()), f(ms(onRes.p(50))), f(ms(onRes.p(99))), fmt.Sprint(onRes.failed()), f(perTask(onRes))},
			{"NATS, metrics on", f(metricsRes.rps()), f(ms(metricsRes.p(50))), f(ms(metricsRes.p(99))), fmt.Sprint(metricsRes.failed()), f(perTask(metricsRes))},
			{"NATS, metrics + tracing 10 % sampled", f(sampledRes.rps()), f(ms(sampledRes.p(50))), f(ms(sampledRes.p(99))), fmt.Sprint(sampledRes.failed()), f(perTask(sampledRes))},
		})
	r.note("The HTTP calls go through the gateway beside the same dispatcher and agents as the NATS requests, " +
		"on keep-alive connections, one per caller, from a minimal HTTP/1.1 client (as wrk is: the gateway is measured, " +
		"not Go's HTTP client); rounds alternate so a slow stretch of the machine hits both.")
	r.note("Observability on: the dispatcher's Prometheus Observer, /metrics scraped every second, and every span "+
		"(task, delivery, agent handler: %.1f per task) recorded and exported in batches to an in-process collector; "+
		"off: the same stack with the Observer switched off and no tracer provider installed.",
		ratio(float64(collector.spans.Load()), float64(onTasks)))
	r.goal("http_throughput", fmt.Sprintf("HTTP gateway throughput at %d callers is ≥ 0.6 of NATS (%.2f)", httpCallers, httpRatio), httpRatio >= 0.6)
	r.goal("observability_throughput", fmt.Sprintf("throughput with metrics and tracing on is ≥ 0.9 of off (%.2f)", obsRatio), obsRatio >= 0.9)
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
func (o *switchObserver) Observed(ev *dispatcher.Event) {
	if o.on.Load() {
		o.m.Observed(ev)
	}
}

// startObservedDispatcher starts a dispatcher on e with obs as its
// observer and m attached, and waits until it routes to the echo agents.
func (r *run) startObservedDispatcher(e *env, obs dispatcher.Observer, m *metrics.Metrics) (ds *dispatch, err error) {
	labelled(r.ctx, compDispatch, func(ctx context.Context) {
		var nc *nats.Conn
		if nc, err = e.connect("dispatcher-observed"); err != nil {
			return
		}
		d, derr := dispatcher.New(nc, dispatcher.Config{}, dispatcher.WithObserver(obs))
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
		js, _, _ := e.js("metrics")
		m.Attach(d, js)
		ds = &dispatch{d: d, nc: nc}
	})
	if err != nil {
		return nil, err
	}
	return ds, r.waitRoutable(ds, echoCapability, overheadAgents)
}
