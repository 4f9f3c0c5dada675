package dispatcher

import (
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/streams"
)

// Extension points. Packages beside the dispatcher plug in here rather
// than reaching into its routing: metrics (Observer), access control
// (Authorizer) and workflows (Resolver). Each is set with an Option at New
// and called from the dispatcher's own goroutines; none may block.

// Observer sees every task the dispatcher ends and every record it writes
// (a task's, a fan-out's, a resolution's): the record REACH_EVENTS gets,
// whether or not this replica writes records (NoEvents). Observed must not
// block, nor keep ev or write to it.
type Observer interface {
	Observed(ev *Event)
}

// Authorizer decides whether the sender of a task may call its capability,
// before anything is routed: it returns nil, or the error the caller gets
// (UNAUTHORIZED, or BAD_REQUEST for a credential that does not parse). m is
// the task as it arrived (its headers name and prove the caller); durable
// says whether it came through REACH_TASKS. Authorize runs on every task,
// so it must be fast.
type Authorizer interface {
	Authorize(capability string, m *nats.Msg, durable bool) *streams.Error
}

// Resolver takes over the tasks addressed to names it serves — workflows,
// which shadow a capability of the same name — on both tiers.
//
// Serves is asked for every task (it must be cheap). Direct gets a
// direct-tier request, whose reply it owes m.Reply once; Durable a durable
// one, which it must acknowledge only once its outcome is recorded (or
// leave to be redelivered). Both run on a goroutine of their own, and the
// task holds one of the replica's MaxInFlight slots until they return.
type Resolver interface {
	Serves(name string) bool
	Direct(m *nats.Msg, name string)
	Durable(msg jetstream.Msg, name string)
}

// WithObserver adds an Observer; several may be added.
func WithObserver(o Observer) Option {
	return func(d *Dispatcher) { d.observers = append(d.observers, o) }
}

// WithAuthorizer makes every task pass a, after its headers are read and
// before it is routed. Without one every caller may call every capability.
func WithAuthorizer(a Authorizer) Option { return func(d *Dispatcher) { d.authorizer = a } }

// WithResolver hands the tasks addressed to names r serves to r.
func WithResolver(r Resolver) Option { return func(d *Dispatcher) { d.resolver = r } }

// observe hands a record to every observer.
func (d *Dispatcher) observe(ev *Event) {
	for _, o := range d.observers {
		o.Observed(ev)
	}
}

// resolved hands a direct-tier task to the resolver when it serves the
// name, on a goroutine that holds an in-flight slot; it reports whether it
// did.
func (d *Dispatcher) resolved(m *nats.Msg, name string) bool {
	if d.resolver == nil || !d.resolver.Serves(name) {
		return false
	}
	if d.authorizer != nil {
		if e := d.authorizer.Authorize(name, m, false); e != nil {
			d.refuse(m, e)
			d.release()
			return true
		}
	}
	go func() {
		defer d.release()
		d.resolver.Direct(m, name)
	}()
	return true
}
