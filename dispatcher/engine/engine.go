package engine

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/dispatcher/breakers"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/events"
	"github.com/agent-reach/agentreach/dispatcher/feedback"
	"github.com/agent-reach/agentreach/dispatcher/inbox"
	"github.com/agent-reach/agentreach/dispatcher/names"
	"github.com/agent-reach/agentreach/dispatcher/selection"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

// Engine runs a replica's tasks down the pipeline. New makes it, Bind
// gives it what the Dispatcher opened at Start, Watch follows the table and
// the other replicas' breakers; its methods are safe for concurrent use.
type Engine struct {
	nc  *nats.Conn
	cfg config.Config
	log zerolog.Logger

	table    *registry.Table
	inbox    *inbox.Inbox[*delivery] // the replies to its deliveries
	breakers breakers.Sharing        // the breakers' transitions shared with the other replicas

	loads  selection.Loads
	picker selection.Picker
	queues sync.Map // capability, or capability@instance for unicast → *selection.WaitQueue[*Task]
	hints  selection.Hints
	hedges selection.Hedges
	// Live policy and declarations (policy.go, resolve.go).
	policies *registry.PolicyWatcher
	catalog  *registry.Catalog
	served   names.Served        // the capabilities delivered: NO_AGENT for a name never registered is the caller's (record.go)
	caps     config.Capabilities // each capability's settings under the current policy snapshot
	// requirements caches parsed Reach-Require values, views the static
	// filters of routes by requirement (resolve.go).
	requirements selection.Cache
	views        selection.Cache
	// backoffs holds the tasks waiting out a backoff before a retry (a set
	// of *Task), so that a cancel can find them.
	backoffs sync.Map

	records  *events.Recorder // counts, observes and sends the records (record.go)
	scores   feedback.Scores  // callers' scores of results (dispatcher/feedback)
	hooks    Hooks
	inflight atomic.Int64
	fair     *selection.FairShare // the callers' shares of inflight
	tasks    sync.WaitGroup
	stats    stats
}

// Hooks are what the engine calls beyond its stages: the extension points
// (hooks.go), and Shared, which hears a caller's cancel of a request id no
// task of the engine holds (a broadcast's shared delivery).
type Hooks struct {
	Observers  []Observer
	Authorizer Authorizer
	Resolver   Resolver
	Shared     func(id, source string, e *streams.Error)
}

// New returns the engine of a replica on nc; cfg has its defaults and a
// name (config.Config.SetDefaults, Validate).
func New(nc *nats.Conn, cfg config.Config, log zerolog.Logger, hooks Hooks) *Engine {
	en := &Engine{nc: nc, cfg: cfg, log: log, hooks: hooks,
		requirements: selection.Cache{Limit: maxRequirements}, views: selection.Cache{Limit: maxViews},
		fair: selection.NewFairShare(cfg.FairShareAt)}
	en.caps.Config = &en.cfg
	en.loads.Breaker, en.loads.PenaltyDecay = &en.cfg.Breaker, en.cfg.PenaltyDecay
	en.picker.Loads, en.picker.Cost = &en.loads, en.declaredCost
	var observe func(*events.Event)
	if len(hooks.Observers) > 0 {
		observe = en.observe
	}
	en.records = events.NewRecorder(nc, cfg.Subjects, cfg.NoEvents, observe, &en.log)
	en.breakers = breakers.Sharing{NC: nc, By: cfg.Name, Loads: &en.loads, Log: &en.log, Live: func(id string) bool {
		_, live := en.table.Lookup(id)
		return live
	}}
	en.scores = feedback.Scores{NC: nc, Subjects: cfg.Subjects, Dispatcher: cfg.Name, Log: &en.log, Observe: en.observeQuality}
	if a := hooks.Authorizer; a != nil {
		en.scores.Authorize = func(m *nats.Msg) *streams.Error { return a.Authorize("", m, false) }
	}
	if rc, ok := hooks.Authorizer.(ReplyChecker); ok {
		en.scores.CheckReply = rc.CheckReply
	}
	return en
}

// Bound is what the Dispatcher opens at Start for the engine: its
// JetStream context, the breakers' bucket, the routing table (whose
// remove hook is Forget) and the live policy and declarations.
type Bound struct {
	JS       jetstream.JetStream
	Breakers jetstream.KeyValue
	Table    *registry.Table
	Policies *registry.PolicyWatcher
	Catalog  *registry.Catalog
}

// Bind gives the engine what b holds and subscribes its deliveries'
// inbox; StopInbox undoes the subscription.
func (en *Engine) Bind(b Bound) (err error) {
	en.scores.JS, en.breakers.KV = b.JS, b.Breakers
	en.table, en.policies, en.catalog = b.Table, b.Policies, b.Catalog
	en.inbox, err = inbox.New(en.nc, en.cfg.Handlers, en.onReply)
	return err
}

// StopInbox ends the deliveries' inbox subscriptions.
func (en *Engine) StopInbox() error { return en.inbox.Stop() }

// Watch shares the breakers with the other replicas and hands waiting
// tasks to instances as they join or change, until ctx ends.
func (en *Engine) Watch(ctx context.Context) {
	shared := make(chan struct{})
	go func() {
		defer close(shared)
		en.breakers.Run(ctx)
	}()
	en.pumpOnChange(ctx.Done())
	<-shared
}

// Go runs f on a goroutine of its own, which Wait waits for (a durable
// task's, which the durable tier takes to its outcome).
func (en *Engine) Go(f func()) {
	en.tasks.Add(1)
	go func() {
		defer en.tasks.Done()
		f()
	}()
}

// Wait waits until every task admitted has ended, or ctx does.
func (en *Engine) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() { en.tasks.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("dispatcher: drain: %w with %d tasks in flight", ctx.Err(), en.inflight.Load())
	}
}

// Flush sends the records still batched.
func (en *Engine) Flush() { en.records.Flush() }

// Feedback handles a caller's score of a result (reach.feedback).
func (en *Engine) Feedback(m *nats.Msg) { en.scores.Handle(m) }

// Stats is a snapshot of a replica's counters since Start. Counts holds
// what its records add up to (the counting model, docs/operations.md):
// tasks by class, retries, broadcasts, fan-outs and their branches; the
// rest count requests refused before they became tasks (Overloaded,
// Dropped) and steps of a task's way.
type Stats struct {
	Name string `json:"name"`
	events.Counts
	Overloaded int64 `json:"overloaded"` // requests answered OVERLOADED at admission (no record)
	Dropped    int64 `json:"dropped"`    // requests without a reply subject, or whose reply subject the authorizer refused (no record)
	Redirected int64 `json:"redirected"` // tasks sent on after a failed delivery or a wait for capacity
	Queued     int64 `json:"queued"`     // tasks that waited for a free slot
	Durable    int64 `json:"durable"`    // deliveries taken from REACH_TASKS (a task buffered is delivered again)
	Buffered   int64 `json:"buffered"`   // of them, put back to wait for capacity
	Replayed   int64 `json:"replayed"`
	Hedged     int64 `json:"hedged"`         // hedge deliveries sent (at most one per task)
	HedgesOver int64 `json:"hedges_refused"` // hedges the budget refused
	// ChunksRelayed counts streamed chunks passed to callers; ChunksDropped
	// those dropped (not asked for, a hedge's loser, late, another task's);
	// StreamsOverloaded the streams ended OVERLOADED for a slow caller.
	ChunksRelayed     int64 `json:"chunks_relayed"`
	ChunksDropped     int64 `json:"chunks_dropped"`
	StreamsOverloaded int64 `json:"streams_overloaded"`
	InFlight          int64 `json:"in_flight"`
	Agents            int   `json:"agents"`
}

type stats struct {
	overloaded, redirected       atomic.Int64
	queued                       atomic.Int64
	hedged, hedgesRefused        atomic.Int64
	chunksRelayed, chunksDropped atomic.Int64
	streamsOverloaded            atomic.Int64
}

// Stats returns the replica's counters; those of its entries (Dropped,
// Durable, Buffered, Replayed) and Agents are the Dispatcher's to fill in.
func (en *Engine) Stats() Stats {
	s := Stats{
		Name:              en.cfg.Name,
		Counts:            en.records.Counts(),
		Overloaded:        en.stats.overloaded.Load(),
		Redirected:        en.stats.redirected.Load(),
		Queued:            en.stats.queued.Load(),
		Hedged:            en.stats.hedged.Load(),
		HedgesOver:        en.stats.hedgesRefused.Load(),
		ChunksRelayed:     en.stats.chunksRelayed.Load(),
		ChunksDropped:     en.stats.chunksDropped.Load() + en.inbox.Late(),
		StreamsOverloaded: en.stats.streamsOverloaded.Load(),
		InFlight:          en.inflight.Load(),
	}
	return s
}

// Forget drops per-instance state when an instance leaves the table (the
// table's remove hook). A lost instance's deliveries end at once, so their
// tasks go elsewhere; one that left after draining promised to finish
// them, so they wait for their answers (or their timers) as before.
func (en *Engine) Forget(id string, how registry.Removal) {
	en.loads.Delete(id)
	if how == registry.Lost {
		en.abandon(id)
	}
}

// Load is instance id's load, latency and breaker as this replica sees
// them.
func (en *Engine) Load(id string) *selection.Load { return en.loads.Of(id) }

// Breakers returns the breaker of every instance this replica has routed
// to, sorted by instance id.
func (en *Engine) Breakers() []selection.BreakerStatus { return en.loads.Breakers(time.Now()) }

// observeQuality folds a caller's accepted score into the quality average
// of instance node, while it is in the table.
func (en *Engine) observeQuality(node string, score float64) {
	if _, ok := en.table.Lookup(node); ok {
		en.loads.Of(node).ObserveQuality(score)
	}
}

// lookup returns m's value for key, storing fresh() first when it has none.
// Values are made only on a miss; the first one stored wins a race.
func lookup[T any](m *sync.Map, key string, fresh func() *T) *T {
	if v, ok := m.Load(key); ok {
		return v.(*T)
	}
	v, _ := m.LoadOrStore(key, fresh())
	return v.(*T)
}
