package agentkit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/agentkit/internal/idem"
	"github.com/agent-reach/agentreach/agentkit/internal/micro"
	"github.com/agent-reach/agentreach/agentkit/internal/tracing"
	"github.com/agent-reach/agentreach/agentkit/internal/workers"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/registry/declare"
	"github.com/agent-reach/agentreach/streams"
)

// Defaults of Config.
const (
	DefaultMaxConcurrent = 8
	DefaultDrainTimeout  = 30 * time.Second
	// DefaultStartTimeout bounds Start when its context has no deadline.
	DefaultStartTimeout = 10 * time.Second
)

// Config describes an agent instance. The zero value of every field but Type
// means its default.
type Config struct {
	// Type is the agent type, e.g. "inventory" (required; same rules as a
	// capability name).
	Type string
	// ID is the instance id; default "<type>-<random>" with dots replaced.
	ID string
	// Version is reported in the record; default "0.0.0".
	Version string
	// MaxConcurrent is how many tasks run at once; default 8. A delivery
	// beyond it is answered TARGET_BUSY.
	MaxConcurrent int
	// Weight scales this instance's share of traffic; default 100.
	Weight int
	// Heartbeat is the heartbeat interval. 0 (the default) reads it from
	// the REACH_AGENTS bucket at Start: its TTL / 3, the heartbeat it was
	// provisioned with. Any other value must equal that, or Start fails with
	// ErrHeartbeatMismatch.
	Heartbeat time.Duration
	// TimeoutHint declares how long a task may take; 0 lets dispatchers
	// learn it.
	TimeoutHint time.Duration
	// DrainTimeout bounds how long a drain waits for in-flight tasks;
	// default 30 s.
	DrainTimeout time.Duration
	// Subjects names the subjects; zero means prefix "reach".
	Subjects streams.Subjects
	// Declaration, when set, is what the agent's type can do and refuses
	// (docs/declarations.md): Start writes it to REACH_CAPS under Type, after
	// checking it — every field valid, Type as the Config's (or empty),
	// every capability it names handled — and refuses to start on an
	// invalid one, naming the field. Nil: nothing is written, and the
	// agent is routed by capability name alone.
	Declaration *declare.Declaration
	// DeclarationFile is a YAML or JSON file with the Declaration, read at
	// Start (one of the two, not both).
	DeclarationFile string
	// NoServiceDiscovery stops the agent answering $SRV.PING, INFO and STATS (docs/protocol.md, NATS micro).
	NoServiceDiscovery bool
	// JetStreamDomain is the JetStream domain of the hub, for an agent
	// connected to a leaf node server that has no JetStream of its own:
	// its registry, declaration and idempotency requests go as
	// $JS.<domain>.API.…, the only form that crosses a leaf link
	// (docs/operations.md, leaf nodes; auth.HubDomain). Empty: the
	// server's own JetStream.
	JetStreamDomain string
}

// jetStream is the JetStream API on nc, in Config.JetStreamDomain.
func (a *Agent) jetStream(nc *nats.Conn) (jetstream.JetStream, error) {
	return jetStreamIn(nc, a.cfg.JetStreamDomain)
}

// jetStreamIn is the JetStream API on nc in domain; empty: the server's own.
func jetStreamIn(nc *nats.Conn, domain string) (jetstream.JetStream, error) {
	if domain != "" {
		return jetstream.NewWithDomain(nc, domain)
	}
	return jetstream.New(nc)
}

// Option configures an Agent.
type Option func(*Agent)

// WithLogger sets the agent's logger. The default writes events of level
// info and above to standard error, one JSON line each: "agent registered"
// once Start has registered the agent, "agent drained" when it leaves, and
// warnings (a reply that could not be sent, a panicking handler). Pass
// zerolog.Nop() to silence it.
func WithLogger(l zerolog.Logger) Option { return func(a *Agent) { a.log = l } }

// defaultLogger is the logger of an agent made without WithLogger.
func defaultLogger() zerolog.Logger {
	return zerolog.New(os.Stderr).Level(zerolog.InfoLevel).With().Timestamp().Logger()
}

// WithHeartbeatConn makes heartbeats use nc. By default the agent opens a
// second connection with the work connection's options, so that heartbeats
// never queue behind task traffic. The agent does not close a given conn.
func WithHeartbeatConn(nc *nats.Conn) Option { return func(a *Agent) { a.hbConn = nc } }

// WithoutSignals stops Run from draining on SIGTERM and SIGINT (it still
// drains when its context ends).
func WithoutSignals() Option { return func(a *Agent) { a.noSignals = true } }

// Agent serves capabilities over NATS. Register handlers with Handle, then
// call Run (or Start and later Drain). Its methods are safe for concurrent
// use; Drain is idempotent.
type Agent struct {
	nc        *nats.Conn
	cfg       Config
	id        string
	log       zerolog.Logger
	hbConn    *nats.Conn
	ownHBConn bool
	noSignals bool
	decl      *declare.Declaration // written to REACH_CAPS at Start
	svc       *micro.Service       // answers $SRV once registered; nil with NoServiceDiscovery

	mu       sync.Mutex
	handlers map[string]Handler
	started  bool
	drained  bool // set by Drain once the subscription is done: deliver refuses
	sub      *nats.Subscription
	hb       *registry.Heartbeat
	idem     *idem.Store
	incarn   string // this run of the instance (registry.Record.Incarnation)
	// replyPrefix is the inbox prefix this connection may publish under,
	// found at Start; "" keeps every result on the dispatcher's path.
	replyPrefix string

	slots    chan struct{}
	workers  *workers.Pool[job]
	inflight sync.WaitGroup
	running  sync.Map        // *Request → struct{}: the deliveries holding a slot, for CANCEL
	ctx      context.Context // cancelled on hard stop
	stop     context.CancelFunc

	drainOnce sync.Once
	drainErr  error
}

// New validates cfg and returns an agent that will serve on nc.
func New(nc *nats.Conn, cfg Config, opts ...Option) (*Agent, error) {
	if nc == nil {
		return nil, errors.New("agentkit: nil NATS connection")
	}
	if err := streams.ValidateCapability(cfg.Type); err != nil {
		return nil, fmt.Errorf("agentkit: type: %w", err)
	}
	if cfg.ID == "" {
		cfg.ID = strings.ReplaceAll(cfg.Type, ".", "-") + "-" + nuid.Next()[14:]
	}
	if err := streams.ValidateInstanceID(cfg.ID); err != nil {
		return nil, fmt.Errorf("agentkit: %w", err)
	}
	if cfg.MaxConcurrent == 0 {
		cfg.MaxConcurrent = DefaultMaxConcurrent
	}
	if cfg.MaxConcurrent < 1 {
		return nil, fmt.Errorf("agentkit: MaxConcurrent must be at least 1, got %d", cfg.MaxConcurrent)
	}
	if cfg.Heartbeat != 0 && cfg.Heartbeat < 100*time.Millisecond {
		return nil, fmt.Errorf("agentkit: Heartbeat %v is below the 100ms minimum", cfg.Heartbeat)
	}
	if cfg.Version == "" {
		cfg.Version = "0.0.0"
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = DefaultDrainTimeout
	}
	decl, err := readDeclaration(cfg)
	if err != nil {
		return nil, err
	}
	a := &Agent{
		nc:       nc,
		cfg:      cfg,
		id:       cfg.ID,
		incarn:   idem.NewIncarnation(),
		log:      defaultLogger(),
		handlers: make(map[string]Handler),
		slots:    make(chan struct{}, cfg.MaxConcurrent),
		decl:     decl,
	}
	for _, o := range opts {
		o(a)
	}
	a.log = a.log.With().Str("agent", a.id).Logger()
	return a, nil
}

// ID returns the instance id.
func (a *Agent) ID() string { return a.id }

// Handle registers the handler of a capability. It must be called before
// Start; an invalid capability name is refused with the reason.
func (a *Agent) Handle(capability string, h Handler) error {
	if err := streams.ValidateCapability(capability); err != nil {
		return fmt.Errorf("agentkit: %w", err)
	}
	if h == nil {
		return fmt.Errorf("agentkit: nil handler for %q", capability)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.started {
		return ErrAlreadyStarted
	}
	if _, dup := a.handlers[capability]; dup {
		return fmt.Errorf("agentkit: capability %q registered twice", capability)
	}
	a.handlers[capability] = h
	return nil
}

// Record returns the agent record this agent heartbeats. Before Start its
// heartbeat_ms is Config.Heartbeat: 0 while it is to be read from the
// bucket.
func (a *Agent) Record() registry.Record {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.hb != nil {
		return a.hb.Record()
	}
	return a.record()
}

func (a *Agent) record() registry.Record {
	caps := make([]string, 0, len(a.handlers))
	for c := range a.handlers {
		caps = append(caps, c)
	}
	slices.Sort(caps)
	return registry.Record{
		ID: a.id, Type: a.cfg.Type, Capabilities: caps, MaxConcurrent: a.cfg.MaxConcurrent,
		Weight: a.cfg.Weight, Status: registry.StatusReady, TimeoutHintMS: a.cfg.TimeoutHint.Milliseconds(),
		HeartbeatMS: a.cfg.Heartbeat.Milliseconds(), Version: a.cfg.Version, Incarnation: a.incarn,
	}
}

// Run starts the agent and serves until ctx ends or (unless WithoutSignals)
// the process receives SIGTERM or SIGINT, then drains: status "draining",
// in-flight tasks finish, the record is deleted. When ctx ends while the
// agent is still starting, Run undoes the registration and returns nil.
func (a *Agent) Run(ctx context.Context) error {
	if !a.noSignals {
		var stop context.CancelFunc
		ctx, stop = signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
		defer stop()
	}
	if err := a.Start(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // asked to stop before it was up
		}
		return err
	}
	<-ctx.Done()
	dctx, cancel := context.WithTimeout(context.Background(), a.cfg.DrainTimeout+5*time.Second)
	defer cancel()
	return a.Drain(dctx)
}

// Start subscribes to the agent's delivery subject and registers it; the
// agent is routable once Start returns. Registration errors (an invalid
// record, a missing bucket) are returned here. Without a deadline on ctx,
// Start gives up after DefaultStartTimeout.
func (a *Agent) Start(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultStartTimeout)
		defer cancel()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.started {
		return ErrAlreadyStarted
	}
	if len(a.handlers) == 0 {
		return ErrNoHandlers
	}
	if a.hbConn == nil {
		hc, err := a.nc.Opts.Connect()
		if err != nil {
			return fmt.Errorf("agentkit: heartbeat connection: %w", err)
		}
		a.hbConn, a.ownHBConn = hc, true
	}
	registered := false
	defer func() {
		if !registered {
			a.closeHBConn()
		}
	}()
	js, err := a.jetStream(a.hbConn)
	if err != nil {
		return err
	}
	reg, err := registry.Open(ctx, js)
	if err != nil {
		return err
	}
	if err := a.setHeartbeat(ctx, reg); err != nil {
		return err
	}
	rec := a.record()
	hb, err := registry.NewHeartbeat(reg, rec, a.log)
	if err != nil {
		return err
	}
	if err := a.declare(ctx, js, a.decl, a.handlers); err != nil {
		return err
	}
	wjs, err := a.jetStream(a.nc)
	if err != nil {
		return err
	}
	ikv, err := wjs.KeyValue(ctx, streams.BucketIdempotency)
	if err != nil {
		return streams.OpenError("agentkit", streams.BucketIdempotency, err)
	}
	// Half the slots at most wait on an unanswered claim: the other half
	// still serve calls without an idempotency key while the bucket has
	// no leader (4-9 s after a partition heals).
	a.ctx, a.stop = context.WithCancel(context.Background())
	a.idem = &idem.Store{KV: ikv, Reg: reg, Owner: a.id, Incarnation: a.incarn, Check: a.cfg.Heartbeat, Log: a.log,
		MaxRetrying: max(a.cfg.MaxConcurrent/2, 1), Done: a.ctx.Done()}
	a.workers = workers.New(func(j job) { a.run(j.h, j.req) }, a.ctx.Done())
	a.replyPrefix = replyPrefix(ctx, a.nc)
	if !a.cfg.NoServiceDiscovery {
		a.svc = micro.New(micro.Config{Type: a.cfg.Type, ID: a.id, Version: a.cfg.Version, Subject: a.cfg.Subjects.Agent(a.id), Capabilities: rec.Capabilities, Declaration: a.decl})
	}
	sub, err := a.nc.Subscribe(a.cfg.Subjects.Agent(a.id), a.deliver)
	if err != nil {
		return fmt.Errorf("agentkit: subscribe: %w", err)
	}
	// Make sure the server has the subscription before anyone can route here.
	if err := a.nc.FlushWithContext(ctx); err != nil {
		_ = sub.Unsubscribe()
		return err
	}
	if err := hb.Start(ctx); err != nil {
		_ = sub.Unsubscribe()
		// The put may have reached the bucket before ctx ended: take the
		// record back, or dispatchers would route to an agent that is not
		// there until it expires.
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = hb.Stop(cctx, true)
		return fmt.Errorf("agentkit: register: %w", err)
	}
	registered = true
	a.sub, a.hb, a.started = sub, hb, true
	a.svc.Start(a.nc, a.log)
	a.log.Info().Strs("capabilities", rec.Capabilities).Int("max_concurrent", rec.MaxConcurrent).
		Int64("heartbeat_ms", rec.HeartbeatMS).Bool("direct_results", a.replyPrefix != "").Msg("agent registered")
	return nil
}

// setHeartbeat takes the heartbeat interval from the REACH_AGENTS bucket
// (TTL / 3) when Config.Heartbeat is 0, and refuses one that differs.
func (a *Agent) setHeartbeat(ctx context.Context, reg *registry.Registry) error {
	st, err := reg.KeyValue().Status(ctx)
	if err != nil {
		return fmt.Errorf("agentkit: read the heartbeat of %s: %w", streams.BucketAgents, err)
	}
	bucket := st.TTL() / 3
	switch {
	case a.cfg.Heartbeat == 0:
		a.cfg.Heartbeat = bucket
	case a.cfg.Heartbeat != bucket:
		return fmt.Errorf("%w: Config.Heartbeat is %v, but %s has TTL %v, so agents heartbeat every %v (leave Heartbeat 0 to use it)",
			ErrHeartbeatMismatch, a.cfg.Heartbeat, streams.BucketAgents, st.TTL(), bucket)
	}
	return nil
}

func (a *Agent) closeHBConn() {
	if a.ownHBConn && a.hbConn != nil {
		a.hbConn.Close()
	}
}

// Drain stops taking tasks and deregisters: it marks the record "draining",
// stops the subscription (taking the deliveries it still holds), waits (up
// to DrainTimeout or ctx, for both) for in-flight tasks, cancels any still
// running, and deletes the record. A delivery that comes later is answered
// TARGET_BUSY. Calling it again returns the first result.
func (a *Agent) Drain(ctx context.Context) error {
	a.mu.Lock()
	started := a.started
	a.mu.Unlock()
	if !started {
		return ErrNotStarted
	}
	a.drainOnce.Do(func() {
		var errs []error
		if err := a.hb.MarkDraining(ctx); err != nil {
			errs = append(errs, fmt.Errorf("mark draining: %w", err))
		}
		wctx, cancel := context.WithTimeout(ctx, a.cfg.DrainTimeout)
		defer cancel()
		// The subscription closes once it has handed over every delivery
		// it holds: those run like the others.
		closed := a.sub.StatusChanged(nats.SubscriptionClosed)
		if err := a.sub.Drain(); err != nil {
			if !errors.Is(err, nats.ErrConnectionClosed) {
				errs = append(errs, fmt.Errorf("drain subscription: %w", err))
			}
		} else {
			select {
			case <-closed:
			case <-wctx.Done():
			}
		}
		// From here on deliver refuses; every task it took was counted
		// under a.mu before, so the wait below sees it.
		a.mu.Lock()
		a.drained = true
		a.mu.Unlock()
		done := make(chan struct{})
		go func() {
			a.inflight.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-wctx.Done():
		}
		a.stop() // cancel whatever is still running
		<-done
		a.svc.Stop()
		if err := a.hb.Stop(ctx, true); err != nil {
			errs = append(errs, fmt.Errorf("deregister: %w", err))
		}
		a.closeHBConn()
		a.drainErr = errors.Join(errs...)
		a.log.Info().Err(a.drainErr).Msg("agent drained")
	})
	return a.drainErr
}

// job is one task for a worker (workers.Pool).
type job struct {
	h   Handler
	req *Request
}

// deliver runs on the subscription's goroutine for each delivery: it takes a
// slot or answers TARGET_BUSY, acknowledges, and starts the handler.
func (a *Agent) deliver(m *nats.Msg) {
	if m.Reply == "" {
		if m.Header.Get(streams.HeaderStatus) == string(streams.StatusCancel) {
			a.cancelTask(m.Header)
			return
		}
		a.log.Warn().Str("subject", m.Subject).Msg("delivery without reply subject dropped")
		return
	}
	req := newRequest(a, m)
	a.mu.Lock()
	h, drained := a.handlers[req.Capability], a.drained
	if !drained {
		// Counted under a.mu, where Drain marks the agent drained before
		// it waits: the wait sees every task taken (sync.WaitGroup's
		// rule: an Add from zero happens before the Wait).
		a.inflight.Add(1)
	}
	a.mu.Unlock()
	if drained {
		a.fail(req, streams.NewError(streams.CodeTargetBusy, "agent %s has drained", a.id))
		return
	}
	if h == nil {
		a.fail(req, streams.NewError(streams.CodeNoAgent, "agent %s does not serve capability %q", a.id, req.Capability))
		a.inflight.Done()
		return
	}
	select {
	case a.slots <- struct{}{}:
	default:
		a.fail(req, streams.NewError(streams.CodeTargetBusy, "agent %s has all %d slots busy", a.id, a.cfg.MaxConcurrent))
		a.inflight.Done()
		return
	}
	req.holdsSlot = true
	a.running.Store(req, struct{}{})
	a.hb.SetActive(len(a.slots))
	req.ackTimer = time.AfterFunc(AckDelay, func() { a.ack(req) })
	a.workers.Push(job{h, req})
}

// cancelTask cancels the handler context of the delivery a CANCEL names:
// by its reply subject (Reach-Delivery), or, from a sender that does not
// say, every delivery of the request id with that attempt. A cancel for a
// delivery not running here is ignored.
func (a *Agent) cancelTask(h nats.Header) {
	delivery, requestID, attempt := h.Get(streams.HeaderDelivery), h.Get(streams.HeaderRequestID), h.Get(streams.HeaderAttempt)
	a.running.Range(func(k, _ any) bool {
		req := k.(*Request)
		match := req.reply == delivery
		if delivery == "" {
			match = req.RequestID == requestID && (attempt == "" || attempt == strconv.Itoa(req.Attempt))
		}
		if match {
			a.log.Debug().Str("request_id", req.RequestID).Int("attempt", req.Attempt).Msg("task cancelled")
			req.cancel()
		}
		return true
	})
}

// AckDelay is how long an agent holds back its ACKED: a task finished within
// it is answered with its result alone (the result implies the ACK), which
// saves a message on every fast task. It is far below any dispatcher's ack
// timeout.
const AckDelay = 20 * time.Millisecond

// ack sends ACKED unless the task has already answered.
func (a *Agent) ack(req *Request) {
	if !req.answered.CompareAndSwap(false, true) {
		return
	}
	m := streams.StatusReply(req.reply, streams.StatusAcked, req.RequestID)
	m.Header.Set(streams.HeaderActive, strconv.Itoa(len(a.slots)))
	m.Header.Set(streams.HeaderNode, a.id)
	if err := a.nc.PublishMsg(m); err != nil {
		a.log.Warn().Err(err).Str("request_id", req.RequestID).Msg("ack failed")
	}
}

func (a *Agent) run(h Handler, req *Request) {
	defer func() {
		a.running.Delete(req)
		a.release(req) // if no reply went out
		a.inflight.Done()
	}()
	base, span := a.traceHandler(req)
	if span != nil {
		defer span.End()
	}
	ctx := &taskCtx{Context: base, req: req, deadline: req.Deadline}
	defer ctx.end()
	req.ctx.Store(ctx)
	if req.cancelled.Load() { // cancelled before it started: nothing runs
		a.publish(req, a.errorMsg(req, streams.NewError(streams.CodeCancelled, "cancelled before it started")))
		return
	}
	var key string
	if k := req.Header.Get(streams.HeaderIdempotencyKey); k != "" {
		key = streams.IdempotencyKey(req.Capability, req.Header.Get(streams.HeaderSource), k)
		// While the claim is retried or reconciled (the store has no
		// leader), or another execution of the key is waited for,
		// PROCESSING keeps the dispatcher's per-call timeout from expiring.
		informed := a.keepInformed(req)
		stored, err := a.idem.Begin(ctx, key, req.RequestID)
		informed()
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			a.publish(req, a.errorMsg(req, streams.NewError(streams.CodeTimeout, "waiting for another execution of idempotency key %q", k)))
			return
		case errors.Is(err, idem.ErrInDoubt):
			m := a.errorMsg(req, streams.NewError(streams.CodeInternal, "idempotency key %q: %v", k, err))
			m.Header.Set(streams.HeaderInDoubt, "true")
			a.publish(req, m)
			return
		case err != nil: // the bucket is unreachable now: nothing ran, another attempt may do better
			a.publish(req, a.errorMsg(req, streams.NewError(streams.CodeTargetBusy, "idempotency key %q: %v", k, err)))
			return
		case stored != nil:
			a.log.Debug().Str("request_id", req.RequestID).Str("key", key).Msg("replaying stored outcome")
			a.publish(req, replayMsg(req.reply, req.RequestID, a.id, stored))
			return
		}
	}
	start := time.Now()
	var m *nats.Msg
	if out, err := a.call(ctx, h, req); err != nil {
		e := classify(err)
		a.log.Debug().Str("request_id", req.RequestID).Str("code", string(e.Code)).Str("error", e.Message).Msg("task failed")
		m = a.errorMsg(req, e)
	} else {
		m = a.resultMsg(req, out)
		a.log.Debug().Str("request_id", req.RequestID).Dur("took", time.Since(start)).Msg("task finished")
	}
	a.svc.Count(req.Capability, time.Since(start), m.Header.Get(streams.HeaderError))
	if key != "" {
		a.settle(key, req, m)
	}
	a.publish(req, m)
}

// settle records the outcome of an idempotent task before its reply goes
// out, so a retry after a lost reply replays it. Only answers are recorded:
// a result or a business rejection. After any other error the claim is
// released, so a later retry or dead-letter replay executes the key again
// once the fault is fixed.
func (a *Agent) settle(key string, req *Request, m *nats.Msg) {
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	// While the store is slow or unavailable (a bucket without a leader)
	// the reply waits; PROCESSING tells the dispatcher the task is done
	// and being recorded, so its per-call timeout does not expire on
	// work that was done.
	defer a.keepInformed(req)()
	e := streams.ErrorFromMessage(m)
	var err error
	switch {
	case e == nil:
		err = a.idem.Save(ctx, key, &idem.Record{RequestID: req.RequestID, ContentType: req.ContentType, Data: m.Data,
			Cost: m.Header.Get(streams.HeaderCost)})
	case e.Code == streams.CodeBizReject:
		err = a.idem.Save(ctx, key, &idem.Record{RequestID: req.RequestID, ContentType: req.ContentType, Error: e,
			Cost: m.Header.Get(streams.HeaderCost)})
	default:
		err = a.idem.Release(ctx, key)
	}
	if err != nil {
		a.log.Error().Err(err).Str("request_id", req.RequestID).Str("key", key).Msg("idempotency outcome not recorded yet; retried until the store answers")
	}
}

// settleTimeout bounds how long an idempotent task's outcome is retried
// into REACH_IDEMPOTENCY before the reply goes out without it.
const settleTimeout = 30 * time.Second

// While an outcome is being stored: the first PROCESSING after
// settleNotice (a store that answers sends none), then one every
// settleProgress, well within the dispatcher's shortest per-call timeout
// (5 s).
const (
	settleNotice   = 250 * time.Millisecond
	settleProgress = time.Second
)

// keepInformed sends PROCESSING for req after settleNotice and then every
// settleProgress until the returned stop is called; none is sent after
// stop returns.
func (a *Agent) keepInformed(req *Request) (stop func()) {
	var mu sync.Mutex
	stopped := false
	var t *time.Timer
	mu.Lock() // t is set before the first call reads it
	defer mu.Unlock()
	t = time.AfterFunc(settleNotice, func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		if err := req.Progress(); err != nil {
			a.log.Warn().Err(err).Str("request_id", req.RequestID).Msg("progress failed")
		}
		t.Reset(settleProgress)
	})
	return func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
	}
}

// call runs the handler, turning a panic into an INTERNAL error so one bad
// task never takes the agent down.
func (a *Agent) call(ctx context.Context, h Handler, req *Request) (out any, err error) {
	defer func() {
		if p := recover(); p != nil {
			a.log.Error().Str("request_id", req.RequestID).Interface("panic", p).Bytes("stack", debug.Stack()).Msg("handler panicked")
			err = streams.NewError(streams.CodeInternal, "handler panicked: %v", p)
		}
	}()
	return h(ctx, req)
}

// resultMsg builds the FINISHED reply carrying out, or an error reply when
// out cannot be encoded or exceeds the server's max_payload.
func (a *Agent) resultMsg(req *Request, out any) *nats.Msg {
	m := streams.StatusReply(req.reply, streams.StatusFinished, req.RequestID)
	m.Header.Set(streams.HeaderNode, a.id)
	m.Header.Set(streams.HeaderContentType, req.ContentType)
	if c := req.costHeader(); c != "" {
		m.Header.Set(streams.HeaderCost, c)
	}
	if b, ok := out.([]byte); ok {
		m.Data = b
	} else {
		b, err := streams.Encode(req.ContentType, out)
		if err != nil {
			return a.errorMsg(req, classify(err))
		}
		m.Data = b
	}
	// publish adds the load report to a reply through the dispatcher: its
	// widest value counts here, and is removed again, since a direct
	// answer to the caller must not carry it.
	m.Header.Set(streams.HeaderActive, strconv.Itoa(a.cfg.MaxConcurrent))
	err := streams.CheckSize(m, a.nc.MaxPayload())
	m.Header.Del(streams.HeaderActive)
	if err != nil {
		return a.errorMsg(req, classify(fmt.Errorf("result: %w", err)))
	}
	return m
}

// errorMsg builds a FAILED reply with code and message.
func (a *Agent) errorMsg(req *Request, e *streams.Error) *nats.Msg {
	m := streams.ErrorReply(req.reply, req.ContentType, req.RequestID, e)
	m.Header.Set(streams.HeaderNode, a.id)
	if c := req.costHeader(); c != "" {
		m.Header.Set(streams.HeaderCost, c)
	}
	return m
}

func (a *Agent) publish(req *Request, m *nats.Msg) {
	if c := req.ctx.Load(); c != nil {
		tracing.MarkReply(c.Context, m)
	}
	req.stampChunks(m)
	req.answered.Store(true) // a pending ACK is no longer needed
	if req.ackTimer != nil {
		req.ackTimer.Stop()
	}
	// The slot is free before the reply leaves: a dispatcher that sends the
	// next task as soon as it has the result must find it free.
	a.release(req)
	active := strconv.Itoa(len(a.slots))
	if out := a.directResult(req, m); out != nil {
		// The notice carries only what the dispatcher reads: its inbox
		// subject already names the delivery.
		notice := streams.StatusReply(req.reply, streams.StatusFinished, "")
		notice.Header.Set(streams.HeaderDirect, "1")
		notice.Header.Set(streams.HeaderActive, active)
		if c := m.Header.Get(streams.HeaderCost); c != "" {
			notice.Header.Set(streams.HeaderCost, c)
		}
		// The result goes first: if the agent dies between the two, the
		// caller has its answer and the dispatcher merely times out.
		err := a.nc.PublishMsg(out)
		if err == nil {
			err = a.nc.PublishMsg(notice)
		}
		if err != nil {
			a.log.Warn().Err(err).Str("request_id", req.RequestID).Msg("reply failed")
		}
		return
	}
	m.Header.Set(streams.HeaderActive, active)
	if err := streams.CheckSize(m, a.nc.MaxPayload()); err != nil {
		// A replayed outcome or a long rejection can outgrow the limit
		// that resultMsg checked: the caller hears why instead of waiting
		// for a reply the client library would refuse.
		m = a.errorMsg(req, classify(fmt.Errorf("reply: %w", err)))
		m.Header.Set(streams.HeaderActive, active)
	}
	if err := a.nc.PublishMsg(m); err != nil {
		a.log.Warn().Err(err).Str("request_id", req.RequestID).Msg("reply failed")
	}
}

// directResult returns the FINISHED result m addressed to the caller
// (Reach-Reply-To), with the headers a dispatcher would have added, or nil
// when m must take the dispatcher's path: not offered, not a result, or
// too large with those headers.
func (a *Agent) directResult(req *Request, m *nats.Msg) *nats.Msg {
	if req.replyTo == "" || m.Header.Get(streams.HeaderStatus) != string(streams.StatusFinished) {
		return nil
	}
	out := &nats.Msg{Subject: req.replyTo, Data: m.Data, Header: m.Header}
	out.Header.Set(streams.HeaderOrchestrationID, req.OrchestrationID)
	out.Header.Set(streams.HeaderAttempt, strconv.Itoa(req.Attempt))
	if streams.CheckSize(out, a.nc.MaxPayload()) != nil {
		return nil
	}
	return out
}

// replyProbeWait bounds the wait for replyPrefix's probe message, which the
// flush has normally delivered already.
const replyProbeWait = 100 * time.Millisecond

// replyPrefix returns the prefix of nc's inboxes ("_INBOX." unless the
// connection sets another) when nc may publish to such an inbox, or "" when
// it may not, as under allow_responses alone. It publishes one message to
// an inbox of its own and checks that it arrives. Agents answer a caller
// directly only under this prefix: a result published where the server
// refuses it would be lost.
//
// A connection with a user JWT (an identity's credentials, made by
// `agentreach auth`) skips the probe and answers through the dispatcher:
// such an identity may publish to no inbox, its own included (the probe
// would only earn a permissions violation in the server's and the agent's
// logs).
func replyPrefix(ctx context.Context, nc *nats.Conn) string {
	if nc.Opts.UserJWT != nil {
		return ""
	}
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return ""
	}
	defer func() { _ = sub.Unsubscribe() }()
	if nc.Publish(inbox, nil) != nil || nc.FlushWithContext(ctx) != nil {
		return ""
	}
	if _, err := sub.NextMsg(replyProbeWait); err != nil {
		return ""
	}
	return inbox[:strings.LastIndexByte(inbox, '.')+1]
}

// release gives back req's slot, once.
func (a *Agent) release(req *Request) {
	if req.holdsSlot {
		req.holdsSlot = false
		<-a.slots
		a.hb.SetActive(len(a.slots))
	}
}

// fail answers a delivery with an error at once.
func (a *Agent) fail(req *Request, e *streams.Error) { a.publish(req, a.errorMsg(req, e)) }
