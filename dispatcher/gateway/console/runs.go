package console

import (
	"context"
	"errors"
	"net/http"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/dispatcher/workflow"
	"github.com/agent-reach/agentreach/streams"
)

// RunSummary is a workflow run as GET /v1/console/runs lists it (what
// `agentreach runs ls --json` prints).
type RunSummary struct {
	ID         string             `json:"id"`
	Workflow   string             `json:"workflow"`
	Tier       string             `json:"tier"`
	Status     workflow.RunStatus `json:"status"`
	Outcome    string             `json:"outcome,omitempty"`
	Started    time.Time          `json:"started"`
	Ended      time.Time          `json:"ended,omitzero"`
	Steps      int                `json:"steps"`
	Done       int                `json:"done"`
	FailedStep string             `json:"failed_step,omitempty"`
	Error      *streams.Error     `json:"error,omitempty"`
}

// runsListed bounds the runs a listing returns (the newest).
const runsListed = 100

// mayRead says whether id may read run r: with auth off anyone, an
// operator any run, another identity its own durable runs.
func mayRead(id *Identity, r *workflow.Run) bool {
	return id == nil || id.Operator || (r.Source != "" && r.Source == id.Name)
}

func (c *Console) runsBucket(ctx context.Context) (jetstream.KeyValue, *streams.Error) {
	kv, err := c.cfg.JS.KeyValue(ctx, streams.BucketRuns)
	if err != nil {
		return nil, streams.NewError(streams.CodeInternal, "open %s: %v", streams.BucketRuns, err)
	}
	return kv, nil
}

// runs is GET /v1/console/runs: the newest runs the requester may read.
func (c *Console) runs(w http.ResponseWriter, r *http.Request) {
	id, e := c.who(r)
	if e != nil {
		writeError(w, r, e)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	kv, e := c.runsBucket(ctx)
	if e != nil {
		writeError(w, r, e)
		return
	}
	all, _, err := workflow.ListRuns(ctx, kv)
	if err != nil {
		writeError(w, r, streams.NewError(streams.CodeInternal, "list %s: %v", streams.BucketRuns, err))
		return
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Started.After(all[j].Started) })
	out := []RunSummary{}
	for _, run := range all {
		if len(out) == runsListed {
			break
		}
		if !mayRead(id, run) {
			continue
		}
		s := RunSummary{ID: run.ID, Workflow: run.Workflow, Tier: run.Tier, Status: run.Status, Outcome: run.Outcome,
			Started: run.Started.UTC(), Ended: run.Ended.UTC(), Steps: len(run.Steps), FailedStep: run.FailedStep, Error: run.Error}
		for _, sr := range run.Steps {
			if sr.Status == workflow.StepDone || sr.Status == workflow.StepCompensated {
				s.Done++
			}
		}
		out = append(out, s)
	}
	writeJSON(w, http.StatusOK, out)
}

// run is GET /v1/console/runs/{id}: the run's record, steps and decisions
// (what `agentreach runs show --json` prints).
func (c *Console) run(w http.ResponseWriter, r *http.Request) {
	runID := r.PathValue("id")
	if err := streams.ValidateInstanceID(runID); err != nil {
		writeError(w, r, streams.NewError(streams.CodeBadRequest, "run id: %v", err))
		return
	}
	id, e := c.who(r)
	if e != nil {
		writeError(w, r, e)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	kv, e := c.runsBucket(ctx)
	if e != nil {
		writeError(w, r, e)
		return
	}
	run, err := workflow.GetRun(ctx, kv, runID)
	switch {
	case errors.Is(err, workflow.ErrNoRun) || (err == nil && !mayRead(id, run)):
		writeError(w, r, streams.NewError(CodeNotFound, "no run %s that you may read (records are kept 7 days)", runID))
		return
	case err != nil:
		writeError(w, r, streams.NewError(streams.CodeInternal, "read run %s: %v", runID, err))
		return
	}
	writeJSON(w, http.StatusOK, run)
}
