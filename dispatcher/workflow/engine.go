package workflow

import (
	"context"
	"errors"
	"fmt"
	"github.com/agent-reach/agentreach/dispatcher/events"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/durable"
	"github.com/agent-reach/agentreach/dispatcher/workflow/spec"
	"github.com/agent-reach/agentreach/internal/kvwatch"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

// Defaults of Config.
const (
	// DefaultCompensationTimeout bounds each compensation task.
	DefaultCompensationTimeout = 60 * time.Second
	// DefaultStartTimeout bounds Start when its context has no deadline.
	DefaultStartTimeout = 10 * time.Second
	// A durable run that found no capacity, or whose replica drains, waits
	// in REACH_TASKS before it continues: waitDelayBase, doubling with each
	// delivery up to waitDelayMax (as a durable task waits).
	waitDelayBase = 250 * time.Millisecond
	waitDelayMax  = 2 * time.Second
	// recordTimeout bounds each write of a durable run's record or outcome.
	recordTimeout = 5 * time.Second
)

// Config configures an Engine. The zero value means all defaults.
type Config struct {
	// CompensationTimeout bounds each compensation task (its deadline
	// starts when it is sent: a compensation runs even after the run's own
	// deadline has passed). Default 60 s.
	CompensationTimeout time.Duration
	// DirectRecords writes each direct-tier run's record to REACH_RUNS
	// once it has answered (without waiting for the write), so that
	// `agentreach runs` shows it too. Off by default: REACH_RUNS holds the
	// durable runs, and a direct-tier run's decisions are in REACH_EVENTS;
	// the record costs the dispatcher and the server a write per run.
	DirectRecords bool
}

// Option configures an Engine.
type Option func(*Engine)

// WithLogger sets the engine's logger; the default discards.
func WithLogger(l zerolog.Logger) Option { return func(e *Engine) { e.log = l } }

// Engine runs workflows beside a dispatcher: it is the dispatcher's
// Resolver for every name REACH_POLICY defines a workflow under, on both
// tiers. Create it with New, pass it to dispatcher.New with
// dispatcher.WithResolver, and Start it with that dispatcher before the
// dispatcher's own Start, so that the first task already finds the
// definitions. Stop it after the dispatcher (Drain, then Close). Its
// methods are safe for concurrent use; Drain and Close are idempotent.
type Engine struct {
	nc  *nats.Conn
	cfg Config
	log zerolog.Logger

	d        *dispatcher.Dispatcher
	subjects streams.Subjects
	js       jetstream.JetStream
	runs     jetstream.KeyValue // REACH_RUNS
	outcomes jetstream.KeyValue // REACH_OUTCOMES: a durable run's outcome claim
	results  jetstream.Stream   // REACH_RESULTS

	defs      atomic.Pointer[map[string]*version]
	stopWatch func()

	ctx      context.Context // ends at Close: every run stops
	cancel   context.CancelFunc
	draining atomic.Bool
	running  sync.WaitGroup // runs in this process
	durables atomic.Int64   // durable runs in this process

	mu        sync.Mutex
	started   bool
	closed    bool // no run starts any more (enter)
	closeOnce sync.Once
}

// New validates cfg and returns an engine on nc (normally the
// dispatcher's connection).
func New(nc *nats.Conn, cfg Config, opts ...Option) (*Engine, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: nil NATS connection", ErrInvalidConfig)
	}
	if cfg.CompensationTimeout < 0 {
		return nil, fmt.Errorf("%w: CompensationTimeout must not be negative, got %v", ErrInvalidConfig, cfg.CompensationTimeout)
	}
	if cfg.CompensationTimeout == 0 {
		cfg.CompensationTimeout = DefaultCompensationTimeout
	}
	e := &Engine{nc: nc, cfg: cfg, log: zerolog.Nop()}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	for _, o := range opts {
		o(e)
	}
	empty := map[string]*version{}
	e.defs.Store(&empty)
	return e, nil
}

// Start binds the engine to d, whose Resolver it must be, opens REACH_RUNS,
// REACH_RESULTS and REACH_POLICY (streams.Provision creates them), and
// returns once the definitions in force are loaded; it follows them until
// Close. Call it before d.Start. Without a deadline on ctx, Start gives up
// after DefaultStartTimeout.
func (e *Engine) Start(ctx context.Context, d *dispatcher.Dispatcher) error {
	if d == nil {
		return fmt.Errorf("%w: nil dispatcher", ErrInvalidConfig)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultStartTimeout)
		defer cancel()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.started {
		return ErrAlreadyStarted
	}
	js, err := jetstream.New(e.nc)
	if err != nil {
		return err
	}
	if e.runs, err = js.KeyValue(ctx, streams.BucketRuns); err != nil {
		return streams.OpenError("workflow", streams.BucketRuns, err)
	}
	if e.results, err = js.Stream(ctx, streams.StreamResults); err != nil {
		return streams.OpenError("workflow", streams.StreamResults, err)
	}
	if e.outcomes, err = js.KeyValue(ctx, streams.BucketOutcomes); err != nil {
		return streams.OpenError("workflow", streams.BucketOutcomes, err)
	}
	policy, err := js.KeyValue(ctx, streams.BucketPolicy)
	if err != nil {
		return streams.OpenError("workflow", streams.BucketPolicy, err)
	}
	e.js, e.d, e.subjects = js, d, d.Config().Subjects
	e.log = e.log.With().Str("dispatcher", d.Name()).Logger()

	feed := &definitions{log: e.log, values: map[string]*version{}, rejected: map[string]uint64{},
		publish: func(m map[string]*version) { e.defs.Store(&m) }}
	watchCtx, stop := context.WithCancel(context.Background())
	ready, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		kvwatch.Run(watchCtx, e.nc, policy, registry.DefaultReconcileInterval, feed, e.log, ready)
	}()
	e.stopWatch = func() { stop(); <-done }
	select {
	case <-ready:
	case <-ctx.Done():
		e.stopWatch()
		return fmt.Errorf("workflow: load the definitions from %s: %w", streams.BucketPolicy, ctx.Err())
	}
	e.started = true
	return nil
}

// Names lists the names workflows are defined under.
func (e *Engine) Names() []string {
	return slices.Collect(maps.Keys(*e.defs.Load()))
}

// Serves reports whether a workflow is defined under name: the dispatcher
// then hands its tasks to Direct and Durable. A workflow shadows a
// capability of the same name. It takes no lock and does not allocate.
func (e *Engine) Serves(name string) bool {
	_, ok := (*e.defs.Load())[name]
	return ok
}

// Definition returns the definition in force under name and the
// REACH_POLICY revision of its key.
func (e *Engine) Definition(name string) (*spec.Definition, uint64, bool) {
	v, ok := (*e.defs.Load())[name]
	if !ok {
		return nil, 0, false
	}
	return v.def, v.revision, true
}

// Drain makes the durable runs of this process stop at their next step
// boundary — their state recorded, back in REACH_TASKS for another replica
// — and waits for them until ctx ends. Direct-tier runs finish: the
// dispatcher's Drain waits for them, as for any task. Calling it again
// waits again.
func (e *Engine) Drain(ctx context.Context) error {
	e.draining.Store(true)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for e.durables.Load() > 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("workflow: drain: %w with %d durable runs in flight", ctx.Err(), e.durables.Load())
		case <-tick.C:
		}
	}
	return nil
}

// Close stops following the definitions and ends every run still in this
// process: a direct-tier run answers CANCELLED, a durable one goes back to
// REACH_TASKS unrecorded, to be resumed elsewhere. It waits for them.
func (e *Engine) Close() error {
	e.closeOnce.Do(func() {
		e.mu.Lock()
		e.closed = true
		stop := e.stopWatch
		e.mu.Unlock()
		e.cancel()
		if stop != nil {
			stop()
		}
		e.running.Wait()
	})
	return nil
}

// closing reports whether Close has begun.
func (e *Engine) closing() bool { return e.ctx.Err() != nil }

// enter counts a run starting in this process, unless Close has begun
// (it waits for the runs counted).
func (e *Engine) enter() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	e.running.Add(1)
	return true
}

// Direct runs a direct-tier task of workflow name and returns its reply,
// which the dispatcher sends to the caller. The run lives in this process
// only: if it dies, the caller sees a timeout.
func (e *Engine) Direct(m *nats.Msg, name string) *nats.Msg {
	if !e.enter() {
		return streams.ErrorReply("", streams.ContentType(m.Header, m.Data), m.Header.Get(streams.HeaderRequestID),
			streams.NewError(streams.CodeCancelled, "the dispatcher %s is stopping", e.d.Name()))
	}
	defer e.running.Done()
	r, fail := e.newRun(m.Header, m.Data, name, time.Now(), "direct")
	if fail == nil {
		x := e.runnerOf(r, m.Header, false)
		x.execute()
		x.release()
	}
	switch {
	case fail != nil:
		r.fail(fail)
	case !r.Status.Final(): // the engine closed under it
		r.fail(streams.NewError(streams.CodeCancelled, "the dispatcher %s stopped during the run", e.d.Name()))
	}
	r.Outcome, r.Owner = events.OutcomeReply, ""
	e.runEvent(r)
	if e.cfg.DirectRecords {
		e.recordDirect(r)
	}
	return r.reply(e.nc.MaxPayload())
}

// Durable runs a durable-tier task of workflow name: a new run, or one
// that has a record in REACH_RUNS already (redelivered after a crash, a
// wait or a drain, or replayed from the dead letters), from where the
// record says. The message is acknowledged only once the run's outcome is
// recorded; until then in-progress acks keep its ack wait from expiring.
func (e *Engine) Durable(msg jetstream.Msg, name string) {
	if !e.enter() {
		_ = msg.NakWithDelay(waitDelayBase) // another replica takes it
		return
	}
	defer e.running.Done()
	e.durables.Add(1)
	defer e.durables.Add(-1)
	stop := durable.KeepInProgress(msg, e.d.Config().DurableAckWait)
	v := e.durable(msg, name)
	stop()
	switch v.kind {
	case settled:
		e.ack(msg, v.id)
	case waits, retry:
		delay := waitDelayMax
		if md, err := msg.Metadata(); err == nil {
			delay = min(waitDelayBase<<min(md.NumDelivered-1, 3), waitDelayMax)
		}
		if err := msg.NakWithDelay(delay); err != nil {
			e.log.Debug().Err(err).Str("request_id", v.id).Msg("durable run nak")
		}
	case lost:
		// Another replica runs it now, on a later delivery of the message.
	}
}

func (e *Engine) ack(msg jetstream.Msg, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), recordTimeout)
	defer cancel()
	if err := msg.DoubleAck(ctx); err != nil {
		// Recorded but not acknowledged: the redelivery finds the run's
		// final record and acknowledges it then.
		e.log.Warn().Err(err).Str("request_id", id).Msg("durable run ack")
	}
}

// verdict is how the handling of a durable delivery ended.
type verdict struct {
	kind verdictKind
	id   string
}

type verdictKind int

const (
	settled verdictKind = iota // the outcome is recorded: acknowledge
	waits                      // back to the stream, to continue later
	retry                      // something failed before the state was recorded: redeliver
	lost                       // another replica owns the run
)

// bounded returns a context for one write of a durable run's record.
func bounded() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), recordTimeout)
}

// durable takes one delivery of a durable run as far as it goes.
func (e *Engine) durable(msg jetstream.Msg, name string) verdict {
	if e.draining.Load() || e.closing() {
		return verdict{kind: waits} // another replica takes it
	}
	md, err := msg.Metadata()
	if err != nil {
		e.log.Error().Err(err).Msg("durable run without metadata")
		return verdict{kind: retry}
	}
	h := msg.Headers()
	if h == nil {
		h = nats.Header{}
	}
	id := h.Get(streams.HeaderRequestID)
	if id == "" { // as the dispatcher names a durable task that has no request id
		id = durable.RequestIDOfSubmission(h)
		if streams.ValidateInstanceID(id) != nil {
			id = "task-" + strconv.FormatUint(md.Sequence.Stream, 10)
		}
		h.Set(streams.HeaderRequestID, id)
	}
	replay := int(streams.IntHeader(h, streams.HeaderDLQCount))
	// A first delivery that is no replay is a new run: its record is
	// created with its first write (before its first task), which fails if
	// the run has one after all, and the redelivery then reads it.
	var r *Run
	err = ErrNoRun
	if md.NumDelivered > 1 || replay > 0 {
		ctx, cancel := bounded()
		r, err = GetRun(ctx, e.runs, id)
		cancel()
	}
	switch {
	case errors.Is(err, ErrNoRun):
		var fail *streams.Error
		r, fail = e.newRun(h, msg.Data(), name, md.Timestamp, "durable")
		if r.def == nil {
			return verdict{kind: retry, id: id} // the definition went away: the dispatcher routes it next time
		}
		r.Replays = replay
		if fail != nil {
			r.fail(fail)
			return e.settle(r, msg)
		}
	case err != nil:
		e.log.Error().Err(err).Str("request_id", id).Msg("durable run record unreadable; it will be redelivered")
		return verdict{kind: retry, id: id}
	case !r.ownedBy(h):
		// Another caller's run holds this request id: this task is not
		// that run, and learns nothing of it.
		return e.publishOutcome(foreignRun(r, h, name, replay), msg, false)
	default:
		if v, done := e.resume(r, msg, replay, md.NumDelivered); done {
			return v
		}
	}
	x := e.runnerOf(r, h, true)
	defer x.release()
	switch s := x.execute(); s {
	case stepWait:
		if r.Status != RunCompensating { // a compensating run stays so: it resumes compensating
			r.Status = RunWaiting
		}
		r.Owner = ""
		if s, ok := x.persisted(); !ok {
			return stopped(s, id)
		}
		return verdict{kind: waits, id: id}
	case stepStopped, stepLost:
		return stopped(s, id)
	}
	return e.settle(r, msg)
}

// stopped is the verdict of a run that stopped before its end: lost to
// another replica, or back to the stream unrecorded (resumed from its last
// record).
func stopped(s stop, id string) verdict {
	if s == stepLost {
		return verdict{kind: lost, id: id}
	}
	return verdict{kind: retry, id: id}
}

// resume takes over a run that has a record: it reports done with the
// verdict when there is nothing left to run — the record is final, and
// this delivery is not a replay of the parked run — else makes the run
// this replica's. The claim is written with the run's next write, whose
// revision check fails if another replica wrote the record meanwhile.
func (e *Engine) resume(r *Run, msg jetstream.Msg, replay int, delivered uint64) (verdict, bool) {
	switch {
	case r.Status.Final() && (replay <= r.Replays || r.Outcome == events.OutcomeResult):
		// Its final record was written and its outcome maybe not (a crash,
		// a lost ack): record it again, deduplicated.
		return e.publishOutcome(r, msg, true), true
	case r.Status.Final():
		e.reopen(r, replay)
	case r.Owner != "":
		// Its replica stopped without letting it go: a crash, or a stall
		// longer than the ack wait.
		r.Resumes++
		e.decide(r, "", DecisionResume, fmt.Sprintf("%s took the run over from %s (delivery %d)", e.d.Name(), r.Owner, delivered), nil)
	}
	r.Owner = e.d.Name()
	return verdict{}, false
}

// settle ends a durable run: its final record, saying where its outcome
// goes, then the outcome where a durable task's goes.
func (e *Engine) settle(r *Run, msg jetstream.Msg) verdict {
	r.Outcome, r.Reason = r.placement()
	r.Owner, r.Updated = "", time.Now()
	switch err := e.write(r); {
	case errors.Is(err, errLostRun):
		return verdict{kind: lost, id: r.ID}
	case err != nil:
		e.log.Warn().Err(err).Str("request_id", r.ID).Msg("durable run's final record not written; it will be redelivered")
		return verdict{kind: retry, id: r.ID}
	}
	return e.publishOutcome(r, msg, false)
}

// claimOutcome claims the outcome of the REACH_TASKS message msg — the
// run's final outcome — in REACH_OUTCOMES, under the key and in the form
// the dispatcher claims a durable task's (durable.Claims): one outcome
// per message, whoever records it. A replay is a message of its own.
func (e *Engine) claimOutcome(r *Run, msg jetstream.Msg) (durable.Claim, error) {
	md, err := msg.Metadata()
	if err != nil {
		return durable.Claim{}, err
	}
	c := durable.Claim{Outcome: r.Outcome, Reason: r.Reason}
	if r.Error != nil {
		c.Code, c.Message = string(r.Error.Code), r.Error.Message
	}
	claims := durable.Claims{KV: e.outcomes, By: e.d.Name()}
	return claims.Take(durable.ClaimKey(md.Sequence.Stream, r.ID), r.ID, c)
}

// write stores a durable run's record (writeRun) and then records the
// events of the step outcomes and decisions it holds. When another
// replica's write won (errLostRun), this replica's step outcomes and
// decisions since its last write are discarded: the winner's stand.
func (e *Engine) write(r *Run) error {
	ctx, cancel := bounded()
	err := writeRun(ctx, e.runs, r)
	cancel()
	switch {
	case err == nil:
		for _, ev := range r.pending {
			e.d.RecordEvent(ev)
		}
		r.pending = nil
	case errors.Is(err, errLostRun):
		if len(r.pending) > 0 {
			e.log.Info().Str("request_id", r.ID).Int("discarded", len(r.pending)).
				Msg("another replica recorded the run first: this replica's step outcomes and decisions since its last write are discarded")
		}
		r.pending = nil
	}
	return err
}

// publishOutcome records a final run's outcome (again, after a crash:
// the stores deduplicate it) and its event.
func (e *Engine) publishOutcome(r *Run, msg jetstream.Msg, again bool) verdict {
	switch held, err := e.claimOutcome(r, msg); {
	case errors.Is(err, durable.ErrClaimed) && held.Outcome != r.Outcome:
		// Another outcome was recorded for this message first (by a
		// replica, or the dispatcher itself): this one is discarded.
		e.log.Warn().Str("request_id", r.ID).Str("outcome", r.Outcome).Str("claimed", held.Outcome).Str("by", held.By).
			Msg("durable run's outcome discarded: the message's outcome was claimed already")
		return verdict{kind: settled, id: r.ID}
	case errors.Is(err, durable.ErrClaimed):
		again = true // claimed before (a redelivery): recorded again, deduplicated
	case err != nil:
		e.log.Warn().Err(err).Str("request_id", r.ID).Msg("durable run's outcome not claimed; it will be redelivered")
		return verdict{kind: retry, id: r.ID}
	}
	if err := e.recordOutcome(r, msg, again); err != nil {
		e.log.Error().Err(err).Str("request_id", r.ID).Msg("durable run outcome not recorded; it will be redelivered")
		return verdict{kind: retry, id: r.ID}
	}
	e.runEvent(r)
	return verdict{kind: settled, id: r.ID}
}
