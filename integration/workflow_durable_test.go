package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/durable"
	"github.com/agent-reach/agentreach/dispatcher/events"
	"github.com/agent-reach/agentreach/dispatcher/workflow"
	"github.com/agent-reach/agentreach/dispatcher/workflow/spec"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// Durable workflow runs (reach.submit.<workflow>): recorded in REACH_RUNS
// step by step, ended in exactly one outcome, resumed after a crash.

func TestADurableRunRecordsEachStepAndItsOutcome(t *testing.T) {
	st, _, fx, nc := seqWorkflowStack(t)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := st.Client().SubmitAndWait(ctx, "wf.seq", map[string]int{"order": 5})
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]string
	if err := res.Decode(&out); err != nil || out["tracking"] != "T-R-5-H-5" || res.Header.Get(streams.HeaderRunID) != res.RequestID {
		t.Fatalf("result %v (%v), headers %v", out, err, res.Header)
	}
	r := runRecord(t, nc, res.RequestID)
	if r.Tier != "durable" || r.Outcome != events.OutcomeResult || r.Status != workflow.RunFinished || r.Owner != "" || r.Resumes != 0 {
		t.Fatalf("run record %+v", r)
	}
	// A durable run's step carries the key <run-id>.<step>.
	for _, sr := range r.Steps {
		key := res.RequestID + "." + sr.Name
		if sr.Status != workflow.StepDone || sr.Sends != 1 || fx.count(key) != 1 || fx.header(key).Get(streams.HeaderParentID) != res.RequestID {
			t.Errorf("step %+v executed %d times with key %s", sr, fx.count(key), key)
		}
	}
}

func TestADurableRunWaitsForAnAgentAndContinuesWhereItStopped(t *testing.T) {
	st := NewStack(t, time.Second)
	d, e := st.WorkflowDispatcher(config.Config{})
	fx := newEffects()
	all := seqSteps()
	first := map[string]stepFunc{"seq.reserve": all["seq.reserve"], "seq.charge": all["seq.charge"]}
	stepAgent(t, st.Conn(), "seq-1", fx, first)
	WaitRoutable(t, "seq.charge", 1, d)
	nc := st.Conn()
	PutWorkflow(t, nc, seqWorkflow, e)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := st.Client()
	id, err := c.Submit(ctx, "wf.seq", map[string]int{"order": 6})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := jsOf(t, nc).KeyValue(ctx, streams.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	// Nothing ships: the run waits at its third step, the first two done.
	natstest.WaitFor(t, 10*time.Second, func() error {
		r, err := workflow.GetRun(ctx, kv, id)
		if err != nil {
			return err
		}
		if r.Status != workflow.RunWaiting || r.Steps[2].Status != workflow.StepPending || !slices.Contains(decisions(r), "ship:wait") {
			return fmt.Errorf("run %s, steps %s/%s/%s, decisions %v", r.Status, r.Steps[0].Status, r.Steps[1].Status, r.Steps[2].Status, decisions(r))
		}
		return nil
	})
	stepAgent(t, st.Conn(), "seq-2", fx, map[string]stepFunc{"seq.ship": all["seq.ship"]})
	res, err := c.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(res.Data), "T-R-6-H-6") {
		t.Fatalf("result %s", res.Data)
	}
	for _, step := range []string{"reserve", "charge", "ship"} {
		if n := fx.count(id + "." + step); n != 1 {
			t.Errorf("step %s executed %d times", step, n)
		}
	}
	r := runRecord(t, nc, id)
	if r.Steps[0].Sends != 1 || r.Steps[1].Sends != 1 || r.Steps[2].Sends < 2 {
		t.Errorf("sends %d/%d/%d: the done steps must not be sent again", r.Steps[0].Sends, r.Steps[1].Sends, r.Steps[2].Sends)
	}
}

const crashWorkflow = `
name: wf.crash
steps:
  - {name: a, call: crash.a, input: {n: $input.n}}
  - {name: b, call: crash.b, input: {n: $steps.a.result.n}}
  - {name: c, call: crash.c, input: {n: $steps.b.result.n}}
output: $steps.c.result.n
`

// The dispatcher runs as a child process with the workflow engine, and is
// killed with SIGKILL twice during 500 durable runs of a 3-step workflow:
// every run ends in exactly one recorded outcome, and the idempotent
// agents see each step's side effect once.
func TestDurableWorkflowsSurviveDispatcherKills(t *testing.T) {
	const runs = 500
	st := NewStack(t, time.Second)
	fx := newEffects()
	plus := func(in map[string]any) (any, *streams.Error) {
		n, _ := in["n"].(float64)
		return map[string]any{"n": n + 1}, nil
	}
	for i := range 2 {
		stepAgent(t, st.Conn(), fmt.Sprintf("crash-%d", i), fx, map[string]stepFunc{"crash.a": plus, "crash.b": plus, "crash.c": plus})
	}
	nc := st.Conn()
	PutWorkflow(t, nc, crashWorkflow)
	cfg := &config.Config{DurableAckWait: 2 * time.Second, Name: "child"}
	url := st.Server.ClientURL()
	child := StartChild(t, ChildWorkflows, url, "", 0, cfg)
	js := jsOf(t, nc)
	l := NewLedger(t, nc)
	c := st.Client()
	// Each kill lands while a run is surely in flight: the next step b
	// executed goes unanswered, so its run, step a recorded, waits on the
	// dispatcher about to die (killing at a count of completed runs alone
	// could fall between runs on a fast machine, and nothing would be
	// resumed). The first kill comes at the first run's step b, the second
	// once half the runs are done (or after the last, if they all finish
	// before a step b goes unanswered).
	silentB := func() {
		fx.mu.Lock()
		fx.silentOnce["crash.b"] = true
		fx.mu.Unlock()
	}
	silentB()
	submitted := make(chan struct{})
	go func() {
		defer close(submitted)
		for i := range runs {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := l.Submit(ctx, c, "wf.crash", map[string]int{"n": i}); err != nil {
				t.Errorf("submit %d: %v", i, err)
			}
			cancel()
		}
	}()
	for kill, at := range []uint64{0, runs / 2} {
		if kill > 0 { // the second amid the stream of runs, once half are done
			waitCompleted(t, js, at, 60*time.Second)
			silentB()
		}
		natstest.WaitFor(t, 60*time.Second, func() error {
			fx.mu.Lock()
			defer fx.mu.Unlock()
			if fx.silentOnce["crash.b"] && completed(t, js) < runs {
				return errors.New("no step b has gone unanswered yet")
			}
			return nil
		})
		if err := child.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = child.Wait()
		t.Logf("kill %d: dispatcher killed with %d runs completed", kill+1, completed(t, js))
		child = StartChild(t, ChildWorkflows, url, "", 0, cfg)
	}
	<-submitted
	settle(t, l, js, 120*time.Second)
	l.Check(t, js)

	// Every step of every run executed exactly once; and the runs the kills
	// interrupted were resumed, not restarted.
	o, err := ReadOutcomes(context.Background(), js)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(context.Background(), streams.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	records, _, err := workflow.ListRuns(ctx, kv)
	if err != nil {
		t.Fatal(err)
	}
	var twice, missing, resumed, resent int
	for _, r := range records {
		resumed += min(r.Resumes, 1)
		for _, step := range []string{"a", "b", "c"} {
			switch n := fx.count(r.ID + "." + step); {
			case n > 1:
				twice++
			case n == 0 && o.Completed[r.ID] > 0:
				missing++
			}
		}
		for _, sr := range r.Steps {
			if sr.Sends > 1 {
				resent++
			}
		}
	}
	t.Logf("step ledger: %d run records, %d completed, %d resumed by another dispatcher, %d steps sent again, "+
		"%d step side effects executed twice, %d missing", len(records), len(o.Completed), resumed, resent, twice, missing)
	if len(records) != runs || len(o.Completed) != runs || twice > 0 || missing > 0 {
		t.Fatalf("step ledger: %d records and %d completed of %d runs, %d executed twice, %d missing", len(records), len(o.Completed), runs, twice, missing)
	}
	if resumed == 0 {
		t.Fatal("no run was resumed after a kill: the test proves nothing")
	}
}

// A critical step fails after two steps are done; the dispatcher is killed
// while the first compensation runs. Its replacement resumes the run: each
// compensation runs exactly once, in reverse order, and the run ends in one
// outcome.
func TestCompensationSurvivesADispatcherKill(t *testing.T) {
	st := NewStack(t, time.Second)
	fx := newEffects()
	fx.silentOnce["saga.refund"] = true // its answer is lost: the dispatcher dies meanwhile
	stepAgent(t, st.Conn(), "saga-1", fx, sagaSteps())
	nc := st.Conn()
	PutWorkflow(t, nc, sagaWorkflow)
	cfg := &config.Config{DurableAckWait: 2 * time.Second, Name: "child"}
	url := st.Server.ClientURL()
	child := StartChild(t, ChildWorkflows, url, "", 0, cfg)
	js := jsOf(t, nc)
	l := NewLedger(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := st.Client()
	if err := l.Submit(ctx, c, "wf.saga", map[string]int{"order": 3}); err != nil {
		t.Fatal(err)
	}
	var id string
	natstest.WaitFor(t, 20*time.Second, func() error {
		for _, k := range fx.executed() {
			if strings.HasSuffix(k, ".charge.compensate") {
				id = strings.TrimSuffix(k, ".charge.compensate")
				return nil
			}
		}
		return fmt.Errorf("no compensation yet: executed %v", fx.executed())
	})
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	StartChild(t, ChildWorkflows, url, "", 0, cfg)
	settle(t, l, js, 60*time.Second)
	l.Check(t, js)

	want := []string{id + ".reserve", id + ".charge", id + ".ship", id + ".charge.compensate", id + ".reserve.compensate"}
	if got := fx.executed(); !slices.Equal(got, want) {
		t.Fatalf("executed %v, want each once, in %v", got, want)
	}
	r := runRecord(t, nc, id)
	if r.Resumes != 1 || r.Steps[1].Compensation.Sends != 2 || r.Steps[0].Compensation.Sends != 1 || r.Outcome != events.OutcomeResult {
		t.Fatalf("run record: resumes %d, compensation sends %d (charge) and %d (reserve), outcome %s",
			r.Resumes, r.Steps[1].Compensation.Sends, r.Steps[0].Compensation.Sends, r.Outcome)
	}
	res, err := c.Result(ctx, id)
	var body struct {
		Step        string   `json:"step"`
		Compensated []string `json:"compensated"`
	}
	if res == nil || !strings.Contains(fmt.Sprint(err), "BIZ_REJECT") || res.Decode(&body) != nil ||
		body.Step != "ship" || !slices.Equal(body.Compensated, []string{"reserve", "charge"}) {
		t.Fatalf("recorded outcome %v (body %+v), %v", res, body, err)
	}
	t.Logf("compensations: %v", fx.executed()[3:])
}

func TestBadWorkflowInputFailsTheStepNamingTheReference(t *testing.T) {
	st := NewStack(t, time.Second)
	d, e := st.WorkflowDispatcher(config.Config{})
	fx := newEffects()
	steps := seqSteps()
	steps["cond.score"] = func(in map[string]any) (any, *streams.Error) { return map[string]any{"risk": in["risk"]}, nil }
	steps["cond.review"] = condSteps()["cond.review"]
	steps["cond.approve"] = condSteps()["cond.approve"]
	stepAgent(t, st.Conn(), "bad-1", fx, steps)
	WaitRoutable(t, "cond.score", 1, d)
	nc := st.Conn()
	PutWorkflow(t, nc, seqWorkflow, e)
	PutWorkflow(t, nc, condWorkflow, e)

	for _, c := range []struct {
		name, workflow, body string
		headers              []string
		want                 []string
	}{
		{"a missing input field", "wf.seq", `{"id": 1}`, nil,
			[]string{"BAD_REQUEST", "step reserve", `$input.order: the input has no field \"order\"`}},
		{"an input that is no object", "wf.seq", `[1, 2]`, nil,
			[]string{"BAD_REQUEST", "step reserve", "$input.order: the input is an array"}},
		{"types that do not compare", "wf.cond", `{"amount": 5, "risk": "high"}`, nil,
			[]string{"BAD_REQUEST", "step manual", "$steps.score.result.risk is a string (\\\"high\\\"), which gt cannot compare with a number"}},
		{"an unknown param", "wf.cond", `{"amount": 5}`, []string{spec.HeaderParams, `{"limit": 3}`},
			[]string{"BAD_REQUEST", `has no parameter \"limit\"`}},
		{"a param of the wrong type", "wf.cond", `{"amount": 5}`, []string{spec.HeaderParams, `{"threshold": "high"}`},
			[]string{"BAD_REQUEST", "parameter threshold is a number, got a string"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := callWorkflow(t, nc, c.workflow, c.body, c.headers...)
			text := fmt.Sprint(res.Header) + string(res.Data)
			for _, w := range c.want {
				if !strings.Contains(text, w) {
					t.Errorf("reply %s lacks %q", text, w)
				}
			}
		})
	}
	// Only the step before the bad condition ran.
	if got := fx.executed(); len(got) != 1 || !strings.HasSuffix(got[0], "|cond.score") {
		t.Errorf("executed %v for bad input, want only the step before the bad condition", got)
	}

	// A definition put by hand that does not validate is ignored; the
	// version in force stays.
	_, rev, _ := e.Definition("wf.seq")
	kv, err := jsOf(t, nc).KeyValue(context.Background(), streams.BucketPolicy)
	if err != nil {
		t.Fatal(err)
	}
	bad, err := kv.Put(context.Background(), spec.PolicyPrefix+"wf.seq", []byte(`{"name":"wf.seq","steps":[{"name":"a","call":"seq.reserve","when":{"field":"$input.x","op":"near"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	PutWorkflow(t, nc, condWorkflow, e) // a later revision is in force, so the bad one has been seen
	if _, have, ok := e.Definition("wf.seq"); !ok || have != rev || bad <= rev {
		t.Fatalf("wf.seq at revision %d after a bad put at %d, want %d", have, bad, rev)
	}
	if res := callWorkflow(t, nc, "wf.seq", `{"order": 8}`); res.Header.Get(streams.HeaderStatus) != "FINISHED" {
		t.Fatalf("wf.seq after a bad put: %v %s", res.Header, res.Data)
	}
}

// A compensation that finds no agent waits like a durable task, its run
// still compensating; once an agent is there the run goes on with the
// compensations left, never the steps again.
func TestACompensationWaitsForItsAgent(t *testing.T) {
	st := NewStack(t, time.Second)
	d, e := st.WorkflowDispatcher(config.Config{})
	fx := newEffects()
	all := sagaSteps()
	release := all["saga.release"]
	delete(all, "saga.release")
	stepAgent(t, st.Conn(), "saga-1", fx, all)
	WaitRoutable(t, "saga.ship", 1, d)
	nc := st.Conn()
	PutWorkflow(t, nc, sagaWorkflow, e)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := st.Client()
	id, err := c.Submit(ctx, "wf.saga", map[string]int{"order": 4})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := jsOf(t, nc).KeyValue(ctx, streams.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		r, err := workflow.GetRun(ctx, kv, id)
		if err != nil {
			return err
		}
		if r.Status != workflow.RunCompensating || r.Owner != "" || !slices.Contains(decisions(r), "reserve:wait") {
			return fmt.Errorf("run %s owned by %q, decisions %v", r.Status, r.Owner, decisions(r))
		}
		return nil
	})
	stepAgent(t, st.Conn(), "saga-2", fx, map[string]stepFunc{"saga.release": release})
	if _, err := c.Wait(ctx, id); err == nil || !strings.Contains(err.Error(), "BIZ_REJECT") {
		t.Fatalf("outcome: %v, want the rejection, rolled back", err)
	}
	want := []string{id + ".reserve", id + ".charge", id + ".ship", id + ".charge.compensate", id + ".reserve.compensate"}
	if got := fx.executed(); !slices.Equal(got, want) {
		t.Fatalf("executed %v, want each once, in %v", got, want)
	}
	r := runRecord(t, nc, id)
	if n := strings.Count(strings.Join(decisions(r), " "), "reserve:wait"); n != 1 {
		t.Errorf("decisions %v: want the wait recorded once", decisions(r))
	}
}

// A durable run that failed is dead-lettered like a task; replayed, it runs
// again from the step that failed, the steps done before staying done.
func TestAReplayedDeadLetterRunContinuesFromItsFailedStep(t *testing.T) {
	st := NewStack(t, time.Second)
	d, e := st.WorkflowDispatcher(config.Config{})
	fx := newEffects()
	steps := seqSteps()
	ship := steps["seq.ship"]
	failing := true
	steps["seq.ship"] = func(in map[string]any) (any, *streams.Error) {
		if failing { // under fx.mu, as every handler runs
			failing = false
			return nil, streams.NewError(streams.CodeInternal, "courier API down")
		}
		return ship(in)
	}
	stepAgent(t, st.Conn(), "seq-1", fx, steps)
	WaitRoutable(t, "seq.ship", 1, d)
	nc := st.Conn()
	PutWorkflow(t, nc, seqWorkflow, e)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := st.Client()
	id, err := c.Submit(ctx, "wf.seq", map[string]int{"order": 9})
	if err != nil {
		t.Fatal(err)
	}
	js := jsOf(t, nc)
	var parked []durable.Parked
	natstest.WaitFor(t, 10*time.Second, func() error {
		if parked, err = durable.ListParked(ctx, js, streams.Subjects{}, streams.StreamDLQ); err != nil {
			return err
		}
		if len(parked) != 1 {
			return fmt.Errorf("%d dead letters", len(parked))
		}
		return nil
	})
	p := parked[0]
	if p.RequestID != id || p.Capability != "wf.seq" || p.Reason != durable.ReasonFailed || p.Code != string(streams.CodeInternal) ||
		p.Header.Get(streams.HeaderRunID) != id || !strings.Contains(p.LastError, "step ship: courier API down") {
		t.Fatalf("dead letter %+v", p)
	}
	if err := durable.Replay(ctx, js, streams.Subjects{}, p, time.Time{}); err != nil {
		t.Fatal(err)
	}
	res, err := c.Wait(ctx, id)
	if err != nil || !strings.Contains(string(res.Data), "T-R-9-H-9") {
		t.Fatalf("replayed run: %v, %v", res, err)
	}
	for _, step := range []string{"reserve", "charge", "ship"} {
		if n := fx.count(id + "." + step); n != 1 {
			t.Errorf("step %s executed %d times", step, n)
		}
	}
	r := runRecord(t, nc, id)
	if r.Replays != 1 || r.Outcome != events.OutcomeResult || !slices.Contains(decisions(r), ":reopen") || r.Steps[2].Sends != 2 {
		t.Fatalf("run record: replays %d, outcome %s, decisions %v, ship sent %d times", r.Replays, r.Outcome, decisions(r), r.Steps[2].Sends)
	}
}
