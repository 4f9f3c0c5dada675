package dispatcher

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/selection"
	"github.com/agent-reach/agentreach/dispatcher/tracing"
	"github.com/agent-reach/agentreach/registry/declare"
	"github.com/agent-reach/agentreach/streams"
)

// task is one request travelling through the dispatcher.
type task struct {
	req         *nats.Msg
	capability  string
	requestID   string
	orchID      string
	source      string // Reach-Source: with an authorizer, the identity proven (cancel.go)
	owner       string // a durable task's <source> token (streams.ResultSource); "" until newTask has it
	caller      string // whose in-flight slot it holds (admit); answer gives it back
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
	done            func(t *task, res *nats.Msg, e *streams.Error) // runs once, with the outcome
	wait            selection.Waiting[*task]                       // its place in its capability's wait queue (queue.go)
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
	log       taskLog
	span      trace.Span // from its start to its outcome (dispatcher/tracing)
}

// taskLog puts a task's fields on every event it starts. Unlike a child
// logger it costs nothing per task while its level is disabled.
type taskLog struct {
	base *zerolog.Logger
	t    *task
}

func (l taskLog) with(e *zerolog.Event) *zerolog.Event {
	if e == nil {
		return nil
	}
	e = e.Str("request_id", l.t.requestID).Str("capability", l.t.capability)
	if l.t.seq > 0 {
		e = e.Str("tier", "durable").Str("stream", streams.StreamTasks).Uint64("seq", l.t.seq)
	}
	return e
}

func (l taskLog) Debug() *zerolog.Event { return l.with(l.base.Debug()) }

func (l taskLog) Info() *zerolog.Event { return l.with(l.base.Info()) }

func (l taskLog) Warn() *zerolog.Event { return l.with(l.base.Warn()) }

func (l taskLog) Error() *zerolog.Event { return l.with(l.base.Error()) }

// tried reports whether a strategy must not pick id now.
func (t *task) tried(id string) bool {
	return slices.Contains(t.skipIDs, id) || (!t.retryTried && slices.Contains(t.triedIDs, id))
}

// visitsOf counts how often this chain has reached instance id.
func (t *task) visitsOf(id string) int {
	n := 0
	for _, v := range t.visits {
		if v == id {
			n++
		}
	}
	return n
}

// Tried reports whether a strategy must not pick id now (selection.Task).
func (t *task) Tried(id string) bool { return t.tried(id) }

// AffinityKey is t's Reach-Affinity-Key (selection.Task).
func (t *task) AffinityKey() string { return t.affinity }

// Preference is t's Reach-Prefer (selection.Task).
func (t *task) Preference() string { return t.prefer }

// traceTask starts t's span (tracing.Task), from its start to its outcome.
func (d *Dispatcher) traceTask(t *task) {
	if tracing.Enabled() { // the subject is built only then
		t.span = tracing.Task(t.req.Header, d.cfg.Subjects.Task(t.capability), t.requestID, t.capability, t.seq > 0)
	}
}
