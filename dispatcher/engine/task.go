package engine

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/durable"
	"github.com/agent-reach/agentreach/dispatcher/selection"
	"github.com/agent-reach/agentreach/dispatcher/tracing"
	"github.com/agent-reach/agentreach/registry/declare"
	"github.com/agent-reach/agentreach/streams"
)

// Task is one request travelling through the engine: its entry makes it
// (NewTask) and runs it (Run); the stages read and write its fields.
type Task struct {
	req         *nats.Msg
	capability  string
	requestID   string
	orchID      string
	source      string // Reach-Source: with an authorizer, the identity proven (cancel.go)
	owner       string // a durable task's <source> token (streams.ResultSource); "" until NewTask has it
	affinity    string
	unicast     string
	contentType string
	hops        int
	wish        time.Duration // caller's Reach-Timeout
	deadline    time.Time
	budget      float64 // 0: none
	spent       float64
	visits      []string // Reach-Visits as received
	attempts    int
	triedIDs    []string       // instances that failed this task
	skipIDs     []string       // instances passed over in the current pick
	retryTried  bool           // the current pick may reuse tried instances
	node        string         // the instance that produced the outcome
	last        *streams.Error // the latest attempt's error
	// lastUnreachable: the latest attempt's instance was unreachable (no
	// ACK, no subscription, gone), so the work most likely never started.
	lastUnreachable bool
	start           time.Time
	done            func(t *Task, res *nats.Msg, e *streams.Error) // runs once, with the outcome
	wait            selection.Waiting[*Task]                       // its place in its capability's wait queue (queue.go)
	seq             uint64                                         // stream sequence of a durable task; 0 on the direct tier
	inDoubt         bool                                           // the last error is an idempotent execution's unknown outcome (Reach-In-Doubt)
	// Cancellation (cancel.go): stopped holds why, once set; waiting is
	// true while a backoff timer owns t.
	pol *config.Capability // its capability's settings when it started (policy.go)
	// Matching (decode.go, resolve.go, pick.go): the requirement and
	// preference, the view of the instances that meet it, the instances a
	// pick passed over and why, and the types whose input schema refused
	// the payload.
	need     declare.Requirement
	needKey  string
	prefer   string
	view     *selection.View
	passed   []streams.Exclusion
	badTypes []string
	started  bool             // run has checked and admitted it
	admitted bool             // holds one of its capability's in-flight slots
	noRetry  bool             // Call's WithoutRetries
	hedge    *selection.Hedge // its capability's hedging, nil when off (hedge.go)
	stopped  atomic.Pointer[streams.Error]
	waiting  atomic.Bool
	// mu guards what concurrent deliveries of a hedged task both touch:
	// open (the deliveries not yet settled), ended (an outcome was decided),
	// and attempts, node, spent, inDoubt and triedIDs while deliveries run.
	// Before the first delivery and after the outcome one owner holds t.
	mu        sync.Mutex
	open      []*delivery
	ended     bool
	hedged    bool    // a hedge delivery was sent
	hedgedWon bool    // the outcome came from the hedge
	relay     *stream // a streamed task's relay to its caller (stream.go); fixed at its start
	log       TaskLog
	span      trace.Span // from its start to its outcome (dispatcher/tracing)
}

// TaskLog puts a task's fields on every event it starts. Unlike a child
// logger it costs nothing per task while its level is disabled.
type TaskLog struct {
	base *zerolog.Logger
	t    *Task
}

func (l TaskLog) with(e *zerolog.Event) *zerolog.Event {
	if e == nil {
		return nil
	}
	e = e.Str("request_id", l.t.requestID).Str("capability", l.t.capability)
	if l.t.seq > 0 {
		e = e.Str("tier", "durable").Str("stream", streams.StreamTasks).Uint64("seq", l.t.seq)
	}
	return e
}

func (l TaskLog) Debug() *zerolog.Event { return l.with(l.base.Debug()) }

func (l TaskLog) Info() *zerolog.Event { return l.with(l.base.Info()) }

func (l TaskLog) Warn() *zerolog.Event { return l.with(l.base.Warn()) }

func (l TaskLog) Error() *zerolog.Event { return l.with(l.base.Error()) }

// tried reports whether a strategy must not pick id now.
func (t *Task) tried(id string) bool {
	return slices.Contains(t.skipIDs, id) || (!t.retryTried && slices.Contains(t.triedIDs, id))
}

// VisitsOf counts how often this chain has reached instance id.
func (t *Task) VisitsOf(id string) int {
	n := 0
	for _, v := range t.visits {
		if v == id {
			n++
		}
	}
	return n
}

// Tried reports whether a strategy must not pick id now (selection.Task).
func (t *Task) Tried(id string) bool { return t.tried(id) }

// AffinityKey is t's Reach-Affinity-Key (selection.Task).
func (t *Task) AffinityKey() string { return t.affinity }

// Preference is t's Reach-Prefer (selection.Task).
func (t *Task) Preference() string { return t.prefer }

// TraceTask starts t's span (tracing.Task), from its start to its outcome.
func (en *Engine) TraceTask(t *Task) {
	if tracing.Enabled() { // the subject is built only then
		t.span = tracing.Task(t.req.Header, en.cfg.Subjects.Task(t.capability), t.requestID, t.capability, t.seq > 0)
	}
}

// For the entries beside the engine (dispatcher's Call, Stream and
// OpenShared), which read a request with NewTask and run it.

// OnDone sets what runs once, with t's outcome: its result or its error.
func (t *Task) OnDone(f func(t *Task, res *nats.Msg, e *streams.Error)) { t.done = f }

// Streamed reports whether t's chunks are relayed to its caller
// (StartRelay).
func (t *Task) Streamed() bool { return t.relay != nil }

// NoRetries has t delivered once (dispatcher.WithoutRetries).
func (t *Task) NoRetries() { t.noRetry = true }

// Deadline is t's overall deadline.
func (t *Task) Deadline() time.Time { return t.deadline }

// SetDeadline moves t's overall deadline (to its caller's, when earlier).
func (t *Task) SetDeadline(deadline time.Time) { t.deadline = deadline }

// Request is the request t was read from, its headers as decoded.
func (t *Task) Request() *nats.Msg { return t.req }

// RequestID is t's request id (given or made up).
func (t *Task) RequestID() string { return t.requestID }

// OrchID is t's orchestration id.
func (t *Task) OrchID() string { return t.orchID }

// Capability is what t calls.
func (t *Task) Capability() string { return t.capability }

// ContentType is t's payload type.
func (t *Task) ContentType() string { return t.contentType }

// Source is t's caller as proven by the authorizer ("" without one).
func (t *Task) Source() string { return t.source }

// Hops is t's Reach-Hops on its deliveries.
func (t *Task) Hops() int { return t.hops }

// Visits is t's Reach-Visits as received.
func (t *Task) Visits() []string { return t.visits }

// Policy is its capability's settings when t started.
func (t *Task) Policy() *config.Capability { return t.pol }

// Log puts t's fields on every event it starts.
func (t *Task) Log() TaskLog { return t.log }

// Span is t's span, nil unless it records (dispatcher/tracing).
func (t *Task) Span() trace.Span { return t.span }

// Refused reports whether the input schema of instance type typ refused
// t's payload (checkInput).
func (t *Task) Refused(typ string) bool { return slices.Contains(t.badTypes, typ) }

// Pass notes an instance a pick passed over, and why (for NO_AGENT and the
// record).
func (t *Task) Pass(x streams.Exclusion) { t.passed = append(t.passed, x) }

// For the durable tier's entry (the Dispatcher's durable.Router).

// Durable is t as the durable tier records it.
func (t *Task) Durable() durable.Task {
	return durable.Task{Owner: t.owner, RequestID: t.requestID, OrchID: t.orchID, ContentType: t.contentType,
		Seq: t.seq, Node: t.node, Attempts: t.attempts}
}

// SetSeq makes t the durable task at seq in REACH_TASKS.
func (t *Task) SetSeq(seq uint64) { t.seq = seq }

// Claimed notes the instance and attempts of t's outcome as claimed.
func (t *Task) Claimed(node string, attempts int) { t.node, t.attempts = node, attempts }

// InDoubt reports whether t's error is an idempotent execution's unknown
// outcome (Reach-In-Doubt).
func (t *Task) InDoubt() bool { return t.inDoubt }
