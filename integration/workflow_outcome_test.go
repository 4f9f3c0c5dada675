package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/durable"
	"github.com/agent-reach/agentreach/dispatcher/events"
	"github.com/agent-reach/agentreach/dispatcher/workflow"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// One outcome per step: a replica runs a durable run's first step; while
// the step's task is out, another replica takes the run over (its write
// moves the record on, as a replica that got the redelivery after a stall
// does). The first replica then gets the step's result: its write loses,
// so it records nothing — no step event, no decision — and lets the run
// go; the redelivery resumes the run, the step is sent again under the
// same idempotency key and replayed by the agent. Two real dispatchers
// take the deliveries. Each step has exactly one recorded outcome (one
// workflow_step event), executed once, and the run one outcome.
// gatedSeq is wf.seq on two workflow dispatchers, its first step served by
// an idempotent agentkit agent whose first execution waits for release.
type gatedSeq struct {
	st       *Stack
	nc       *nats.Conn
	fx       *effects
	reserves atomic.Int64
	entered  chan struct{}
	release  chan struct{}
}

func newGatedSeq(t *testing.T) *gatedSeq {
	g := &gatedSeq{st: NewStack(t, time.Second), fx: newEffects(), entered: make(chan struct{}), release: make(chan struct{})}
	st := g.st
	cfg := config.Config{DurableAckWait: time.Second}
	cfg.Name = "replica-a"
	da, ea := st.WorkflowDispatcher(cfg)
	cfg.Name = "replica-b"
	db, eb := st.WorkflowDispatcher(cfg)
	steps := seqSteps()
	delete(steps, "seq.reserve")
	stepAgent(t, st.Conn(), "seq-1", g.fx, steps)
	a, err := agentkit.New(st.Conn(), agentkit.Config{Type: "reserve", ID: "reserve-1", Heartbeat: time.Second},
		agentkit.WithoutSignals(), agentkit.WithLogger(st.log))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Handle("seq.reserve", func(ctx context.Context, r *agentkit.Request) (any, error) {
		var in map[string]any
		if err := r.Decode(&in); err != nil {
			return nil, err
		}
		if g.reserves.Add(1) == 1 {
			close(g.entered)
			<-g.release
		}
		return map[string]any{"hold": fmt.Sprintf("H-%v", in["order"])}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Drain(context.Background()) })
	WaitRoutable(t, "seq.ship", 1, da, db)
	WaitRoutable(t, "seq.reserve", 1, da, db)
	g.nc = st.Conn()
	PutWorkflow(t, g.nc, seqWorkflow, ea, eb)
	return g
}

// submit submits a run and waits until its first step runs.
func (g *gatedSeq) submit(ctx context.Context, t *testing.T) string {
	id, err := g.st.Client().Submit(ctx, "wf.seq", map[string]int{"order": 3})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.entered:
	case <-ctx.Done():
		t.Fatal("the first step never ran")
	}
	return id
}

func TestAStepOutcomeIsRecordedOnceAcrossReplicas(t *testing.T) {
	g := newGatedSeq(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	id := g.submit(ctx, t)
	// Another replica takes the run over: its record moves on.
	nc, js := g.nc, jsOf(t, g.nc)
	kv, err := js.KeyValue(ctx, streams.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	kve, err := kv.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(kve.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	first := rec["owner"]
	rec["owner"] = "replica-x"
	b, _ := json.Marshal(rec)
	if _, err := kv.Update(ctx, id, b, kve.Revision()); err != nil {
		t.Fatal(err)
	}
	close(g.release)

	r := runRecord(t, nc, id)
	if r.Outcome != events.OutcomeResult || r.Status != workflow.RunFinished || r.Resumes != 1 {
		t.Fatalf("run record: outcome %s, status %s, resumes %d (first owner %v), decisions %v", r.Outcome, r.Status, r.Resumes, first, decisions(r))
	}
	// Every event of the run is in once its own record is.
	var evs []events.Event
	natstest.WaitFor(t, 10*time.Second, func() error {
		evs = readEvents(t, js)
		for _, ev := range evs {
			if ev.RequestID == id && ev.Kind == workflow.KindRun {
				return nil
			}
		}
		return errors.New("no run event yet")
	})
	perStep := map[string]int{}
	resumes := 0
	for _, ev := range evs {
		switch {
		case ev.ParentID == id && ev.Kind == workflow.KindStep:
			perStep[ev.RequestID]++
		case ev.ParentID == id && ev.Kind == workflow.KindDecision && ev.Outcome == workflow.DecisionResume:
			resumes++
		}
	}
	for _, step := range []string{"reserve", "charge", "ship"} {
		if n := perStep[id+"."+step]; n != 1 {
			t.Errorf("step %s: %d recorded outcomes (workflow_step events), want 1", step, n)
		}
	}
	if g.reserves.Load() != 1 || g.fx.count(id+".charge") != 1 || g.fx.count(id+".ship") != 1 || resumes != 1 {
		t.Errorf("reserve executed %d times, charge %d, ship %d; %d resume decisions", g.reserves.Load(), g.fx.count(id+".charge"), g.fx.count(id+".ship"), resumes)
	}
	o, err := ReadOutcomes(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	if o.Completed[id] != 1 || o.DeadLettered[id]+o.InReview[id] != 0 {
		t.Fatalf("run outcomes: %d results, %d dead letters, %d in review", o.Completed[id], o.DeadLettered[id], o.InReview[id])
	}
	t.Logf("first owner %v lost the run after its first step; %d resume, one outcome per step and one for the run", first, resumes)
}

// A durable run's final outcome is claimed on its REACH_TASKS message like
// a durable task's (REACH_OUTCOMES, task.<sequence>.<request id>): when
// another outcome holds the message — here a dead letter, as the
// dispatcher or another replica would have claimed it — the run's result
// is discarded, not recorded beside it. Control: the same run without the
// claim records its result (TestAStepOutcomeIsRecordedOnceAcrossReplicas).
func TestARunsOutcomeIsNotRecordedBesideAnotherClaimed(t *testing.T) {
	g := newGatedSeq(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	id := g.submit(ctx, t)
	js := jsOf(t, g.nc)
	tasks, err := js.Stream(ctx, streams.StreamTasks)
	if err != nil {
		t.Fatal(err)
	}
	m, err := tasks.GetLastMsgForSubject(ctx, streams.Subjects{}.Submit("wf.seq"))
	if err != nil {
		t.Fatal(err)
	}
	outcomes, err := js.KeyValue(ctx, streams.BucketOutcomes)
	if err != nil {
		t.Fatal(err)
	}
	claim := fmt.Sprintf(`{"outcome":%q,"reason":%q,"code":"NO_AGENT","message":"parked","request_id":%q,"by":"replica-x","at":%q}`,
		events.OutcomeDeadLetter, durable.ReasonFailed, id, time.Now().UTC().Format(time.RFC3339Nano))
	if _, err := outcomes.Create(ctx, fmt.Sprintf("task.%d.%s", m.Sequence, id), []byte(claim)); err != nil {
		t.Fatal(err)
	}
	close(g.release)
	r := runRecord(t, g.nc, id)
	if r.Outcome != events.OutcomeResult {
		t.Fatalf("run record: outcome %s", r.Outcome)
	}
	// The message is settled (acknowledged) without a result.
	natstest.WaitFor(t, 20*time.Second, func() error {
		info, err := tasks.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs != 0 {
			return fmt.Errorf("%d tasks still in %s", info.State.Msgs, streams.StreamTasks)
		}
		return nil
	})
	o, err := ReadOutcomes(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	if o.Completed[id] != 0 {
		t.Fatalf("%d results recorded beside the claimed dead letter", o.Completed[id])
	}
}
