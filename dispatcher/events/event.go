package events

import (
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/agent-reach/agentreach/streams"
)

// Event is the feedback record every task leaves in REACH_EVENTS (on
// reach.event.<capability>) when it ends: who could take it, who did, how
// long it took, how many attempts and what it cost.
type Event struct {
	RequestID       string `json:"request_id"`
	OrchestrationID string `json:"orchestration_id"`
	Capability      string `json:"capability"`
	// Source is the task's caller (Reach-Source; with auth on, the
	// identity proven), when it names one.
	Source     string `json:"source,omitempty"`
	Tier       string `json:"tier"` // "direct" or "durable"
	Dispatcher string `json:"dispatcher"`
	Status     string `json:"status"`         // FINISHED, FAILED, TIMEOUT
	Code       string `json:"code,omitempty"` // the error code of a failed task
	// Error is the message of that error, cut to MaxErrorInEvents bytes.
	Error string `json:"error,omitempty"`
	// Unknown is set on a NO_AGENT task whose capability no instance has
	// offered since the replica started and no workflow serves: a name
	// never registered (most likely a typo), which counts as the
	// caller's doing (Class).
	Unknown    bool      `json:"unknown,omitempty"`
	Outcome    string    `json:"outcome"`          // reply; durable: result, dead_letter, review
	Candidates int       `json:"candidates"`       // routable instances when it started
	Node       string    `json:"node,omitempty"`   // the instance of the last attempt
	Failed     []string  `json:"failed,omitempty"` // instances whose attempts failed, in order
	Attempts   int       `json:"attempts"`
	Cost       float64   `json:"cost,omitempty"`
	LatencyMS  float64   `json:"latency_ms"`
	Start      time.Time `json:"start"`
	// ParentID is the request id of the fan-out, broadcast or workflow run
	// a task was a branch or step of (Reach-Parent-Id).
	ParentID string `json:"parent_id,omitempty"`
	// Kind is "fanout" or "broadcast" for the record of a scatter-gather
	// itself (its branches leave records of their own); empty for a task.
	Kind string `json:"kind,omitempty"`
	// Expected, Answered and Succeeded count a scatter-gather's branches.
	Expected  int `json:"expected,omitempty"`
	Answered  int `json:"answered,omitempty"`
	Succeeded int `json:"succeeded,omitempty"`
	// By is who resolved a review entry (durable.RecordResolution).
	By string `json:"by,omitempty"`
	// Hedged is set when a hedge was sent for the task (docs/reference.md, Hedged requests);
	// HedgeWon when the hedge's answer was the one used.
	Hedged   bool `json:"hedged,omitempty"`
	HedgeWon bool `json:"hedge_won,omitempty"`
	// Score is a feedback record's score of the result of RequestID, from
	// 0 (useless) to 1 (perfect); Kind is then "feedback" and Node the
	// instance that produced the result.
	Score *float64 `json:"score,omitempty"`
	// Excluded lists the instances offering the capability that the task
	// could not go to, and why: requirements not met, a dependency down,
	// too slow for max_latency_ms, a breaker open — the first few of them;
	// ExcludedTotal counts them all.
	Excluded      []streams.Exclusion `json:"excluded,omitempty"`
	ExcludedTotal int                 `json:"excluded_total,omitempty"`
	// Streamed is set for a task whose caller asked for its chunks
	// (Reach-Stream); Chunks counts those relayed, and FirstChunkMS is the
	// time from the task's start to its first chunk relayed (0: none).
	// LatencyMS is the stream's total time.
	Streamed     bool    `json:"streamed,omitempty"`
	Chunks       int     `json:"chunks,omitempty"`
	FirstChunkMS float64 `json:"first_chunk_ms,omitempty"`
}

// The counting model (docs/operations.md, "The counting model"): every
// surface — a replica's Stats (reach.api.stats), its Prometheus metrics, the
// aggregate of REACH_EVENTS (reach.api.summary, `agentreach stats --by`) and
// the dashboard — counts records with Event.Count, so they count the same
// units the same way.
//
//   - A task is one piece of routed work with its own request id, ended once
//     by one record: a call (over NATS or HTTP), a durable task, a branch of
//     a broadcast or fan-out, a workflow step's call. It ends FINISHED,
//     rejected (the caller's own doing: ClassOf) or failed (the service's).
//   - A broadcast or fan-out is one request answered once, after gathering
//     its branches; its own record counts it, and the branches it expected.
//   - A branch is one of those expected parts; each runs as a task.
//   - A retry is an attempt of a task after its first, a hedge not counted.
//
// Requests refused before they become tasks (OVERLOADED at admission, no
// reply subject) leave no record and are counted apart (Stats.Overloaded,
// Stats.Dropped).

// Class is how a task's (or a scatter-gather's) outcome counts.
type Class string

// The classes of an outcome.
const (
	ClassFinished Class = "finished" // it ended FINISHED
	ClassRejected Class = "rejected" // the caller's own doing: see ClassOf
	ClassFailed   Class = "failed"   // any other error: a failure of the service
)

// ClassOf returns the class of an outcome with error code code ("" for
// FINISHED). The caller's own doing — the agent rejected the request
// (BIZ_REJECT), it was malformed (BAD_REQUEST), too large
// (PAYLOAD_TOO_LARGE), not allowed (UNAUTHORIZED) or cancelled by the caller
// (CANCELLED) — is ClassRejected; every other code is ClassFailed.
func ClassOf(code string) Class {
	switch streams.Code(code) {
	case "":
		return ClassFinished
	case streams.CodeBizReject, streams.CodeBadRequest, streams.CodePayloadTooLarge, streams.CodeUnauthorized,
		streams.CodeCancelled:
		return ClassRejected
	}
	return ClassFailed
}

// Class returns the class of a task's record: ClassOf its code, except
// that NO_AGENT for a name never registered (Unknown) is the caller's
// doing.
func (ev *Event) Class() Class {
	if ev.Unknown && ev.Code == string(streams.CodeNoAgent) {
		return ClassRejected
	}
	return ClassOf(ev.Code)
}

// MaxErrorInEvents bounds Event.Error, in bytes.
const MaxErrorInEvents = 256

// ErrorText returns msg cut to MaxErrorInEvents bytes (on a rune
// boundary), for Event.Error.
func ErrorText(msg string) string {
	if len(msg) <= MaxErrorInEvents {
		return msg
	}
	cut := MaxErrorInEvents - len("…")
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "…"
}

// Counts is what records add up to by the counting model. Tasks is
// Finished + Rejected + Failed.
type Counts struct {
	Tasks    int64 `json:"tasks"`
	Finished int64 `json:"finished"`
	Rejected int64 `json:"rejected"` // the caller's own doing (ClassOf)
	Failed   int64 `json:"failed"`   // the service's failures
	// Retries counts the attempts of tasks after their first, hedges not
	// counted.
	Retries int64 `json:"retries"`
	// Broadcasts and FanOuts count the scatter-gathers answered; Branches
	// the branches they expected (each of which is a task of its own).
	Broadcasts int64 `json:"broadcasts"`
	FanOuts    int64 `json:"fanouts"`
	Branches   int64 `json:"branches"`
}

// Record kinds that count as a scatter-gather (Event.Kind).
const (
	KindBroadcast = "broadcast"
	KindFanOut    = "fanout"
)

// IsTask reports whether ev is a task's own record: no kind, and not a
// person's resolution of a review entry.
func (ev *Event) IsTask() bool { return ev.Kind == "" && !strings.HasPrefix(ev.Outcome, "review_") }

// Count returns what ev adds to the counts: one task of its class with its
// retries, or one broadcast or fan-out with the branches it expected, or
// nothing (a feedback score, a workflow's records, a review's resolution).
func (ev *Event) Count() Counts {
	var c Counts
	switch {
	case ev.IsTask():
		c.Tasks = 1
		switch ev.Class() {
		case ClassFinished:
			c.Finished = 1
		case ClassRejected:
			c.Rejected = 1
		default:
			c.Failed = 1
		}
		extra := ev.Attempts - 1
		if ev.Hedged {
			extra-- // the hedge is no retry
		}
		c.Retries = int64(max(extra, 0))
	case ev.Kind == KindBroadcast:
		c.Broadcasts, c.Branches = 1, int64(ev.Expected)
	case ev.Kind == KindFanOut:
		c.FanOuts, c.Branches = 1, int64(ev.Expected)
	}
	return c
}

// Add adds o to c.
func (c *Counts) Add(o Counts) {
	c.Tasks += o.Tasks
	c.Finished += o.Finished
	c.Rejected += o.Rejected
	c.Failed += o.Failed
	c.Retries += o.Retries
	c.Broadcasts += o.Broadcasts
	c.FanOuts += o.FanOuts
	c.Branches += o.Branches
}

// Tally is a replica's Counts of the records it made, lock-free. The zero
// value is ready.
type Tally struct {
	finished, rejected, failed, retries, broadcasts, fanouts, branches atomic.Int64
}

// Add counts c.
func (t *Tally) Add(c Counts) {
	for _, f := range [...]struct {
		n *atomic.Int64
		v int64
	}{{&t.finished, c.Finished}, {&t.rejected, c.Rejected}, {&t.failed, c.Failed},
		{&t.retries, c.Retries}, {&t.broadcasts, c.Broadcasts}, {&t.fanouts, c.FanOuts}, {&t.branches, c.Branches}} {
		if f.v != 0 {
			f.n.Add(f.v)
		}
	}
}

// Load reads the counts; Tasks is the sum of its classes, so a snapshot
// taken while a record is counted still adds up.
func (t *Tally) Load() Counts {
	c := Counts{Finished: t.finished.Load(), Rejected: t.rejected.Load(), Failed: t.failed.Load(),
		Retries: t.retries.Load(), Broadcasts: t.broadcasts.Load(), FanOuts: t.fanouts.Load(), Branches: t.branches.Load()}
	c.Tasks = c.Finished + c.Rejected + c.Failed
	return c
}

// Record kinds that count for nothing (Event.Kind).
const (
	// KindFeedback is the Kind of a feedback record (Event.Score).
	KindFeedback = "feedback"
)

// Outcomes named in event records.
const (
	OutcomeReply      = "reply"       // direct tier: answered to the caller
	OutcomeResult     = "result"      // durable: stored in REACH_RESULTS
	OutcomeDeadLetter = "dead_letter" // durable: parked in REACH_DLQ
	OutcomeReview     = "review"      // durable: parked in REACH_REVIEW
	// A person's resolution of a review entry (durable.RecordResolution).
	OutcomeReviewRerun = "review_rerun" // the task was resubmitted to run again
	OutcomeReviewDrop  = "review_drop"  // the entry was deleted; the task runs no more
)

// ExcludedInEvents is how many exclusions an event record lists;
// Event.ExcludedTotal counts them all.
const ExcludedInEvents = 8

// StatusOf is the Reach-Status of a task that ended with e: TIMEOUT for
// the code TIMEOUT, FAILED for every other.
func StatusOf(e *streams.Error) string {
	if e.Code == streams.CodeTimeout {
		return string(streams.StatusTimeout)
	}
	return string(streams.StatusFailed)
}
