package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/events"
	"github.com/agent-reach/agentreach/dispatcher/gateway"
	"github.com/agent-reach/agentreach/dispatcher/workflow"
	"github.com/agent-reach/agentreach/dispatcher/workflow/spec"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

// Workflows end to end (docs/workflows.md), with raw-protocol agents: each one
// answers a delivery as docs/protocol.md asks, and executes each
// idempotency key once — the first execution's answer is stored and
// replayed — counting its side effects per key. A delivery without a key
// (a direct-tier run's step) is named by its run and capability,
// directKey.

// stepFunc is what a raw step agent does with one payload.
type stepFunc func(in map[string]any) (any, *streams.Error)

// effects is the shared state of the raw step agents of a test: the side
// effects per idempotency key, the stored answers, the order of execution
// and the headers each key's last delivery carried.
type effects struct {
	mu      sync.Mutex
	counts  map[string]int
	stored  map[string]storedAnswer
	order   []string
	headers map[string]nats.Header
	bodies  map[string][]byte
	// silentOnce lists capabilities whose first execution is stored but
	// not answered: the agent's reply is lost (a fault test kills the
	// dispatcher meanwhile).
	silentOnce map[string]bool
}

type storedAnswer struct {
	body []byte
	err  *streams.Error
}

func newEffects() *effects {
	return &effects{counts: map[string]int{}, stored: map[string]storedAnswer{}, headers: map[string]nats.Header{},
		bodies: map[string][]byte{}, silentOnce: map[string]bool{}}
}

// count returns how often key was executed.
func (fx *effects) count(key string) int {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	return fx.counts[key]
}

// executed returns the keys in the order they were executed.
func (fx *effects) executed() []string {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	return slices.Clone(fx.order)
}

// header returns the headers of the last delivery with key.
func (fx *effects) header(key string) nats.Header {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	return fx.headers[key]
}

// body returns the payload of the last delivery with key.
func (fx *effects) body(key string) []byte {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	return fx.bodies[key]
}

// stepAgent registers a raw-protocol instance serving the capabilities of
// handlers, idempotently: a key executes once, and its answer (a result or
// a BIZ_REJECT) is replayed to every later delivery.
func stepAgent(t *testing.T, nc *nats.Conn, id string, fx *effects, handlers map[string]stepFunc) {
	t.Helper()
	caps := make([]string, 0, len(handlers))
	for c := range handlers {
		caps = append(caps, c)
	}
	RawAgent(t, nc, registry.Record{ID: id, Type: "steps", Capabilities: caps, MaxConcurrent: 64, HeartbeatMS: 1000}, func(m *nats.Msg) {
		capability, key := m.Header.Get(streams.HeaderCapability), m.Header.Get(streams.HeaderIdempotencyKey)
		if key == "" {
			key = directKey(m.Header.Get(streams.HeaderParentID), capability)
		}
		fx.mu.Lock()
		fx.headers[key], fx.bodies[key] = m.Header, m.Data
		a, replay := fx.stored[capability+"|"+key]
		silent := false
		if !replay {
			var in map[string]any
			_ = json.Unmarshal(m.Data, &in)
			out, e := handlers[capability](in)
			a = storedAnswer{err: e}
			if e == nil {
				a.body, _ = json.Marshal(out)
			}
			if e == nil || e.Code == streams.CodeBizReject {
				fx.stored[capability+"|"+key] = a
				fx.counts[key]++
				fx.order = append(fx.order, key)
				silent = fx.silentOnce[capability]
				delete(fx.silentOnce, capability)
			}
		}
		fx.mu.Unlock()
		switch {
		case silent:
		case a.err != nil:
			_ = nc.PublishMsg(streams.ErrorReply(m.Reply, streams.ContentTypeJSON, "", a.err))
		default:
			finish(nc, m, a.body)
		}
	})
}

// directKey names the delivery of capability in direct-tier run runID,
// whose steps carry no idempotency key.
func directKey(runID, capability string) string { return runID + "|" + capability }

// callWorkflow calls a workflow on the direct tier with a JSON body and headers.
func callWorkflow(t *testing.T, nc *nats.Conn, name, body string, headers ...string) *nats.Msg {
	t.Helper()
	m := nats.NewMsg(streams.Subjects{}.Task(name))
	m.Data = []byte(body)
	for i := 0; i+1 < len(headers); i += 2 {
		m.Header.Set(headers[i], headers[i+1])
	}
	res, err := nc.RequestMsg(m, 15*time.Second)
	if err != nil {
		t.Fatalf("call %s: %v", name, err)
	}
	return res
}

// decodeBody reads a JSON reply body.
func decodeBody(t *testing.T, m *nats.Msg) map[string]any {
	t.Helper()
	var out map[string]any
	if err := json.Unmarshal(m.Data, &out); err != nil {
		t.Fatalf("reply body %q: %v", m.Data, err)
	}
	return out
}

// runRecord waits for the record of run id in REACH_RUNS to be final.
func runRecord(t *testing.T, nc *nats.Conn, id string) *workflow.Run {
	t.Helper()
	kv, err := jsOf(t, nc).KeyValue(context.Background(), streams.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	var r *workflow.Run
	natstest.WaitFor(t, 10*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if r, err = workflow.GetRun(ctx, kv, id); err != nil {
			return err
		}
		if !r.Status.Final() {
			return fmt.Errorf("run %s is %s", id, r.Status)
		}
		return nil
	})
	return r
}

// decisions lists a run's decisions as "<step>:<kind>".
func decisions(r *workflow.Run) []string {
	var out []string
	for _, d := range r.Decisions {
		out = append(out, d.Step+":"+d.Kind)
	}
	return out
}

const seqWorkflow = `
name: wf.seq
steps:
  - name: reserve
    call: seq.reserve
    input: {order: $input.order}
  - name: charge
    call: seq.charge
    input: {order: $input.order, hold: $steps.reserve.result.hold}
  - name: ship
    call: seq.ship
    input: {receipt: $steps.charge.result.receipt}
output: {hold: $steps.reserve.result.hold, receipt: $steps.charge.result.receipt, tracking: $steps.ship.result.tracking}
`

// seqSteps serves wf.seq's steps: each result is built from its input, so
// the output shows that every step got what its mapping says.
func seqSteps() map[string]stepFunc {
	return map[string]stepFunc{
		"seq.reserve": func(in map[string]any) (any, *streams.Error) {
			return map[string]any{"hold": fmt.Sprintf("H-%v", in["order"])}, nil
		},
		"seq.charge": func(in map[string]any) (any, *streams.Error) {
			return map[string]any{"receipt": fmt.Sprintf("R-%v-%v", in["order"], in["hold"])}, nil
		},
		"seq.ship": func(in map[string]any) (any, *streams.Error) {
			return map[string]any{"tracking": fmt.Sprintf("T-%v", in["receipt"])}, nil
		},
	}
}

// seqWorkflowStack starts a stack with a workflow dispatcher, wf.seq put
// and its step agent seq-1 routable; it returns the stack, the dispatcher,
// the step agent's effects and a connection of the test's own.
func seqWorkflowStack(t *testing.T) (*Stack, *dispatcher.Dispatcher, *effects, *nats.Conn) {
	st := NewStack(t, time.Second)
	d, e := st.WorkflowDispatcher(config.Config{})
	fx := newEffects()
	stepAgent(t, st.Conn(), "seq-1", fx, seqSteps())
	WaitRoutable(t, "seq.ship", 1, d)
	nc := st.Conn()
	PutWorkflow(t, nc, seqWorkflow, e)
	return st, d, fx, nc
}

func TestASequentialWorkflowPassesEachStepsResultOn(t *testing.T) {
	_, _, fx, nc := seqWorkflowStack(t)

	res := callWorkflow(t, nc, "wf.seq", `{"order": 7}`, streams.HeaderOrchestrationID, "orch-9")
	if res.Header.Get(streams.HeaderStatus) != "FINISHED" {
		t.Fatalf("reply headers %v, body %s", res.Header, res.Data)
	}
	runID := res.Header.Get(streams.HeaderRunID)
	if runID == "" || runID != res.Header.Get(streams.HeaderRequestID) || res.Header.Get(streams.HeaderOrchestrationID) != "orch-9" {
		t.Fatalf("reply headers %v: want Reach-Run-Id = Reach-Request-Id and the caller's orchestration id", res.Header)
	}
	want := map[string]any{"hold": "H-7", "receipt": "R-7-H-7", "tracking": "T-R-7-H-7"}
	if got := decodeBody(t, res); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("output %v, want %v", got, want)
	}
	// Each step's task: its own request id, the run as parent, the run's
	// orchestration id and deadline; on the direct tier no key of the run's.
	for _, capability := range []string{"seq.reserve", "seq.charge", "seq.ship"} {
		key := directKey(runID, capability)
		h := fx.header(key)
		if h == nil || fx.count(key) != 1 {
			t.Fatalf("%s: no delivery for the run (or executed %d times)", capability, fx.count(key))
		}
		if h.Get(streams.HeaderParentID) != runID || h.Get(streams.HeaderOrchestrationID) != "orch-9" ||
			h.Get(streams.HeaderDeadline) == "" || h.Get(streams.HeaderRequestID) == runID || h.Get(streams.HeaderIdempotencyKey) != "" {
			t.Errorf("%s delivery headers %v", capability, h)
		}
	}
	r := runRecord(t, nc, runID)
	if r.Status != workflow.RunFinished || r.Tier != "direct" || r.Outcome != events.OutcomeReply || len(r.Steps) != 3 {
		t.Fatalf("run record %+v", r)
	}
	for _, sr := range r.Steps {
		if sr.Status != workflow.StepDone || sr.Node != "seq-1" || sr.Sends != 1 || sr.Attempts != 1 {
			t.Errorf("step record %+v", sr)
		}
	}
}

const condWorkflow = `
name: wf.cond
params: {threshold: 100}
steps:
  - name: score
    call: cond.score
  - name: manual
    when:
      any:
        - {field: $steps.score.result.risk, op: gt, value: 0.5}
        - {field: $input.amount, op: gt, value: $params.threshold}
    call: cond.review
  - name: approve
    call: cond.approve
    input: {amount: $input.amount}
output: {approved: $steps.approve.result.ok}
`

func condSteps() map[string]stepFunc {
	return map[string]stepFunc{
		"cond.score": func(in map[string]any) (any, *streams.Error) {
			if r, ok := in["risk"]; ok {
				return map[string]any{"risk": r}, nil
			}
			return map[string]any{"risk": 0.1}, nil
		},
		"cond.review":  func(map[string]any) (any, *streams.Error) { return map[string]any{"reviewed": true}, nil },
		"cond.approve": func(map[string]any) (any, *streams.Error) { return map[string]any{"ok": true}, nil },
	}
}

// A workflow is called like a capability from every way in — reach.task,
// HTTP /v1/call and /route (Dispatcher.Call), a fan-out branch — and each
// answers its output and leaves the same record and counts. A broadcast
// naming a workflow is refused, and a name close to a workflow's is
// suggested.
func TestAWorkflowIsCalledLikeACapabilityFromEveryWayIn(t *testing.T) {
	st, d, _, nc := seqWorkflowStack(t)
	st.FanOut(d)
	g, err := gateway.New(nc, d, gateway.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(srv.Close)
	post := func(path, body, requestID string) (*http.Response, map[string]any) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if requestID != "" {
			req.Header.Set(streams.HeaderRequestID, requestID)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		raw, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		var out map[string]any
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("POST %s: body %q: %v", path, raw, err)
		}
		return res, out
	}
	want := fmt.Sprint(map[string]any{"hold": "H-7", "receipt": "R-7-H-7", "tracking": "T-R-7-H-7"})
	// counted is what one call adds to the dispatcher's counts.
	counted := func(call func()) events.Counts {
		before := d.Stats().Counts
		call()
		c := d.Stats().Counts
		c.Tasks, c.Finished, c.Rejected, c.Failed = c.Tasks-before.Tasks, c.Finished-before.Finished, c.Rejected-before.Rejected, c.Failed-before.Failed
		c.Retries, c.Broadcasts, c.FanOuts, c.Branches = c.Retries-before.Retries, c.Broadcasts-before.Broadcasts, c.FanOuts-before.FanOuts, c.Branches-before.Branches
		return c
	}

	overNATS := counted(func() {
		res := callWorkflow(t, nc, "wf.seq", `{"order": 7}`, streams.HeaderRequestID, "wf-nats")
		if got := decodeBody(t, res); res.Header.Get(streams.HeaderStatus) != "FINISHED" || fmt.Sprint(got) != want {
			t.Fatalf("over NATS: %v %s", res.Header, res.Data)
		}
	})
	for _, c := range []struct{ path, body, id string }{
		{"/v1/call/wf.seq", `{"order": 7}`, "wf-http"},
		{"/route", `{"capability": "wf.seq", "payload": {"order": 7}}`, "wf-route"},
	} {
		overHTTP := counted(func() {
			res, got := post(c.path, c.body, c.id)
			if res.StatusCode != http.StatusOK || fmt.Sprint(got) != want || res.Header.Get(streams.HeaderRunID) != c.id {
				t.Fatalf("POST %s: %d %v %v, want 200 with %s", c.path, res.StatusCode, res.Header, got, want)
			}
		})
		if overHTTP != overNATS {
			t.Errorf("POST %s counted %+v, over NATS %+v", c.path, overHTTP, overNATS)
		}
	}
	if overNATS.Tasks != 3 || overNATS.Finished != 3 { // its three steps; a run's record counts no task
		t.Errorf("a run counted %+v, want 3 finished tasks", overNATS)
	}

	res, agg := fanoutReq(t, nc, streams.Subjects{}.FanOut(), []byte(`{"branches": [{"name": "wf", "capability": "wf.seq", "payload": {"order": 7}}]}`),
		streams.HeaderRequestID, "fan-wf")
	if res.Header.Get(streams.HeaderStatus) != "FINISHED" || agg.Succeeded != 1 || len(agg.Replies) != 1 ||
		!strings.Contains(string(agg.Replies[0].Result), `"tracking":"T-R-7-H-7"`) {
		t.Fatalf("fan-out with a workflow branch: %v %s", res.Header, res.Data)
	}

	// Every run's record is the same, whichever way it came in.
	js := jsOf(t, nc)
	natstest.WaitFor(t, 10*time.Second, func() error {
		runs := map[string]events.Event{}
		for _, ev := range readEvents(t, js) {
			if ev.Kind == workflow.KindRun && (ev.RequestID == "wf-nats" || ev.RequestID == "wf-http" || ev.RequestID == "wf-route" || ev.ParentID == "fan-wf") {
				runs[ev.RequestID] = ev
			}
		}
		if len(runs) != 4 {
			return fmt.Errorf("run records %v, want 4", runs)
		}
		for id, ev := range runs {
			if ev.Capability != "wf.seq" || ev.Tier != "direct" || ev.Status != "FINISHED" || ev.Outcome != events.OutcomeReply || ev.Attempts != 3 {
				t.Fatalf("run %s's record %+v", id, ev)
			}
		}
		return nil
	})

	res, _ = fanoutReq(t, nc, streams.Subjects{}.Broadcast("wf.seq"), []byte(`{"order": 7}`))
	if res.Header.Get(streams.HeaderError) != string(streams.CodeBadRequest) || !strings.Contains(string(res.Data), "is a workflow") {
		t.Errorf("a broadcast to a workflow: %v %s, want BAD_REQUEST", res.Header, res.Data)
	}
	if r, got := post("/v1/call/wf.seg", `{}`, ""); r.StatusCode != http.StatusNotFound || got["code"] != string(streams.CodeNoAgent) ||
		!strings.Contains(fmt.Sprint(got["message"]), "did you mean wf.seq?") {
		t.Errorf("a call of a near name: %d %v, want NO_AGENT suggesting wf.seq", r.StatusCode, got)
	}
}

func TestAConditionalStepRunsOrIsSkippedByItsCondition(t *testing.T) {
	st := NewStack(t, time.Second)
	d, e := st.WorkflowDispatcher(config.Config{})
	fx := newEffects()
	stepAgent(t, st.Conn(), "cond-1", fx, condSteps())
	WaitRoutable(t, "cond.review", 1, d)
	nc := st.Conn()
	PutWorkflow(t, nc, condWorkflow, e)

	for _, c := range []struct {
		name    string
		body    string
		headers []string
		runs    bool
		trace   string
	}{
		{"below the threshold", `{"amount": 50}`, nil, false,
			`any[$steps.score.result.risk (0.1) gt 0.5 → false, $input.amount (50) gt $params.threshold (100) → false] → false`},
		{"above the threshold", `{"amount": 500}`, nil, true,
			`any[$steps.score.result.risk (0.1) gt 0.5 → false, $input.amount (500) gt $params.threshold (100) → true] → true`},
		{"risky", `{"amount": 5, "risk": 0.9}`, nil, true, `any[$steps.score.result.risk (0.9) gt 0.5 → true] → true`},
		{"the threshold raised by the call", `{"amount": 500}`, []string{spec.HeaderParams, `{"threshold": 1000}`}, false,
			`any[$steps.score.result.risk (0.1) gt 0.5 → false, $input.amount (500) gt $params.threshold (1000) → false] → false`},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := callWorkflow(t, nc, "wf.cond", c.body, c.headers...)
			if res.Header.Get(streams.HeaderStatus) != "FINISHED" || fmt.Sprint(decodeBody(t, res)) != "map[approved:true]" {
				t.Fatalf("reply %v %s", res.Header, res.Data)
			}
			runID := res.Header.Get(streams.HeaderRunID)
			if got := fx.count(directKey(runID, "cond.review")); got != map[bool]int{true: 1, false: 0}[c.runs] {
				t.Fatalf("manual review executed %d times, want it to run: %v", got, c.runs)
			}
			r := runRecord(t, nc, runID)
			manual := r.Steps[1]
			wantStatus, wantKind := workflow.StepSkipped, workflow.DecisionWhenFalse
			if c.runs {
				wantStatus, wantKind = workflow.StepDone, workflow.DecisionWhenTrue
			}
			if manual.Status != wantStatus || manual.Condition == nil || manual.Condition.Value != c.runs || manual.Condition.Trace != c.trace {
				t.Fatalf("manual step record %+v (condition %+v), want %s with trace %q", manual, manual.Condition, wantStatus, c.trace)
			}
			if !slices.Contains(decisions(r), "manual:"+wantKind) {
				t.Fatalf("decisions %v lack manual:%s", decisions(r), wantKind)
			}
		})
	}
}

const parallelWorkflow = `
name: wf.par
steps:
  - name: score
    parallel:
      quorum: 0.6
      branches:
        - {name: credit, call: par.credit}
        - {name: fraud, call: par.fraud}
        - {name: kyc, call: par.kyc}
  - name: decide
    call: par.decide
    input: {credit: $steps.score.result.credit.score, fraud: $steps.score.result.fraud.score}
`

func TestAParallelStepCompletesByItsQuorum(t *testing.T) {
	st := NewStack(t, time.Second)
	d, e := st.WorkflowDispatcher(config.Config{})
	fx := newEffects()
	stepAgent(t, st.Conn(), "par-1", fx, map[string]stepFunc{
		"par.credit": func(map[string]any) (any, *streams.Error) { return map[string]any{"score": 0.8}, nil },
		"par.fraud":  func(map[string]any) (any, *streams.Error) { return map[string]any{"score": 0.1}, nil },
		"par.kyc": func(map[string]any) (any, *streams.Error) {
			return nil, streams.NewError(streams.CodeBizReject, "no such person")
		},
		"par.decide": func(in map[string]any) (any, *streams.Error) { return in, nil },
	})
	WaitRoutable(t, "par.kyc", 1, d)
	nc := st.Conn()
	PutWorkflow(t, nc, parallelWorkflow, e)
	PutWorkflow(t, nc, strings.Replace(strings.Replace(parallelWorkflow, "wf.par", "wf.par.all", 1), "quorum: 0.6", "mode: all", 1), e)

	res := callWorkflow(t, nc, "wf.par", `{"id": 3}`)
	if res.Header.Get(streams.HeaderStatus) != "FINISHED" || fmt.Sprint(decodeBody(t, res)) != "map[credit:0.8 fraud:0.1]" {
		t.Fatalf("quorum 0.6 with 2 of 3 branches: reply %v %s", res.Header, res.Data)
	}
	runID := res.Header.Get(streams.HeaderRunID)
	for _, b := range []string{"credit", "fraud", "kyc"} {
		if h := fx.header(directKey(runID, "par."+b)); h == nil || h.Get(streams.HeaderParentID) != runID {
			t.Errorf("branch %s: delivery headers %v, want the run as parent", b, h)
		}
	}
	r := runRecord(t, nc, runID)
	if score := r.Steps[0]; score.Status != workflow.StepDone || len(score.Branches) != 3 || string(score.Result) != `{"credit":{"score":0.8},"fraud":{"score":0.1}}` {
		t.Fatalf("parallel step record %+v, result %s", score, score.Result)
	}

	res = callWorkflow(t, nc, "wf.par.all", `{"id": 4}`)
	body := decodeBody(t, res)
	if res.Header.Get(streams.HeaderError) != string(streams.CodeIncomplete) || body["step"] != "score" {
		t.Fatalf("mode all with a branch failing: reply %v %s, want INCOMPLETE at step score", res.Header, res.Data)
	}
	if n := fx.count(directKey(res.Header.Get(streams.HeaderRunID), "par.decide")); n != 0 {
		t.Fatalf("the step after the failed parallel step ran %d times", n)
	}
}

func TestAFailedStepIsSkippedOrFallsBack(t *testing.T) {
	st := NewStack(t, time.Second)
	d, e := st.WorkflowDispatcher(config.Config{})
	fx := newEffects()
	stepAgent(t, st.Conn(), "fb-1", fx, map[string]stepFunc{
		"fb.enrich": func(map[string]any) (any, *streams.Error) {
			return nil, streams.NewError(streams.CodeBizReject, "nothing to add")
		},
		"fb.model": func(map[string]any) (any, *streams.Error) {
			return nil, streams.NewError(streams.CodeInternal, "model crashed")
		},
		"fb.rules": func(in map[string]any) (any, *streams.Error) {
			return map[string]any{"score": 0.5, "by": "rules", "saw": in["id"]}, nil
		},
	})
	WaitRoutable(t, "fb.rules", 1, d)
	nc := st.Conn()
	PutWorkflow(t, nc, `
name: wf.fb
steps:
  - name: enrich
    call: fb.enrich
    on_failure: skip
  - name: score
    call: fb.model
    input: {id: $input.id}
    on_failure: {fallback: fb.rules}
output: {score: $steps.score.result}
`, e)

	res := callWorkflow(t, nc, "wf.fb", `{"id": 11}`)
	if res.Header.Get(streams.HeaderStatus) != "FINISHED" || fmt.Sprint(decodeBody(t, res)) != "map[score:map[by:rules saw:11 score:0.5]]" {
		t.Fatalf("reply %v %s", res.Header, res.Data)
	}
	runID := res.Header.Get(streams.HeaderRunID)
	r := runRecord(t, nc, runID)
	if got, want := decisions(r), []string{"enrich:skip", "score:fallback"}; !slices.Equal(got, want) {
		t.Fatalf("decisions %v, want %v", got, want)
	}
	enrich, score := r.Steps[0], r.Steps[1]
	if enrich.Status != workflow.StepSkipped || enrich.Error == nil || enrich.Error.Code != streams.CodeBizReject {
		t.Errorf("skipped step record %+v", enrich)
	}
	if score.Status != workflow.StepDone || score.Capability != "fb.rules" || score.Fallback == nil ||
		score.Fallback.Status != workflow.StepDone || score.Error != nil {
		t.Errorf("fallen-back step record %+v (fallback %+v)", score, score.Fallback)
	}
	if h := fx.header(directKey(runID, "fb.rules")); h == nil || h.Get(streams.HeaderParentID) != runID {
		t.Errorf("the fallback's task headers %v, want the run as parent", h)
	}
}

const sagaWorkflow = `
name: wf.saga
steps:
  - name: reserve
    call: saga.reserve
    compensate: saga.release
  - name: charge
    call: saga.charge
    compensate: saga.refund
  - name: ship
    call: saga.ship
    critical: true
`

// sagaSteps serves wf.saga: shipping always fails, so both earlier steps
// are compensated.
func sagaSteps() map[string]stepFunc {
	ok := func(what string) stepFunc {
		return func(in map[string]any) (any, *streams.Error) { return map[string]any{what: true, "got": in}, nil }
	}
	return map[string]stepFunc{
		"saga.reserve": ok("reserved"), "saga.charge": ok("charged"),
		"saga.release": ok("released"), "saga.refund": ok("refunded"),
		"saga.ship": func(map[string]any) (any, *streams.Error) {
			return nil, streams.NewError(streams.CodeBizReject, "no courier")
		},
	}
}

func TestACriticalFailureCompensatesTheStepsDoneInReverseOrder(t *testing.T) {
	st := NewStack(t, time.Second)
	d, e := st.WorkflowDispatcher(config.Config{})
	fx := newEffects()
	stepAgent(t, st.Conn(), "saga-1", fx, sagaSteps())
	WaitRoutable(t, "saga.ship", 1, d)
	nc := st.Conn()
	PutWorkflow(t, nc, sagaWorkflow, e)
	// The same without critical: the run ends, nothing is undone.
	PutWorkflow(t, nc, strings.Replace(strings.Replace(sagaWorkflow, "wf.saga", "wf.abort", 1), "critical: true", "on_failure: abort", 1), e)

	res := callWorkflow(t, nc, "wf.saga", `{"order": 1}`)
	body := decodeBody(t, res)
	if res.Header.Get(streams.HeaderError) != string(streams.CodeBizReject) || body["step"] != "ship" ||
		fmt.Sprint(body["compensated"]) != "[reserve charge]" || !strings.Contains(fmt.Sprint(body["message"]), "no courier") {
		t.Fatalf("reply %v %s", res.Header, res.Data)
	}
	runID := res.Header.Get(streams.HeaderRunID)
	// Compensations carry the key <run-id>.<step>.compensate on both tiers.
	want := []string{directKey(runID, "saga.reserve"), directKey(runID, "saga.charge"), directKey(runID, "saga.ship"),
		runID + ".charge.compensate", runID + ".reserve.compensate"}
	if got := fx.executed(); !slices.Equal(got, want) {
		t.Fatalf("executed %v, want %v", got, want)
	}
	r := runRecord(t, nc, runID)
	if got, want := decisions(r), []string{"ship:abort", "charge:compensate", "reserve:compensate"}; !slices.Equal(got, want) {
		t.Fatalf("decisions %v, want %v", got, want)
	}
	if r.Steps[0].Status != workflow.StepCompensated || r.Steps[1].Status != workflow.StepCompensated || r.Steps[2].Status != workflow.StepFailed {
		t.Fatalf("step records %+v %+v %+v", r.Steps[0], r.Steps[1], r.Steps[2])
	}
	// The compensation's payload says what it undoes.
	var payload struct {
		Step   string         `json:"step"`
		Result map[string]any `json:"result"`
		RunID  string         `json:"run_id"`
	}
	if err := json.Unmarshal(fx.body(runID+".charge.compensate"), &payload); err != nil ||
		payload.Step != "charge" || payload.Result["charged"] != true || payload.RunID != runID {
		t.Fatalf("compensation payload %s (%v)", fx.body(runID+".charge.compensate"), err)
	}

	res = callWorkflow(t, nc, "wf.abort", `{"order": 2}`)
	if res.Header.Get(streams.HeaderError) != string(streams.CodeBizReject) {
		t.Fatalf("abort reply %v %s", res.Header, res.Data)
	}
	abortID := res.Header.Get(streams.HeaderRunID)
	if fx.count(abortID+".charge.compensate")+fx.count(abortID+".reserve.compensate") != 0 {
		t.Fatalf("a non-critical step's abort compensated: executed %v", fx.executed())
	}
}

// A step calls capabilities, not workflows: a step naming a workflow's
// name goes to the instances of the capability it shadows, while a call of
// that name runs the workflow.
func TestAStepNamingAWorkflowCallsTheCapability(t *testing.T) {
	st := NewStack(t, time.Second)
	d, e := st.WorkflowDispatcher(config.Config{})
	fx := newEffects()
	steps := seqSteps()
	steps["wf.seq"] = func(map[string]any) (any, *streams.Error) { return map[string]any{"from": "the capability"}, nil }
	stepAgent(t, st.Conn(), "seq-1", fx, steps)
	WaitRoutable(t, "wf.seq", 1, d)
	nc := st.Conn()
	PutWorkflow(t, nc, seqWorkflow, e)
	PutWorkflow(t, nc, "name: wf.outer\nsteps:\n  - name: inner\n    call: wf.seq\n    input: {order: 7}\noutput: $steps.inner.result\n", e)

	res := callWorkflow(t, nc, "wf.outer", `{}`)
	if got := decodeBody(t, res); res.Header.Get(streams.HeaderStatus) != "FINISHED" || got["from"] != "the capability" {
		t.Fatalf("wf.outer: %v %s, want the capability's result", res.Header, res.Data)
	}
	res = callWorkflow(t, nc, "wf.seq", `{"order": 7}`)
	if got := decodeBody(t, res); res.Header.Get(streams.HeaderStatus) != "FINISHED" || got["tracking"] != "T-R-7-H-7" {
		t.Fatalf("wf.seq: %v %s, want the workflow's output", res.Header, res.Data)
	}
}
