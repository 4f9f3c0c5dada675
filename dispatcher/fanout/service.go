package fanout

import (
	"context"
	"errors"
	"fmt"
	"github.com/agent-reach/agentreach/dispatcher/events"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/streams"
)

// DefaultMaxConcurrent bounds the fan-outs and broadcasts one Service
// gathers at once.
const DefaultMaxConcurrent = 1000

// Config configures a Service. The zero value means all defaults.
type Config struct {
	// MaxConcurrent bounds the fan-outs and broadcasts gathering at once;
	// beyond it a request is answered OVERLOADED at once. Default 1000.
	// (Each branch also takes one of the dispatcher's MaxInFlight slots.)
	MaxConcurrent int
}

// Option configures a Service.
type Option func(*Service)

// WithLogger sets the service's logger; the default discards.
func WithLogger(l zerolog.Logger) Option { return func(s *Service) { s.log = l } }

// Service answers reach.fanout and reach.broadcast.<capability> beside a
// dispatcher, in the dispatchers' queue group. Create it with New, run it
// with Start, stop it with Drain or Close (both idempotent). Its methods
// are safe for concurrent use.
type Service struct {
	nc  *nats.Conn
	d   *dispatcher.Dispatcher
	cfg Config
	log zerolog.Logger

	authorizer dispatcher.Authorizer // auth.go

	slots   chan struct{}
	running sync.WaitGroup
	ctx     context.Context // cancelled by Close: running gathers end at once
	stop    context.CancelFunc

	mu       sync.Mutex
	subs     []*nats.Subscription
	started  bool
	stopOnce sync.Once
}

// New returns a service that runs its branches through d, answering on nc
// (normally d's own connection).
func New(nc *nats.Conn, d *dispatcher.Dispatcher, cfg Config, opts ...Option) (*Service, error) {
	if nc == nil || d == nil {
		return nil, errors.New("fanout: nil connection or dispatcher")
	}
	if cfg.MaxConcurrent == 0 {
		cfg.MaxConcurrent = DefaultMaxConcurrent
	}
	if cfg.MaxConcurrent < 1 {
		return nil, fmt.Errorf("fanout: MaxConcurrent must be at least 1, got %d", cfg.MaxConcurrent)
	}
	s := &Service{nc: nc, d: d, cfg: cfg, log: zerolog.Nop(), slots: make(chan struct{}, cfg.MaxConcurrent)}
	s.ctx, s.stop = context.WithCancel(context.Background())
	for _, o := range opts {
		o(s)
	}
	s.log = s.log.With().Str("dispatcher", d.Name()).Logger()
	return s, nil
}

// Start joins the queue group on the fan-out and broadcast subjects. The
// dispatcher must be started.
func (s *Service) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return errors.New("fanout: already started")
	}
	dc := s.d.Config()
	for subject, h := range map[string]nats.MsgHandler{dc.Subjects.FanOut(): s.onFanOut, dc.Subjects.BroadcastWildcard(): s.onBroadcast} {
		sub, err := s.nc.QueueSubscribe(subject, dc.QueueGroup, s.admit(h))
		if err != nil {
			s.unsubscribe()
			return fmt.Errorf("fanout: subscribe %s: %w", subject, err)
		}
		s.subs = append(s.subs, sub)
	}
	if err := s.nc.FlushWithContext(ctx); err != nil {
		s.unsubscribe()
		return fmt.Errorf("fanout: subscribe: %w", err)
	}
	s.started = true
	return nil
}

func (s *Service) unsubscribe() {
	for _, sub := range s.subs {
		_ = sub.Unsubscribe()
	}
	s.subs = nil
}

// Drain stops taking requests and waits (up to ctx) for those gathering to
// answer.
func (s *Service) Drain(ctx context.Context) error {
	return s.shutdown(ctx, true)
}

// Close stops at once: gathers still running cancel their branches and
// answer with what they have.
func (s *Service) Close() error {
	return s.shutdown(context.Background(), false)
}

func (s *Service) shutdown(ctx context.Context, graceful bool) error {
	var err error
	s.stopOnce.Do(func() {
		s.mu.Lock()
		subs := s.subs
		s.mu.Unlock()
		for _, sub := range subs {
			if !graceful {
				_ = sub.Unsubscribe()
				continue
			}
			closed := sub.StatusChanged(nats.SubscriptionClosed)
			if sub.Drain() == nil { // every request received has been admitted once it closes
				select {
				case <-closed:
				case <-ctx.Done():
				}
			}
		}
		if !graceful {
			s.stop()
		}
		done := make(chan struct{})
		go func() { s.running.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			s.stop()
			<-done
			err = fmt.Errorf("fanout: drain: %w", ctx.Err())
		}
		s.stop()
	})
	return err
}

// admit runs h for a request on a goroutine of its own (it waits for its
// branches), or answers OVERLOADED when MaxConcurrent are gathering. A
// request whose reply subject the authorizer refuses (ReplyChecker) is
// dropped unanswered.
func (s *Service) admit(h nats.MsgHandler) nats.MsgHandler {
	return func(m *nats.Msg) {
		if m.Reply == "" {
			s.log.Warn().Str("subject", m.Subject).Msg("request without reply subject dropped (use request/reply)")
			return
		}
		if rc, ok := s.authorizer.(dispatcher.ReplyChecker); ok && rc.CheckReply(m) != nil {
			return // a reply subject outside its caller's inbox: nothing is published there
		}
		select {
		case s.slots <- struct{}{}:
		default:
			p := s.parent(m)
			s.fail(m, p, streams.NewError(streams.CodeOverloaded, "%d fan-outs and broadcasts are gathering here already", s.cfg.MaxConcurrent))
			return
		}
		s.running.Add(1)
		go func() {
			defer func() { <-s.slots; s.running.Done() }()
			h(m)
		}()
	}
}

// parent is what a fan-out or broadcast request says about itself.
type parent struct {
	requestID, orchID string
	contentType       string
	deadline          time.Time
	start             time.Time
	header            nats.Header
}

func (s *Service) parent(m *nats.Msg) parent {
	p := parent{start: time.Now(), header: m.Header}
	if p.header == nil {
		p.header = nats.Header{}
	}
	p.requestID, p.orchID = p.header.Get(streams.HeaderRequestID), p.header.Get(streams.HeaderOrchestrationID)
	if streams.ValidateInstanceID(p.requestID) != nil {
		p.requestID = streams.NewRequestID()
	}
	if p.orchID == "" {
		p.orchID = p.requestID
	}
	p.contentType, _ = streams.PayloadType(p.header, m.Data)
	p.deadline = p.start.Add(s.d.Config().Deadline)
	return p
}

// check validates what every request shares: its body's content type and
// its deadline.
func (p *parent) check(m *nats.Msg) *streams.Error {
	if _, e := streams.PayloadType(p.header, m.Data); e != nil {
		return e
	}
	dl, e := streams.ParseDeadline(p.header)
	if e != nil {
		return e
	}
	if !dl.IsZero() {
		if time.Until(dl) <= 0 {
			return streams.NewError(streams.CodeDeadlineExceeded, "the deadline passed before dispatch")
		}
		p.deadline = dl
	}
	return nil
}

// branchMsg builds a branch's task: a request id of its own, the parent's
// orchestration id, deadline and the headers that travel across hops.
func (p *parent) branchMsg(body []byte, timeout time.Duration, agent string) *nats.Msg {
	m := nats.NewMsg("")
	m.Data = body
	m.Header.Set(streams.HeaderContentType, p.contentType)
	m.Header.Set(streams.HeaderRequestID, streams.NewRequestID())
	m.Header.Set(streams.HeaderOrchestrationID, p.orchID)
	m.Header.Set(streams.HeaderParentID, p.requestID)
	m.Header.Set(streams.HeaderDeadline, strconv.FormatInt(p.deadline.UnixMilli(), 10))
	for _, k := range []string{streams.HeaderTraceParent, streams.HeaderSource, streams.HeaderHops, streams.HeaderVisits} {
		if v := p.header.Get(k); v != "" {
			m.Header.Set(k, v)
		}
	}
	if timeout > 0 {
		m.Header.Set(streams.HeaderTimeout, strconv.FormatInt(timeout.Milliseconds(), 10))
	}
	if agent != "" {
		m.Header.Set(streams.HeaderAgent, agent)
	}
	return m
}

func (s *Service) onFanOut(m *nats.Msg) {
	p := s.parent(m)
	if e := p.check(m); e != nil {
		s.fail(m, p, e)
		return
	}
	if e := s.authorize("", m); e != nil {
		s.fail(m, p, e)
		return
	}
	req, e := DecodeRequest(p.contentType, m.Data)
	if e != nil {
		s.fail(m, p, e)
		return
	}
	maxWait := req.MaxWait
	if maxWait == 0 {
		for _, b := range req.Branches {
			maxWait = max(maxWait, b.Timeout)
		}
	}
	if left := time.Until(p.deadline); maxWait == 0 || maxWait > left {
		maxWait = left
	}
	jobs := make([]Job, len(req.Branches))
	key := p.header.Get(streams.HeaderIdempotencyKey)
	for i, b := range req.Branches {
		jobs[i] = Job{Name: b.Name, Capability: b.Capability, Timeout: b.Timeout, Msg: p.branchMsg(b.Payload, b.Timeout, b.Agent)}
		if key != "" { // each branch executes its part once
			jobs[i].Msg.Header.Set(streams.HeaderIdempotencyKey, key+"."+b.Name)
		}
	}
	r := Gather(s.ctx, s.d, jobs, req.Mode, req.Quorum, maxWait, p.contentType)
	s.answer(m, p, r, "fanout", "fanout")
}

func (s *Service) onBroadcast(m *nats.Msg) {
	p := s.parent(m)
	capability := s.d.Config().Subjects.CapabilityFromBroadcast(m.Subject)
	if err := streams.ValidateCapability(capability); err != nil {
		s.fail(m, p, streams.NewError(streams.CodeBadRequest, "%v", err))
		return
	}
	if e := p.check(m); e != nil {
		s.fail(m, p, e)
		return
	}
	if s.d.Resolves(capability) { // a workflow has no instances to ask
		s.fail(m, p, streams.NewError(streams.CodeBadRequest,
			"%s is a workflow: a broadcast asks every instance of a capability; call or submit the workflow instead", capability))
		return
	}
	if e := s.authorize(capability, m); e != nil {
		s.fail(m, p, e)
		return
	}
	mode, quorum := ModeAll, Quorum{}
	if v := p.header.Get(streams.HeaderQuorum); v != "" {
		q, e := ParseQuorum(v)
		if e != nil {
			s.fail(m, p, e)
			return
		}
		mode, quorum = ModeQuorum, q
	} else if v, ok := s.d.Quorum(capability); ok { // the capability's policy (validated there)
		q, _ := NewQuorum(v)
		mode, quorum = ModeQuorum, q
	}
	r, settle, e := s.broadcastShared(s.ctx, m, &p, capability, mode, quorum)
	if e != nil {
		s.fail(m, p, e)
		return
	}
	r.sortByName()
	s.answer(m, p, r, capability, "broadcast")
	settle()
}

// answer sends the aggregate and records the fan-out's own event.
func (s *Service) answer(m *nats.Msg, p parent, r *Reply, capability, kind string) {
	body, err := r.encode(p.contentType, s.nc.MaxPayload())
	if err != nil {
		s.fail(m, p, streams.AsError(err))
		return
	}
	out := r.message(p.contentType, p.requestID, p.orchID, body)
	out.Subject = m.Reply
	if err := s.nc.PublishMsg(out); err != nil {
		s.log.Warn().Err(err).Str("request_id", p.requestID).Msg("fan-out reply failed")
	}
	ev := events.Event{RequestID: p.requestID, OrchestrationID: p.orchID, Capability: capability, Kind: kind,
		Status: out.Header.Get(streams.HeaderStatus), Code: out.Header.Get(streams.HeaderError), Outcome: events.OutcomeReply,
		Candidates: r.Expected, Attempts: 1, Start: p.start, LatencyMS: float64(time.Since(p.start).Microseconds()) / 1000,
		ParentID: p.header.Get(streams.HeaderParentID), Expected: r.Expected, Answered: r.Answered, Succeeded: r.Succeeded}
	s.d.RecordEvent(ev)
	for _, miss := range r.Missing {
		s.log.Info().Str("request_id", p.requestID).Str("kind", kind).Str("branch", miss.Name).Str("reason", miss.Reason).
			Str("error", miss.Message).Msg("branch missing")
	}
}

// fail answers a request that gathers nothing with an error, and records it.
func (s *Service) fail(m *nats.Msg, p parent, e *streams.Error) {
	out := streams.ErrorReply(m.Reply, p.contentType, p.requestID, e)
	out.Header.Set(streams.HeaderOrchestrationID, p.orchID)
	out.Header.Set(streams.HeaderAttempt, "0")
	if err := s.nc.PublishMsg(out); err != nil {
		s.log.Warn().Err(err).Str("request_id", p.requestID).Msg("fan-out error reply failed")
	}
	kind, capability := "fanout", "fanout"
	if c := s.d.Config().Subjects.CapabilityFromBroadcast(m.Subject); c != "" {
		kind, capability = "broadcast", c
	}
	s.d.RecordEvent(events.Event{RequestID: p.requestID, OrchestrationID: p.orchID, Capability: capability, Kind: kind,
		Status: events.StatusOf(e), Code: string(e.Code), Outcome: events.OutcomeReply, Start: p.start,
		LatencyMS: float64(time.Since(p.start).Microseconds()) / 1000})
}
