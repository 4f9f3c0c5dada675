package workflow

import (
	"encoding/json"
	"github.com/agent-reach/agentreach/dispatcher/events"
	"time"

	"github.com/agent-reach/agentreach/dispatcher/workflow/spec"
	"github.com/agent-reach/agentreach/streams"
)

// RunStatus is where a run is.
type RunStatus string

// Run states.
const (
	// RunRunning: a replica runs its steps.
	RunRunning RunStatus = "running"
	// RunWaiting: a durable run whose step found no capacity (no agent,
	// every breaker open, every instance busy); it waits in REACH_TASKS and
	// continues from the step it stopped at. (A compensation that finds no
	// capacity waits the same way, its run staying RunCompensating.)
	RunWaiting RunStatus = "waiting"
	// RunCompensating: a critical step failed and the steps before it are
	// being undone, in reverse order.
	RunCompensating RunStatus = "compensating"
	// RunFinished: every step ran, or was skipped; Output holds the answer.
	RunFinished RunStatus = "finished"
	// RunFailed: the run ended at FailedStep with Error.
	RunFailed RunStatus = "failed"
)

// Final reports whether a run in state s has ended.
func (s RunStatus) Final() bool { return s == RunFinished || s == RunFailed }

// StepStatus is where a step of a run is.
type StepStatus string

// Step states.
const (
	StepPending StepStatus = "pending"
	// StepRunning: its task was sent and its outcome is not recorded yet;
	// a run resumed after a crash sends it again, with the same
	// idempotency key.
	StepRunning     StepStatus = "running"
	StepDone        StepStatus = "done"
	StepFailed      StepStatus = "failed"
	StepSkipped     StepStatus = "skipped"
	StepCompensated StepStatus = "compensated"
)

// Decision kinds, in a run's Decisions and as the Outcome of its
// workflow_decision events.
const (
	DecisionWhenTrue   = "when_true"  // the step's condition held: it runs
	DecisionWhenFalse  = "when_false" // it did not: the step is skipped
	DecisionSkip       = "skip"       // the step failed and on_failure skips it
	DecisionFallback   = "fallback"   // the step failed and its fallback is called
	DecisionAbort      = "abort"      // the step failed and the run ends
	DecisionCompensate = "compensate" // a done step is undone after a critical failure
	DecisionWait       = "wait"       // no capacity: the durable run waits in the stream
	DecisionResume     = "resume"     // a replica took the run over (after a crash, a wait, a drain)
	DecisionReopen     = "reopen"     // a parked run was replayed: its failed step runs again
)

// Run is a workflow run as REACH_RUNS holds it (key = run id, JSON): what
// the run was asked, the definition it runs, each step's outcome and every
// decision. A durable run's record is written before each step is sent
// and after its last step; a direct-tier run's once, when it has ended.
type Run struct {
	// ID is the run id: the request id of the call that started it.
	ID       string `json:"id"`
	Workflow string `json:"workflow"`
	// Version is the REACH_POLICY revision of the definition the run
	// started with, and keeps.
	Version         uint64    `json:"version"`
	Tier            string    `json:"tier"` // "direct" or "durable"
	Status          RunStatus `json:"status"`
	OrchestrationID string    `json:"orchestration_id"`
	ParentID        string    `json:"parent_id,omitempty"`
	// Source is a durable run's caller, as its result subject names it
	// (streams.ResultSource): only that caller's deliveries resume it.
	Source string `json:"source,omitempty"`
	// ContentType is the caller's, which the answer is in.
	ContentType string    `json:"content_type"`
	Deadline    time.Time `json:"deadline"`
	// Params are the run's parameters: the defaults with the call's
	// overrides.
	Params json.RawMessage `json:"params,omitempty"`
	Input  json.RawMessage `json:"input"`
	Output json.RawMessage `json:"output,omitempty"`
	// Error is why a failed run failed; FailedStep names its step ("" when
	// the output mapping failed).
	Error      *streams.Error `json:"error,omitempty"`
	FailedStep string         `json:"failed_step,omitempty"`
	// Outcome is where the run's answer went: reply (direct tier), result,
	// dead_letter or review (dispatcher.Outcome…); Reason, for a parked
	// run, why.
	Outcome   string     `json:"outcome,omitempty"`
	Reason    string     `json:"reason,omitempty"`
	Steps     []*StepRun `json:"steps"`
	Decisions []Decision `json:"decisions"`
	// Owner is the dispatcher replica running the run ("" while it waits).
	Owner string `json:"owner,omitempty"`
	// Resumes counts the times a replica took the run over; Replays the
	// replays of the parked run (its Reach-DLQ-Count).
	Resumes int       `json:"resumes,omitempty"`
	Replays int       `json:"replays,omitempty"`
	Started time.Time `json:"started"`
	Updated time.Time `json:"updated"`
	Ended   time.Time `json:"ended,omitzero"`
	// Definition is the definition the run started with.
	Definition json.RawMessage `json:"definition"`

	def      *spec.Definition
	revision uint64 // of the record in REACH_RUNS, as last read or written
	// pending are a durable run's step and decision events not recorded
	// yet: they go to REACH_EVENTS once the record that holds their step
	// outcomes and decisions is written (Engine.write), and are discarded
	// when another replica's write won — so each is recorded once.
	pending []events.Event
}

// StepRun is one step of a Run.
type StepRun struct {
	Name   string     `json:"name"`
	Status StepStatus `json:"status"`
	// CallRun is how the step's own task went (for a parallel step, the
	// branches' attempts summed; Branches says the rest). Its Capability
	// is what produced the result: the call, or the fallback.
	CallRun
	// Condition is the step's when as evaluated, and its value.
	Condition *ConditionRun `json:"condition,omitempty"`
	// Skipped says why a skipped step did not run.
	Skipped string          `json:"skipped,omitempty"`
	Input   json.RawMessage `json:"input,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	// Branches and Missing are a parallel step's branches (their results
	// are in Result).
	Branches []streams.BranchReply `json:"branches,omitempty"`
	Missing  []streams.Missing     `json:"missing,omitempty"`
	// Fallback is the call of on_failure's fallback, Compensation the call
	// that undid the step.
	Fallback     *CallRun `json:"fallback,omitempty"`
	Compensation *CallRun `json:"compensation,omitempty"`
}

// CallRun is one task a run sent: a step's, its fallback's or its
// compensation's.
type CallRun struct {
	Capability string `json:"capability,omitempty"`
	// Status is a fallback's or compensation's: pending, running, done or
	// failed (a step's own is the step's Status).
	Status StepStatus `json:"call_status,omitempty"`
	Node   string     `json:"node,omitempty"`
	// Attempts counts deliveries, over every send; Sends the times the run
	// sent the task (more than 1: sent again after a crash or a wait).
	Attempts  int            `json:"attempts,omitempty"`
	Sends     int            `json:"sends,omitempty"`
	LatencyMS float64        `json:"latency_ms,omitempty"`
	Started   time.Time      `json:"started,omitzero"`
	Ended     time.Time      `json:"ended,omitzero"`
	Error     *streams.Error `json:"error,omitempty"`
	// InDoubt: the task's idempotent execution has an unknown outcome
	// (Reach-In-Doubt).
	InDoubt bool `json:"in_doubt,omitempty"`
}

// ConditionRun is a step's condition as evaluated: as written, its value,
// and what it compared (each comparison evaluated with the values found).
type ConditionRun struct {
	Text  string `json:"text"`
	Value bool   `json:"value"`
	Trace string `json:"trace"`
}

// Decision is one decision of a run: a condition's value, a skip, a
// fallback, an abort, a compensation, a wait, a resumption.
type Decision struct {
	At     time.Time `json:"at"`
	Step   string    `json:"step,omitempty"`
	Kind   string    `json:"kind"`
	Detail string    `json:"detail"`
}
