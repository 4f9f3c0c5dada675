package dispatcher

import (
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/registry"
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

// ReplaySigner is an Authorizer that also signs the parked tasks the
// dispatcher's dead-letter replayer resubmits (auth.Authorizer: as their
// Reach-Source, which the stored copy no longer proves).
type ReplaySigner interface {
	SignReplay(m *nats.Msg) error
}

// ReplyChecker is an Authorizer that also says, before a task received on
// reach.task is admitted or anything is answered, whether its reply
// subject may be answered at all (auth.Authorizer: only inside its
// caller's own inbox). A task it refuses is dropped unanswered — even the
// refusal, published there, would act for whoever chose the subject — and
// the checker logs it.
type ReplyChecker interface {
	CheckReply(m *nats.Msg) *streams.Error
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

// answerable reports whether the task m, received on reach.task, may be
// answered on its reply subject; one that may not is dropped and counted.
func (d *Dispatcher) answerable(m *nats.Msg) bool {
	if m.Reply == "" {
		d.stats.dropped.Add(1)
		d.log.Warn().Str("subject", m.Subject).Msg("task without reply subject dropped (use request/reply)")
		return false
	}
	if rc, ok := d.authorizer.(ReplyChecker); ok && rc.CheckReply(m) != nil {
		d.stats.dropped.Add(1)
		return false
	}
	return true
}

// Resolver takes over the tasks addressed to names it serves — workflows,
// which shadow a capability of the same name — on both tiers and from
// every way in: reach.task, reach.submit and Call (so the HTTP gateway and
// fan-out branches too).
//
// Serves is asked for every task (it must be cheap); Names lists the names
// served (for a "did you mean" when a name is unknown). Direct runs a
// direct-tier request and returns its reply, which the dispatcher sends to
// whoever asked (m.Reply, or Call's caller); Durable gets a durable one,
// which it must acknowledge only once its outcome is recorded (or leave to
// be redelivered). Both run on a goroutine of their own, and the task
// holds one of the replica's MaxInFlight slots until they return.
type Resolver interface {
	Serves(name string) bool
	Names() []string
	Direct(m *nats.Msg, name string) *nats.Msg
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

// Resolves reports whether the tasks addressed to name go to the resolver
// (name is a workflow's) rather than to the instances of a capability.
func (d *Dispatcher) Resolves(name string) bool {
	return d.resolver != nil && d.resolver.Serves(name)
}

// resolved hands a task from reach.task to the resolver when it serves the
// name, on a goroutine that holds caller's in-flight slot and sends the
// reply to m.Reply; it reports whether it did.
func (d *Dispatcher) resolved(m *nats.Msg, name, caller string) bool {
	if !d.Resolves(name) {
		return false
	}
	go func() {
		defer d.release(caller)
		out := d.direct(m, name)
		out.Subject = m.Reply
		if err := d.nc.PublishMsg(out); err != nil {
			d.log.Warn().Err(err).Str("request_id", out.Header.Get(streams.HeaderRequestID)).Msg("reply failed")
		}
	}()
	return true
}

// direct runs a direct-tier task of a name the resolver serves, once the
// authorizer lets its caller call that name, and returns its reply. Every
// way in (resolved, Call) comes here; the caller holds an in-flight slot.
func (d *Dispatcher) direct(m *nats.Msg, name string) *nats.Msg {
	if d.authorizer != nil {
		if e := d.authorizer.Authorize(name, m, false); e != nil {
			return refusal(m, e)
		}
	}
	return d.resolver.Direct(m, name)
}

// knownNames is every name a task can address: the capabilities offered
// and the names the resolver serves, for a "did you mean" suggestion.
// Suggest returns, for a name no instance offers at all (likely a typo),
// the nearest capability or workflow name this dispatcher knows, for a
// "did you mean" hint (registry.NearestName); "" when an instance offers
// name or nothing known is close.
func (d *Dispatcher) Suggest(name string) string {
	if len(d.table.Offering(name)) > 0 {
		return ""
	}
	return registry.NearestName(name, d.knownNames())
}

func (d *Dispatcher) knownNames() []string {
	names := d.table.Capabilities()
	if d.resolver != nil {
		names = append(names, d.resolver.Names()...)
	}
	return names
}
