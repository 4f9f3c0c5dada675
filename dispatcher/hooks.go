package dispatcher

import (
	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/dispatcher/engine"
	"github.com/agent-reach/agentreach/registry"
)

// Extension points. Packages beside the dispatcher plug in here rather
// than reaching into its routing: metrics (Observer), access control
// (Authorizer) and workflows (Resolver). Each is set with an Option at New
// and called from the dispatcher's own goroutines; none may block. The
// task engine (dispatcher/engine) defines the ones it calls.

// Observer sees every task the dispatcher ends and every record it writes
// (engine.Observer).
type Observer = engine.Observer

// Authorizer decides whether the sender of a task may call its capability
// (engine.Authorizer).
type Authorizer = engine.Authorizer

// ReplyChecker is an Authorizer that also says whether a task's reply
// subject may be answered at all (engine.ReplyChecker).
type ReplyChecker = engine.ReplyChecker

// Resolver takes over the tasks addressed to names it serves: workflows
// (engine.Resolver).
type Resolver = engine.Resolver

// ReplaySigner is an Authorizer that also signs the parked tasks the
// dispatcher's dead-letter replayer resubmits (auth.Authorizer: as their
// Reach-Source, which the stored copy no longer proves).
type ReplaySigner interface {
	SignReplay(m *nats.Msg) error
}

// RecordChecker is an Authorizer that also decides which agent records
// may be routed (auth.Authorizer: a record only its own identity, an
// agent, can have written, whose type is that identity's and whose every
// capability is within its grant). The dispatcher's routing table offers
// only the ready instances it admits (registry.RecordFilter), so every way
// a task finds instances — direct, durable, unicast, broadcast, fan-out
// branches, workflow steps — sees the same set. CheckRecord runs whenever
// a capability's routes are built (not per task) and logs what it refuses;
// FilterRevision changes when its answers may have (a new directory), and
// the routes are then built again.
type RecordChecker interface {
	CheckRecord(e *registry.Entry) error
	FilterRevision() uint64
}

// ExcludedNotGranted is the NO_AGENT exclusion reason of an instance whose
// record the authorizer (RecordChecker) does not let this dispatcher route
// (engine.ExcludedNotGranted).
const ExcludedNotGranted = engine.ExcludedNotGranted

// WithObserver adds an Observer; several may be added.
func WithObserver(o Observer) Option {
	return func(d *Dispatcher) { d.observers = append(d.observers, o) }
}

// WithAuthorizer makes every task pass a, after its headers are read and
// before it is routed. Without one every caller may call every capability.
func WithAuthorizer(a Authorizer) Option { return func(d *Dispatcher) { d.authorizer = a } }

// WithResolver hands the tasks addressed to names r serves to r.
func WithResolver(r Resolver) Option { return func(d *Dispatcher) { d.resolver = r } }
