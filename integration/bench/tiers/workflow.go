package tiers

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/workflow"
	"github.com/agent-reach/agentreach/dispatcher/workflow/spec"
	"github.com/agent-reach/agentreach/integration/bench/harness"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

// benchFlow is the workflow the scenario runs: three sequential steps of
// the same echo work a routed call does, each step's input built from the
// previous step's result.
const benchFlow = `
name: bench.flow
steps:
  - {name: a, call: echo, input: {order: $input.order, step: a}}
  - {name: b, call: echo, input: {order: $steps.a.result.order, step: b}}
  - {name: c, call: echo, input: {order: $steps.b.result.order, step: c}}
output: {order: $steps.c.result.order}
`

// runWorkflow measures declarative workflows against what they are made
// of. Direct tier: a 3-step sequential workflow (three routed calls in
// the dispatcher, references resolved between them) against one routed
// call of the same echo work, one caller in a closed loop, rounds
// alternating. Durable tier: 3-step runs submitted to reach.submit.<flow>
// (each step recorded in REACH_RUNS before it is sent) against durable
// single tasks, submission to result. One dispatcher with the workflow
// engine, echo agents, file streams.
func Workflow(r *harness.Run) error {
	e, err := harness.StartEnv(r.Ctx, streams.Topology{}, false)
	if err != nil {
		return err
	}
	defer e.Close()
	agents, err := r.StartAgents(e, []string{harness.EchoCapability}, "echo", harness.OverheadAgents, 1024, func(int) agentkit.Handler {
		return func(_ context.Context, req *agentkit.Request) (any, error) { return req.Data, nil }
	})
	if err != nil {
		return err
	}
	defer agents.Stop()
	ds, eng, err := startWorkflowDispatcher(r, e)
	if err != nil {
		return err
	}
	defer func() {
		ds.Stop()
		_ = eng.Close()
	}()
	if err := r.WaitRoutable(ds, harness.EchoCapability, harness.OverheadAgents); err != nil {
		return err
	}
	def, err := putFlow(r, e, eng)
	if err != nil {
		return err
	}
	callers, err := e.ConnectN("caller", 1)
	if err != nil {
		return err
	}

	payload := []byte(`{"order":"A-1042","items":3,"note":"workflow benchmark"}`)
	build := func(name string) func() *nats.Msg {
		subject := streams.Subjects{}.Task(name)
		return func() *nats.Msg { return &nats.Msg{Subject: subject, Data: payload, Header: harness.JSONHeader} }
	}
	dur := harness.Pick(r, 3*time.Second, 500*time.Millisecond)
	rounds := harness.Pick(r, 3, 1)
	single, flow := harness.NewLatency(), harness.NewLatency()
	var rows [][]string
	for round := range rounds {
		for _, m := range []struct {
			name, subject string
			into          *harness.Latency
		}{{"routed_call", harness.EchoCapability, single}, {"workflow_3_steps", def.Name, flow}} {
			l, err := r.ClosedLoop(callers, harness.ClosedSpec{Step: fmt.Sprintf("workflow: %s, round %d", m.name, round+1),
				Callers: 1, Dur: dur, Timeout: 5 * time.Second, Build: build(m.subject)})
			if err != nil {
				return err
			}
			m.into.Add(l)
			rows = append(rows, []string{m.name, strconv.Itoa(round + 1), fmt.Sprint(l.OK), fmt.Sprint(l.Failed()),
				harness.MicrosCell(l.P(50)), harness.MicrosCell(l.P(99))})
			r.Logf("workflow %s round %d: %v", m.name, round+1, l)
		}
	}
	r.Set("routed_p50_us", harness.Micros(single.P(50)))
	r.Set("workflow_p50_us", harness.Micros(flow.P(50)))
	r.Set("workflow_p99_us", harness.Micros(flow.P(99)))
	r.Set("workflow_p50_ratio", harness.Ratio(harness.Micros(flow.P(50)), harness.Micros(single.P(50))))
	r.Set("workflow_failed", float64(flow.Failed()))

	// Durable: the same work through REACH_TASKS, single tasks then runs.
	e2eDur := harness.Pick(r, 5*time.Second, 500*time.Millisecond)
	submitTo := func(name string) func() (*nats.Msg, string) {
		subject := streams.Subjects{}.Submit(name)
		return func() (*nats.Msg, string) {
			id := streams.NewRequestID()
			return &nats.Msg{Subject: subject, Data: payload, Header: nats.Header{
				streams.HeaderContentType: []string{streams.ContentTypeJSON},
				streams.HeaderRequestID:   []string{id},
			}}, id
		}
	}
	tasks, taskRPS, err := durableE2E(r, e, e2eDur, submitTo(harness.EchoCapability))
	if err != nil {
		return err
	}
	r.Logf("workflow durable single tasks: %.0f/s; %v", taskRPS, tasks)
	runs, runRPS, err := durableE2E(r, e, e2eDur, submitTo(def.Name))
	if err != nil {
		return err
	}
	r.Logf("workflow durable runs: %.0f/s; %v", runRPS, runs)
	r.Set("durable_task_rps", taskRPS)
	r.Set("durable_run_rps", runRPS)
	r.Set("durable_run_ratio", harness.Ratio(runRPS, taskRPS))
	r.Set("durable_run_p50_ms", harness.Millis(runs.P(50)))
	r.Set("durable_run_failed", float64(runs.Failed()))
	r.Set("durable_task_failed", float64(tasks.Failed()))

	r.AddTable("workflow: direct tier, 1 caller, closed loop", []string{"method", "round", "answered", "failed", "p50 µs", "p99 µs"}, rows)
	r.AddTable("workflow: summary", []string{"figure", "value"}, [][]string{
		{"routed_p50_us (one routed call)", harness.Cell(harness.Micros(single.P(50)))},
		{"workflow_p50_us (3 sequential steps)", harness.Cell(harness.Micros(flow.P(50)))},
		{"workflow_p50_ratio", harness.Cell(r.Rep.Figures["workflow_p50_ratio"])},
		{"durable_task_rps (submit → result)", harness.Cell(taskRPS)},
		{"durable_run_rps (3-step runs, submit → result)", harness.Cell(runRPS)},
		{"durable_run_ratio", harness.Cell(r.Rep.Figures["durable_run_ratio"])},
		{"durable runs p50 ms (mostly queueing)", harness.Cell(harness.Millis(runs.P(50)))},
		{"failed: workflow / durable tasks / durable runs", fmt.Sprintf("%d / %d / %d", flow.Failed(), tasks.Failed(), runs.Failed())},
	})
	r.Note("Direct tier: one caller in a closed loop on reach.task.%s (one routed call to %d echo agents) and on reach.task.%s, "+
		"a workflow of three sequential steps calling the same capability, each step's input mapped from the previous result; "+
		"%v per method per round, %d rounds alternating, histograms merged. Each step is a task relayed through the "+
		"dispatcher (no direct reply: the run needs the result); a direct-tier run's steps carry no idempotency key of "+
		"their own, and it writes no %s record (the engine's defaults).", harness.EchoCapability, harness.OverheadAgents, def.Name, dur, rounds, streams.BucketRuns)
	r.Note("Durable tier: tasks submitted to reach.submit.%s and runs to reach.submit.%s (at most %d unfinished at a time), "+
		"counted when their result reached reach.result.<id> (REACH_RESULTS), %v each. A run writes its REACH_RUNS record "+
		"when it starts, before each later step and when it ends (four writes for three steps), then its result.",
		harness.EchoCapability, def.Name, e2eWindow(r), e2eDur)
	r.Goal("workflow_p50_ratio", fmt.Sprintf("3-step workflow p50 ≤ 3.5 × one routed call's p50: %.2f", r.Rep.Figures["workflow_p50_ratio"]),
		r.Rep.Figures["workflow_p50_ratio"] <= 3.5)
	r.Goal("durable_run_ratio", fmt.Sprintf("durable 3-step runs/s ≥ 0.25 × durable single tasks/s: %.2f", r.Rep.Figures["durable_run_ratio"]),
		r.Rep.Figures["durable_run_ratio"] >= 0.25)
	return nil
}

// startWorkflowDispatcher starts a dispatcher with the workflow engine as
// its resolver, on a connection of its own, its goroutines labelled.
func startWorkflowDispatcher(r *harness.Run, e *harness.Env) (ds *harness.Dispatch, eng *workflow.Engine, err error) {
	harness.Labelled(r.Ctx, harness.CompDispatch, func(ctx context.Context) {
		var nc *nats.Conn
		if nc, err = e.Connect("dispatcher"); err != nil {
			return
		}
		if eng, err = workflow.New(nc, workflow.Config{}); err != nil {
			return
		}
		var d *dispatcher.Dispatcher
		if d, err = dispatcher.New(nc, config.Config{}, dispatcher.WithResolver(eng)); err != nil {
			return
		}
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err = eng.Start(sctx, d); err == nil {
			err = d.Start(sctx)
		}
		if err != nil {
			_ = eng.Close()
			return
		}
		ds = &harness.Dispatch{D: d, NC: nc}
	})
	if err != nil {
		return nil, nil, fmt.Errorf("dispatcher with workflows: %w", err)
	}
	return ds, eng, nil
}

// putFlow stores benchFlow in REACH_POLICY and waits until the engine has
// it in force.
func putFlow(r *harness.Run, e *harness.Env, eng *workflow.Engine) (*spec.Definition, error) {
	def, err := spec.Parse([]byte(benchFlow))
	if err != nil {
		return nil, err
	}
	js, nc, err := e.JS("workflow-admin")
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(r.Ctx, 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, streams.BucketPolicy)
	if err != nil {
		return nil, err
	}
	rev, err := registry.PutPolicy(ctx, kv, spec.PolicyPrefix+def.Name, []byte(benchFlow))
	if err != nil {
		return nil, err
	}
	if !r.Poll(10*time.Second, func() bool { _, have, ok := eng.Definition(def.Name); return ok && have == rev }) {
		return nil, fmt.Errorf("workflow %s not in force after 10s", def.Name)
	}
	return def, nil
}
