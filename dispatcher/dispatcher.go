package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/dispatcher/breakers"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/durable"
	"github.com/agent-reach/agentreach/dispatcher/events"
	"github.com/agent-reach/agentreach/dispatcher/feedback"
	"github.com/agent-reach/agentreach/dispatcher/inbox"
	"github.com/agent-reach/agentreach/dispatcher/names"
	"github.com/agent-reach/agentreach/dispatcher/selection"
	"github.com/agent-reach/agentreach/internal/subscription"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

// DefaultStartTimeout bounds Start when its context has no deadline.
const DefaultStartTimeout = 10 * time.Second

// Option configures a Dispatcher.
type Option func(*Dispatcher)

// WithLogger sets the dispatcher's logger; the default discards.
func WithLogger(l zerolog.Logger) Option { return func(d *Dispatcher) { d.log = l } }

// Dispatcher routes tasks to agents. Create it with New, run it with Start,
// stop it with Drain (graceful) or Close. Its methods are safe for
// concurrent use; Drain and Close are idempotent.
type Dispatcher struct {
	nc  *nats.Conn
	cfg config.Config
	log zerolog.Logger

	table     *registry.Table
	inbox     *inbox.Inbox[*delivery] // the replies to its deliveries
	subs      []*nats.Subscription    // Config.Handlers queue subscriptions to the tasks
	apiSubs   []*nats.Subscription
	js        jetstream.JetStream
	tier      durable.Tier // takes the durable tasks to their outcomes (settle_durable.go)
	consume   jetstream.ConsumeContext
	replay    *durable.Replayer
	stopWatch func()           // stops the breaker sharing and queue pumping, and waits for them
	breakers  breakers.Sharing // the breakers' transitions shared with the other replicas

	mu      sync.Mutex
	started bool
	loads   selection.Loads
	picker  selection.Picker
	queues  sync.Map // capability, or capability@instance for unicast → *selection.WaitQueue[*task]
	hints   selection.Hints
	hedges  selection.Hedges
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
	// of *task), so that a cancel can find them.
	backoffs sync.Map

	records *events.Recorder // counts, observes and sends the records (record.go)
	scores  feedback.Scores  // callers' scores of results (dispatcher/feedback)
	// Extension points (hooks.go).
	observers  []Observer
	authorizer Authorizer
	resolver   Resolver
	inflight   atomic.Int64
	fair       *selection.FairShare // the callers' shares of inflight
	tasks      sync.WaitGroup
	stats      stats

	stopOnce sync.Once
	stopErr  error
}

// New validates cfg and returns a dispatcher on nc.
func New(nc *nats.Conn, cfg config.Config, opts ...Option) (*Dispatcher, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: nil NATS connection", config.ErrInvalid)
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Name == "" {
		cfg.Name = "dispatcher-" + nuid.Next()[16:]
	}
	d := &Dispatcher{nc: nc, cfg: cfg, log: zerolog.Nop(),
		requirements: selection.Cache{Limit: maxRequirements}, views: selection.Cache{Limit: maxViews},
		fair: selection.NewFairShare(cfg.FairShareAt)}
	d.caps.Config = &d.cfg
	d.loads.Breaker, d.loads.PenaltyDecay = &d.cfg.Breaker, d.cfg.PenaltyDecay
	d.picker.Loads, d.picker.Cost = &d.loads, d.declaredCost
	for _, o := range opts {
		o(d)
	}
	d.log = d.log.With().Str("dispatcher", cfg.Name).Logger()
	var observe func(*events.Event)
	if len(d.observers) > 0 {
		observe = d.observe
	}
	d.records = events.NewRecorder(nc, cfg.Subjects, cfg.NoEvents, observe, &d.log)
	d.breakers = breakers.Sharing{NC: nc, By: cfg.Name, Loads: &d.loads, Log: &d.log, Live: func(id string) bool {
		_, live := d.table.Lookup(id)
		return live
	}}
	d.scores = feedback.Scores{NC: nc, Subjects: cfg.Subjects, Dispatcher: cfg.Name, Log: &d.log, Observe: d.observeQuality}
	if d.authorizer != nil {
		d.scores.Authorize = func(m *nats.Msg) *streams.Error { return d.authorizer.Authorize("", m, false) }
	}
	if rc, ok := d.authorizer.(ReplyChecker); ok {
		d.scores.CheckReply = rc.CheckReply
	}
	return d, nil
}

// Config returns the replica's configuration, defaults filled in.
func (d *Dispatcher) Config() config.Config { return d.cfg }

// Routable returns the ids of the instances a task of capability could be
// delivered to now: routable (ready) and not refused by their breaker.
// A broadcast asks exactly these.
func (d *Dispatcher) Routable(capability string) []string {
	rs := d.Table().Candidates(capability)
	now := time.Now()
	ids := make([]string, 0, rs.Len())
	for i := 0; i < rs.Len(); i++ {
		inst := rs.Instances[i]
		if d.loads.Of(inst.ID).Breaker.Status(now).State != selection.BreakerOpen {
			ids = append(ids, inst.ID)
		}
	}
	return ids
}

// Catalog returns the capability declarations the replica routes by (nil
// before Start).
func (d *Dispatcher) Catalog() *registry.Catalog {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.catalog
}

// Policies returns the live policy the replica follows (nil before Start).
func (d *Dispatcher) Policies() *registry.PolicyWatcher {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.policies
}

// Name returns the replica's name.
func (d *Dispatcher) Name() string { return d.cfg.Name }

// Table returns the dispatcher's routing table (nil before Start).
func (d *Dispatcher) Table() *registry.Table {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.table
}

// Start loads the routing table and joins the queue group. REACH_AGENTS must
// exist (streams.Provision). Without a deadline on ctx, Start gives up after
// DefaultStartTimeout.
func (d *Dispatcher) Start(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultStartTimeout)
		defer cancel()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.started {
		return ErrAlreadyStarted
	}
	js, err := jetstream.New(d.nc)
	if err != nil {
		return err
	}
	d.js = js
	d.scores.JS = js
	reg, err := registry.Open(ctx, js)
	if err != nil {
		return err
	}
	if d.breakers.KV, err = js.KeyValue(ctx, streams.BucketBreakers); err != nil {
		return streams.OpenError("dispatcher", streams.BucketBreakers, err)
	}
	var cleanup []func()
	defer func() {
		if !d.started {
			for i := len(cleanup) - 1; i >= 0; i-- {
				cleanup[i]()
			}
		}
	}()
	topts := []registry.TableOption{registry.WithLogger(d.log), registry.WithRemoveHook(d.forget)}
	if rc, ok := d.authorizer.(RecordChecker); ok {
		topts = append(topts, registry.WithRecordFilter(rc))
	}
	d.table = registry.NewTable(reg, topts...)
	if err := d.table.Start(ctx); err != nil {
		return fmt.Errorf("dispatcher: load routing table: %w", err)
	}
	cleanup = append(cleanup, d.table.Close)
	// Live policy and capability declarations, each followed like the
	// registry: a change applies within milliseconds, a bad value is
	// logged and ignored.
	if d.policies, err = registry.NewPolicyWatcher(ctx, js, registry.WatchLogger(d.log)); err == nil {
		err = d.policies.Start(ctx)
	}
	if err != nil {
		return fmt.Errorf("dispatcher: watch %s: %w", streams.BucketPolicy, err)
	}
	cleanup = append(cleanup, d.policies.Close)
	if d.catalog, err = registry.NewCatalog(ctx, js, registry.WatchLogger(d.log)); err == nil {
		err = d.catalog.Start(ctx)
	}
	if err != nil {
		return fmt.Errorf("dispatcher: watch %s: %w", streams.BucketCaps, err)
	}
	cleanup = append(cleanup, d.catalog.Close)

	watchCtx, stopWatch := context.WithCancel(context.Background())
	shareDone, pumpDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(shareDone)
		d.breakers.Run(watchCtx)
	}()
	go func() {
		defer close(pumpDone)
		d.pumpOnChange(watchCtx.Done())
	}()
	d.stopWatch = func() { stopWatch(); <-shareDone; <-pumpDone }
	cleanup = append(cleanup, d.stopWatch)

	if d.inbox, err = inbox.New(d.nc, d.cfg.Handlers, d.onReply); err != nil {
		return err
	}
	cleanup = append(cleanup, func() { _ = d.inbox.Stop() })
	// Queue subscriptions in the replicas' group: the server spreads the
	// tasks over every replica's handlers.
	d.subs, err = subscription.Each(d.cfg.Handlers, 64<<20, func(int) (*nats.Subscription, error) {
		return d.nc.QueueSubscribe(d.cfg.Subjects.TaskWildcard(), d.cfg.QueueGroup, d.receive)
	})
	if err != nil {
		return fmt.Errorf("dispatcher: subscribe: %w", err)
	}
	cleanup = append(cleanup, func() { _ = subscription.EndAll(d.subs) })
	if d.apiSubs, err = d.subscribeAPI(); err != nil {
		return fmt.Errorf("dispatcher: api: %w", err)
	}
	// Every replica hears every cancel (no queue group): the one holding
	// the task acts on it.
	cancelSub, err := d.nc.Subscribe(d.cfg.Subjects.Cancel(), d.onCancel)
	if err != nil {
		d.stopAPI()
		return fmt.Errorf("dispatcher: subscribe %s: %w", d.cfg.Subjects.Cancel(), err)
	}
	d.apiSubs = append(d.apiSubs, cancelSub)
	// Callers' scores of results (Reach-Prefer: quality), heard by every
	// replica.
	feedbackSub, err := d.nc.Subscribe(d.cfg.Subjects.Feedback(), d.scores.Handle)
	if err != nil {
		d.stopAPI()
		return fmt.Errorf("dispatcher: subscribe %s: %w", d.cfg.Subjects.Feedback(), err)
	}
	d.apiSubs = append(d.apiSubs, feedbackSub)
	cleanup = append(cleanup, d.stopAPI)
	if err := d.nc.FlushWithContext(ctx); err != nil {
		return fmt.Errorf("dispatcher: subscribe: %w", err)
	}
	if !d.cfg.NoDurable {
		if err := d.startDurable(ctx, js); err != nil {
			return err
		}
		cleanup = append(cleanup, d.stopDurable)
		d.startReplayer()
	}
	d.started = true
	d.log.Info().Str("subject", d.subs[0].Subject).Str("queue", d.cfg.QueueGroup).Int("handlers", len(d.subs)).
		Int("agents", d.table.Len()).Msg("dispatcher started")
	return nil
}

// Drain leaves the queue group, so new tasks go to other replicas, lets
// every task already received finish (or ctx end), then stops. Calling it
// again returns the first result.
func (d *Dispatcher) Drain(ctx context.Context) error {
	return d.shutdown(ctx, true)
}

// Close stops at once: tasks still running end when their waits do.
func (d *Dispatcher) Close() error {
	return d.shutdown(context.Background(), false)
}

func (d *Dispatcher) shutdown(ctx context.Context, graceful bool) error {
	d.mu.Lock()
	started := d.started
	d.mu.Unlock()
	if !started {
		return ErrNotStarted
	}
	d.stopOnce.Do(func() {
		var errs []error
		d.stopReplayer()
		d.stopDurable()
		if graceful {
			closed := make([]<-chan nats.SubStatus, len(d.subs))
			for i, sub := range d.subs {
				closed[i] = sub.StatusChanged(nats.SubscriptionClosed)
				if err := sub.Drain(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
					errs = append(errs, err)
				}
			}
			for _, c := range closed { // every received task has started
				select {
				case <-c:
				case <-ctx.Done():
				}
			}
			done := make(chan struct{})
			go func() { d.tasks.Wait(); close(done) }()
			select {
			case <-done:
			case <-ctx.Done():
				errs = append(errs, fmt.Errorf("dispatcher: drain: %w with %d tasks in flight", ctx.Err(), d.inflight.Load()))
			}
		} else {
			errs = append(errs, subscription.EndAll(d.subs))
		}
		errs = append(errs, d.inbox.Stop())
		d.stopAPI()
		d.records.Flush()
		if graceful {
			if err := d.nc.FlushTimeout(time.Second); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
				errs = append(errs, fmt.Errorf("dispatcher: flush event records: %w", err))
			}
		}
		d.stopWatch()
		d.table.Close()
		d.policies.Close()
		d.catalog.Close()
		d.stopErr = errors.Join(errs...)
		d.log.Info().Err(d.stopErr).Msg("dispatcher stopped")
	})
	return d.stopErr
}

func (d *Dispatcher) stopAPI() {
	for _, s := range d.apiSubs {
		_ = s.Unsubscribe()
	}
}

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
	overloaded, dropped, redirected     atomic.Int64
	durable, buffered, replayed, queued atomic.Int64
	hedged, hedgesRefused               atomic.Int64
	chunksRelayed, chunksDropped        atomic.Int64
	streamsOverloaded                   atomic.Int64
}

// Stats returns the replica's counters.
func (d *Dispatcher) Stats() Stats {
	s := Stats{
		Name:              d.cfg.Name,
		Counts:            d.records.Counts(),
		Overloaded:        d.stats.overloaded.Load(),
		Dropped:           d.stats.dropped.Load(),
		Redirected:        d.stats.redirected.Load(),
		Queued:            d.stats.queued.Load(),
		Durable:           d.stats.durable.Load(),
		Buffered:          d.stats.buffered.Load(),
		Replayed:          d.stats.replayed.Load(),
		Hedged:            d.stats.hedged.Load(),
		HedgesOver:        d.stats.hedgesRefused.Load(),
		ChunksRelayed:     d.stats.chunksRelayed.Load(),
		ChunksDropped:     d.stats.chunksDropped.Load() + d.inbox.Late(),
		StreamsOverloaded: d.stats.streamsOverloaded.Load(),
		InFlight:          d.inflight.Load(),
	}
	if t := d.Table(); t != nil {
		s.Agents = t.Len()
	}
	return s
}

// forget drops per-instance state when an instance leaves the table. A lost
// instance's deliveries end at once, so their tasks go elsewhere; one that
// left after draining promised to finish them, so they wait for their
// answers (or their timers) as before.
func (d *Dispatcher) forget(id string, how registry.Removal) {
	d.loads.Delete(id)
	if how == registry.Lost {
		d.abandon(id)
	}
}

// observeQuality folds a caller's accepted score into the quality average
// of instance node, while it is in the table.
func (d *Dispatcher) observeQuality(node string, score float64) {
	if _, ok := d.table.Lookup(node); ok {
		d.loads.Of(node).ObserveQuality(score)
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
