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

	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/durable"
	"github.com/agent-reach/agentreach/dispatcher/engine"
	"github.com/agent-reach/agentreach/dispatcher/events"
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
// concurrent use; Drain and Close are idempotent. It is the lifecycle
// around the task engine (dispatcher/engine), which runs each task down
// the stages: it opens what the engine routes by, subscribes the engine's
// entries, and offers the in-process ones (Call, Stream, OpenShared).
type Dispatcher struct {
	nc  *nats.Conn
	cfg config.Config
	log zerolog.Logger
	eng *engine.Engine

	table     *registry.Table
	subs      []*nats.Subscription // Config.Handlers queue subscriptions to the tasks
	apiSubs   []*nats.Subscription
	js        jetstream.JetStream
	tier      durable.Tier // takes the durable tasks to their outcomes (durable.go)
	consume   jetstream.ConsumeContext
	replay    *durable.Replayer
	stopWatch func() // stops the engine's Watch, and waits for it

	mu       sync.Mutex
	started  bool
	policies *registry.PolicyWatcher
	catalog  *registry.Catalog
	// Extension points (hooks.go), handed to the engine by New.
	observers  []Observer
	authorizer Authorizer
	resolver   Resolver
	// The entries' counts in Stats: Dropped (receive.go), Durable,
	// Buffered and Replayed (durable.go).
	dropped, durable, buffered, replayed atomic.Int64

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
	d := &Dispatcher{nc: nc, cfg: cfg, log: zerolog.Nop()}
	for _, o := range opts {
		o(d)
	}
	d.log = d.log.With().Str("dispatcher", cfg.Name).Logger()
	d.eng = engine.New(nc, cfg, d.log, engine.Hooks{Observers: d.observers, Authorizer: d.authorizer, Resolver: d.resolver,
		Shared: d.cancelShared})
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
		if d.eng.Load(inst.ID).Breaker.Status(now).State != selection.BreakerOpen {
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

// Resolves reports whether the tasks addressed to name go to the resolver
// (name is a workflow's) rather than to the instances of a capability.
func (d *Dispatcher) Resolves(name string) bool { return d.eng.Resolves(name) }

// Suggest returns, for a name no instance offers at all (likely a typo),
// the nearest capability or workflow name this dispatcher knows, for a
// "did you mean" hint; "" when an instance offers name or nothing known is
// close.
func (d *Dispatcher) Suggest(name string) string { return d.eng.Suggest(name) }

// RecordEvent writes a feedback record that is not a task's own, such as
// a fan-out's or a broadcast's (engine.RecordEvent).
func (d *Dispatcher) RecordEvent(ev events.Event) { d.eng.RecordEvent(ev) }

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
	reg, err := registry.Open(ctx, js)
	if err != nil {
		return err
	}
	breakersKV, err := js.KeyValue(ctx, streams.BucketBreakers)
	if err != nil {
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
	topts := []registry.TableOption{registry.WithLogger(d.log), registry.WithRemoveHook(d.eng.Forget)}
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

	if err := d.eng.Bind(engine.Bound{JS: js, Breakers: breakersKV, Table: d.table, Policies: d.policies, Catalog: d.catalog}); err != nil {
		return err
	}
	cleanup = append(cleanup, func() { _ = d.eng.StopInbox() })
	watchCtx, stopWatch := context.WithCancel(context.Background())
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		d.eng.Watch(watchCtx)
	}()
	d.stopWatch = func() { stopWatch(); <-watchDone }
	cleanup = append(cleanup, d.stopWatch)

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
	cancelSub, err := d.nc.Subscribe(d.cfg.Subjects.Cancel(), d.eng.OnCancel)
	if err != nil {
		d.stopAPI()
		return fmt.Errorf("dispatcher: subscribe %s: %w", d.cfg.Subjects.Cancel(), err)
	}
	d.apiSubs = append(d.apiSubs, cancelSub)
	// Callers' scores of results (Reach-Prefer: quality), heard by every
	// replica.
	feedbackSub, err := d.nc.Subscribe(d.cfg.Subjects.Feedback(), d.eng.Feedback)
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
			errs = append(errs, d.eng.Wait(ctx))
		} else {
			errs = append(errs, subscription.EndAll(d.subs))
		}
		errs = append(errs, d.eng.StopInbox())
		d.stopAPI()
		d.eng.Flush()
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

// Stats is a snapshot of a replica's counters since Start (engine.Stats).
type Stats = engine.Stats

// Stats returns the replica's counters.
func (d *Dispatcher) Stats() Stats {
	s := d.eng.Stats()
	s.Dropped, s.Durable, s.Buffered, s.Replayed = d.dropped.Load(), d.durable.Load(), d.buffered.Load(), d.replayed.Load()
	if t := d.Table(); t != nil {
		s.Agents = t.Len()
	}
	return s
}
