package dispatcher

import (
	"container/list"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/agent-reach/agentreach/dispatcher/selection"
	"github.com/agent-reach/agentreach/registry"
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
	queued          *list.Element                                  // in its capability's wait queue
	waitTimer       *time.Timer                                    // ends its wait for a slot
	seq             uint64                                         // stream sequence of a durable task; 0 on the direct tier
	inDoubt         bool                                           // the last error is an idempotent execution's unknown outcome (Reach-In-Doubt)
	// Cancellation (cancel.go): stopped holds why, once set; waiting is
	// true while a backoff timer owns t.
	pol *capPolicy // its capability's policy when it started (policy.go)
	// Matching (match.go): the requirement and preference, the view of the
	// instances that meet it, the instances a pick passed over and why, and
	// the types whose input schema refused the payload.
	need     registry.Requirement
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
	hedged    bool // a hedge delivery was sent
	hedgedWon bool // the outcome came from the hedge
	log       taskLog
	span      trace.Span // from its start to its outcome (trace.go)
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
func (l taskLog) Info() *zerolog.Event  { return l.with(l.base.Info()) }
func (l taskLog) Warn() *zerolog.Event  { return l.with(l.base.Warn()) }
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

// newTask reads a request's headers, filling in what the caller left out:
// the request id (a fresh UUID), the orchestration id (the request id) and
// the deadline (defaultDeadline).
func (d *Dispatcher) newTask(m *nats.Msg, capability string, start time.Time, durable bool) (*task, *streams.Error) {
	h := m.Header
	if h == nil {
		h = nats.Header{}
		m.Header = h
	}
	t := &task{
		req:        m,
		capability: capability,
		affinity:   h.Get(streams.HeaderAffinityKey),
		unicast:    h.Get(streams.HeaderAgent),
		pol:        d.policy(capability),
	}
	defaultDeadline := start.Add(t.pol.deadline)
	if durable {
		defaultDeadline = start.Add(d.cfg.DurableDeadline)
	}
	t.requestID, t.orchID = taskIDs(h)

	ct, badPayload := streams.PayloadType(h, m.Data)
	t.contentType = ct
	t.log = taskLog{base: &d.log, t: t}
	if e := d.readRequirements(t, h); e != nil {
		return t, e
	}
	if err := streams.ValidateCapability(t.capability); err != nil {
		return t, streams.NewError(streams.CodeBadRequest, "%v", err)
	}
	if err := streams.ValidateInstanceID(t.requestID); err != nil {
		return t, streams.NewError(streams.CodeBadRequest, "%s: %v", streams.HeaderRequestID, err)
	}
	if t.unicast != "" {
		if err := streams.ValidateInstanceID(t.unicast); err != nil {
			return t, streams.NewError(streams.CodeBadRequest, "%s: %v", streams.HeaderAgent, err)
		}
	}
	if badPayload != nil {
		return t, badPayload
	}
	// Every delivery says what its payload is, so no agent needs the
	// sniffing rule.
	h.Set(streams.HeaderContentType, t.contentType)
	hops, err := streams.ParseCount(h, streams.HeaderHops)
	if err != nil {
		return t, err
	}
	t.hops = int(min(hops, int64(d.cfg.MaxHops))) + 1
	if hops >= int64(d.cfg.MaxHops) {
		return t, streams.NewError(streams.CodeLoopDetected, "%s %d: one more hop exceeds the limit of %d", streams.HeaderHops, hops, d.cfg.MaxHops)
	}
	wish, err := streams.ParseCount(h, streams.HeaderTimeout)
	if err != nil {
		return t, err
	}
	t.wish = time.Duration(min(wish, int64(t.pol.maxCall/time.Millisecond))) * time.Millisecond
	if t.budget, err = streams.ParseBudget(h); err != nil {
		return t, err
	}
	if t.visits, err = streams.ParseVisits(h); err != nil {
		return t, err
	}
	if d.authorizer != nil {
		if e := d.authorizer.Authorize(t.capability, m, durable); e != nil {
			return t, e
		}
		t.source = h.Get(streams.HeaderSource)
	} else {
		// Unproven without auth, Reach-Source still reaches the agent once,
		// as Get reads it: no other spelling or value for a reader that
		// folds case or takes the last one (the authorizer refuses those).
		streams.KeepOne(h, streams.HeaderSource)
	}
	if durable {
		// Its result is published under its caller's name: the proven
		// identity, or without auth the Reach-Source as sent (or "_").
		owner, err := streams.ResultSource(h.Get(streams.HeaderSource))
		if err != nil {
			return t, streams.NewError(streams.CodeBadRequest, "%v", err)
		}
		t.owner = owner
	}
	if t.pol.write && h.Get(streams.HeaderIdempotencyKey) == "" {
		h.Set(streams.HeaderIdempotencyKey, t.requestID)
	}
	dl, err := streams.ParseDeadline(h)
	if err != nil {
		return t, err
	}
	if !dl.IsZero() {
		t.deadline = dl
		if time.Until(t.deadline) <= 0 {
			return t, streams.NewError(streams.CodeDeadlineExceeded, "the deadline passed before dispatch")
		}
	} else {
		t.deadline = defaultDeadline
	}
	return t, nil
}

// taskIDs returns a request's id and orchestration id, filling in what the
// caller left out: a fresh UUID, and the request id.
func taskIDs(h nats.Header) (requestID, orchID string) {
	requestID, orchID = h.Get(streams.HeaderRequestID), h.Get(streams.HeaderOrchestrationID)
	if requestID == "" {
		requestID = streams.NewRequestID()
	}
	if orchID == "" {
		orchID = requestID
	}
	return requestID, orchID
}

// A task has no goroutine of its own. The subscription callback starts it
// (newTask, resolve, publish the delivery); the agent's replies, arriving on
// the inbox's goroutine, and per-delivery timers move it on; done runs once
// with its outcome. Each delivery ends exactly once — by its result, an
// error reply, its timer or its instance leaving — whichever claims it first.

// handle starts one direct-tier task, which holds caller's in-flight slot;
// answer replies to the caller.
func (d *Dispatcher) handle(m *nats.Msg, caller string) {
	start := time.Now()
	t, e := d.newTask(m, d.cfg.Subjects.CapabilityFromTask(m.Subject), start, false)
	t.start, t.done, t.caller = start, d.answer, caller
	if e != nil {
		d.answer(t, nil, e)
		return
	}
	d.run(t)
}

// answer ends a direct-tier task: the result or the error to the caller,
// and its feedback record.
func (d *Dispatcher) answer(t *task, res *nats.Msg, e *streams.Error) {
	defer d.release(t.caller)
	out, e := d.conclude(t, res, e)
	if out != nil {
		out.Subject = t.req.Reply
		if err := d.nc.PublishMsg(out); err != nil {
			t.log.Warn().Err(err).Str("code", string(streams.CodeOf(e))).Msg("reply to caller failed")
		}
	}
}

// conclude ends a task that answers a caller (over NATS or in process):
// it builds the reply the caller gets — the result with the dispatcher's
// headers, or an error reply; nil when the agent answered the caller
// itself — and counts, logs and records the outcome. The returned error
// is the task's final one (a result too large for its headers becomes
// PAYLOAD_TOO_LARGE).
func (d *Dispatcher) conclude(t *task, res *nats.Msg, e *streams.Error) (*nats.Msg, *streams.Error) {
	t.finish()
	var out *nats.Msg
	if e == nil {
		out, e = d.resultMsg(t, res)
	}
	if e == nil {
		d.rememberCaller(t)
		t.log.Debug().Str("node", t.node).Int("attempts", t.attempts).Msg("task finished")
	} else {
		t.log.Debug().Str("code", string(e.Code)).Str("error", e.Message).Int("attempts", t.attempts).Msg("task failed")
		out = errorMsg(t.contentType, t.requestID, t.orchID, e, t.errorHeaders()...)
	}
	d.recordEvent(t, t.start, OutcomeReply, e)
	EndSpan(t.span, e)
	return out, e
}

// routeWait runs t to its outcome and waits for it (the durable tier,
// which has a goroutine per task anyway).
func (d *Dispatcher) routeWait(t *task) (res *nats.Msg, e *streams.Error) {
	done := make(chan struct{})
	t.done = func(_ *task, r *nats.Msg, err *streams.Error) {
		t.finish()
		if err == nil {
			d.rememberCaller(t)
		}
		EndSpan(t.span, err)
		res, e = r, err
		close(done)
	}
	d.run(t)
	<-done
	return res, e
}

// outcome classifies how one delivery ended.
type outcome int

const (
	outcomeDone        outcome = iota // FINISHED
	outcomeFinal                      // an error answer no retry can help
	outcomeBusy                       // TARGET_BUSY
	outcomeSlow                       // acknowledged, but no result in time
	outcomeUnreachable                // no ACK, no subscription, gone, or a transport failure
)

// retryable reports whether another delivery may help.
func (o outcome) retryable() bool { return o >= outcomeBusy }

// run delivers t to the next instance, or ends it when no instance, retry
// or time is left. While tasks of its capability wait for a slot, it
// queues behind them.
func (d *Dispatcher) run(t *task) {
	if e := t.stopped.Load(); e != nil {
		t.done(t, nil, e)
		return
	}
	if !t.started {
		t.started = true
		d.traceTask(t)
		if e := d.start(t); e != nil {
			t.done(t, nil, e)
			return
		}
	}
	if time.Until(t.deadline) <= 0 {
		t.done(t, nil, streams.NewError(streams.CodeDeadlineExceeded, "overall deadline passed after %d attempts", t.attempts))
		return
	}
	if q := d.waiting(t.queueKey()); q != nil && q.n.Load() > 0 && t.pol.queueWait > 0 {
		d.enqueue(q, t)
		return
	}
	inst, probe, why := d.resolve(t)
	d.proceed(t, inst, probe, why)
}

// proceed sends t to inst, which resolve picked (and reserved a slot of),
// or acts on why resolve found none: wait for a slot, or end.
func (d *Dispatcher) proceed(t *task, inst *registry.Instance, probe bool, why noRoute) {
	switch {
	case inst != nil:
		t.mu.Lock()
		t.attempts++
		t.node = inst.ID
		t.mu.Unlock()
		d.send(t, inst, probe, false)
	case why == routeFull && t.pol.queueWait > 0:
		d.enqueue(d.queueOf(t.queueKey()), t)
	case why == routeFull:
		t.attempts++ // a wait for capacity uses a retry too
		d.retry(t, why.error(d, t), outcomeBusy)
	case t.last != nil && (why == routeNoAgent || why == routeGone):
		d.endUnrouted(t, why.error(d, t))
	default:
		t.done(t, nil, why.error(d, t))
	}
}

// endUnrouted ends t, whose latest attempt failed (t.last), now that no
// instance is left to try. A durable task whose last instance was
// unreachable (no ACK, no subscription, gone: the work most likely never
// started) ends NO_AGENT (noAgent, with t.last added), so it waits in the
// stream for an instance — its idempotency key makes the later run safe —
// instead of being dead-lettered for an outage. Any other ends with t.last.
func (d *Dispatcher) endUnrouted(t *task, noAgent *streams.Error) {
	if t.seq == 0 || !t.lastUnreachable {
		t.done(t, nil, t.last)
		return
	}
	noAgent.Message += "; the last instance tried was unreachable: " + t.last.Message
	t.done(t, nil, noAgent)
}

// retry follows a failed delivery (or a wait for capacity): t goes to the
// next instance — at once when the last one was unreachable, after a
// jittered backoff otherwise — or ends with the last error.
func (d *Dispatcher) retry(t *task, e *streams.Error, kind outcome) {
	t.last, t.lastUnreachable = e, kind == outcomeUnreachable
	retries := t.pol.retries
	if t.noRetry {
		retries = 0
	}
	if !mayRetry(kind, t.attempts, retries, t.spent, t.budget) {
		switch {
		case t.budget > 0 && t.spent >= t.budget:
			t.done(t, nil, streams.NewError(e.Code, "%s (cost budget %v spent: %v)", e.Message, t.budget, t.spent))
		case kind == outcomeUnreachable:
			d.endUnrouted(t, streams.NewError(streams.CodeNoAgent, "no instance of %s answered %d attempts", t.capability, t.attempts))
		default:
			t.done(t, nil, e)
		}
		return
	}
	if kind == outcomeUnreachable {
		d.stats.redirected.Add(1)
		d.run(t)
		return
	}
	ceiling := backoffCeiling(d.cfg.BackoffBase, d.cfg.BackoffMax, t.attempts, time.Until(t.deadline))
	if ceiling <= 0 {
		t.done(t, nil, e)
		return
	}
	// The timer owns t until it fires, unless a cancel takes it first:
	// whoever flips waiting back moves t on.
	t.waiting.Store(true)
	d.backoffs.Store(t, struct{}{})
	time.AfterFunc(time.Duration(rand.Int64N(int64(ceiling))+1), func() { // full jitter
		if !t.waiting.CompareAndSwap(true, false) {
			return // cancelled
		}
		d.backoffs.Delete(t)
		if time.Until(t.deadline) <= 0 {
			t.done(t, nil, t.last)
			return
		}
		d.stats.redirected.Add(1)
		d.run(t)
	})
	if e := t.stopped.Load(); e != nil {
		d.takeFromBackoff(t, e) // cancelled while the timer was armed
	}
}

// mayRetry is the retry rule: only a retryable outcome (TARGET_BUSY, a
// timeout after ACK, an unreachable instance) is retried, while deliveries
// so far (attempts) have not exceeded 1 + retries and the cost budget (if
// any) is not spent.
func mayRetry(kind outcome, attempts, retries int, spent, budget float64) bool {
	return kind.retryable() && attempts <= retries && (budget <= 0 || spent < budget)
}

// backoffCeiling bounds the wait before retry number attempts: base doubled
// per earlier attempt, at most limit and a quarter of what remains of the
// deadline.
func backoffCeiling(base, limit time.Duration, attempts int, remaining time.Duration) time.Duration {
	return min(base<<min(max(attempts-1, 0), 16), limit, remaining/4)
}

// noRoute says why resolve found no instance; its error is built only
// when a task ends with it (pump asks again and again while all are full).
type noRoute int

const (
	routeNoAgent noRoute = iota + 1 // none routable offers the capability
	routeGone                       // the unicast instance is not routable
	routeFull                       // every instance has all its slots in use
	routeOpen                       // every breaker refuses
	routeLooped                     // the chain reached every instance MaxVisits times
)

func (why noRoute) error(d *Dispatcher, t *task) *streams.Error {
	switch why {
	case routeGone:
		return streams.NewError(streams.CodeNoAgent, "instance %q is not routable for %s", t.unicast, t.capability)
	case routeFull:
		return streams.NewError(streams.CodeTargetBusy, "every instance of %s has all its slots in use", t.capability)
	case routeOpen:
		e := streams.NewError(streams.CodeCircuitOpen, "the breakers of every instance of %s are open", t.capability)
		e.Excluded, _ = d.exclusions(t, false, excludedInErrors)
		return e
	case routeLooped:
		return streams.NewError(streams.CodeLoopDetected, "this chain reached every instance of %s %d times", t.capability, d.cfg.MaxVisits)
	}
	if t.view != nil && (len(t.view.Excluded) > 0 || len(t.passed) > 0) {
		return d.noAgent(t, "no routable instance of %s meets the task's requirements", t.capability)
	}
	if near := d.Suggest(t.capability); near != "" { // no instance at all: perhaps a typo
		return d.noAgent(t, "no routable instance offers %s; did you mean %s?", t.capability, near)
	}
	return d.noAgent(t, "no routable instance offers %s", t.capability)
}

// resolve picks the next instance for t and reserves one of its slots
// (counted in its in-flight tasks: send uses it, settle frees it). It
// prefers instances t has not tried, and passes over instances that are
// full (own in-flight at max_concurrent), whose breaker refuses, or that
// this chain visited too often. When none is left it says why.
func (d *Dispatcher) resolve(t *task) (inst *registry.Instance, probe bool, why noRoute) {
	var rs *registry.Routes
	rs = d.matching(t, d.table.Candidates(t.capability))
	if t.unicast != "" {
		u, ok := d.table.Lookup(t.unicast)
		switch {
		case !ok || !u.Entry().Routable() || !u.Entry().Has(t.capability):
			return nil, false, routeGone
		case !rs.Has(u.ID):
			return nil, false, routeNoAgent // it does not meet the task's requirements (see t.view)
		}
		rs = registry.NewRoutes([]*registry.Instance{u})
	}
	if rs.Len() == 0 {
		return nil, false, routeNoAgent
	}
	if !d.anyFree(rs) {
		return nil, false, routeFull // the common answer while tasks wait: found cheaply
	}
	name := t.pol.strategy
	var full, open, looped, slow int
	t.passed = t.passed[:0]
	now := time.Now()
	for _, retryTried := range []bool{false, true} {
		t.retryTried, t.skipIDs = retryTried, t.skipIDs[:0]
		for {
			i := d.picker.Pick(name, t.capability, rs, t)
			if i < 0 {
				break
			}
			cand := rs.Instances[i]
			l := d.loads.Of(cand.ID)
			over, ms := t.tooSlow(l, now)
			switch {
			case t.visitsOf(cand.ID) >= d.cfg.MaxVisits:
				looped++
			case l.Absent(cand):
				// no subscription at this revision of its record: skipped
			case len(t.badTypes) > 0 && slices.Contains(t.badTypes, cand.Entry().Type):
				// its type's input schema refused the payload (checkInput)
			case over:
				slow++
				if !retryTried {
					t.passed = append(t.passed, streams.Exclusion{Node: cand.ID,
						Reason: fmt.Sprintf("observed latency %.1fms over max_latency_ms %v", ms, *t.need.MaxLatencyMS)})
				}
			case !l.Reserve(int64(cand.Entry().MaxConcurrent)):
				full++
			default:
				admit, isProbe := l.Breaker.Allow(now, t.pol.breaker)
				if admit {
					return cand, isProbe, 0
				}
				l.Inflight.Add(-1)
				open++
				if !retryTried {
					t.passed = append(t.passed, streams.Exclusion{Node: cand.ID, Reason: "breaker open"})
				}
			}
			t.skipIDs = append(t.skipIDs, cand.ID)
		}
	}
	switch {
	case full > 0:
		return nil, false, routeFull
	case open > 0:
		return nil, false, routeOpen
	case looped > 0:
		return nil, false, routeLooped
	}
	return nil, false, routeNoAgent // every one passed over (too slow, or refused the payload)
}

// anyFree reports whether some instance of rs has a free slot here.
func (d *Dispatcher) anyFree(rs *registry.Routes) bool {
	for _, inst := range rs.Instances {
		if d.loads.Of(inst.ID).Inflight.Load() < int64(inst.Entry().MaxConcurrent) {
			return true
		}
	}
	return false
}

// delivery is one attempt of a task at one instance.
type delivery struct {
	t       *task
	inst    *registry.Instance
	load    *selection.Load
	probe   bool
	hedge   bool // the second delivery of a hedged task
	attempt int  // the task's attempt number of this delivery
	sent    time.Time
	token   string // the last token of its reply subject

	mu      sync.Mutex
	over    bool // claimed by whatever ended it
	acked   bool
	expires time.Time // when the timer may end it
	timer   *time.Timer
	span    trace.Span // nil unless its task's span records (trace.go)
}

// claim ends dl for the caller; it reports false when dl had ended already.
func (dl *delivery) claim() bool {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	if dl.over {
		return false
	}
	dl.over = true
	if dl.timer != nil {
		dl.timer.Stop()
	}
	return true
}

// end claims dl and settles it, unless whatever ended it first did.
func (d *Dispatcher) end(dl *delivery, res, last *nats.Msg, e *streams.Error, kind outcome) {
	if dl.claim() {
		d.settle(dl, res, last, e, kind)
	}
}

// send delivers t to inst, with a timer for the ACK.
func (d *Dispatcher) send(t *task, inst *registry.Instance, probe, hedge bool) {
	t.mu.Lock()
	dl := &delivery{t: t, inst: inst, load: d.loads.Of(inst.ID), probe: probe, attempt: t.attempts, hedge: hedge} // resolve reserved the slot
	t.mu.Unlock()
	if e := t.stopped.Load(); e != nil { // cancelled on its way here: the slot goes back unused
		dl.load.Inflight.Add(-1)
		d.freed(inst)
		if !hedge {
			t.done(t, nil, e)
		}
		return
	}
	// A direct-tier request's own headers are reused: nothing reads the
	// caller's values of the headers set here once the task has started. A
	// durable task keeps its original headers for parking, and a task that
	// may be hedged gives each delivery its own, as two may be sent at once.
	h := t.req.Header
	if t.seq > 0 || t.hedge != nil {
		h = make(nats.Header, len(t.req.Header)+7)
		for k, v := range t.req.Header {
			h[k] = v
		}
	}
	out := &nats.Msg{Subject: d.cfg.Subjects.Agent(inst.ID), Reply: d.inbox.open(dl), Data: t.req.Data, Header: h}
	// The caller's signature proves the task to the dispatchers only: an
	// agent holding it could send the task again as its caller. Nor does a
	// parked copy keep it (park): a replay is signed anew.
	out.Header.Del(streams.HeaderSignature)
	out.Header.Set(streams.HeaderCapability, t.capability)
	out.Header.Set(streams.HeaderRequestID, t.requestID)
	out.Header.Set(streams.HeaderOrchestrationID, t.orchID)
	out.Header.Set(streams.HeaderHops, strconv.Itoa(t.hops))
	out.Header.Set(streams.HeaderAttempt, strconv.Itoa(dl.attempt))
	out.Header.Set(streams.HeaderDeadline, strconv.FormatInt(t.deadline.UnixMilli(), 10))
	out.Header.Set(streams.HeaderVisits, strings.Join(append(slices.Clip(t.visits), inst.ID), ","))
	if d.offersDirect(t) {
		out.Header.Set(streams.HeaderReplyTo, t.req.Reply)
	} else {
		out.Header.Del(streams.HeaderReplyTo)
	}
	d.traceDelivery(dl, out.Header)
	if err := streams.CheckSize(out, d.nc.MaxPayload()); err != nil {
		e := streams.AsError(err)
		e.Message = "the delivery to " + inst.ID + ", with the dispatcher's headers: " + e.Message
		d.end(dl, nil, nil, e, outcomeFinal)
		return
	}
	t.log.Debug().Str("node", inst.ID).Int("attempt", dl.attempt).Bool("hedge", hedge).Str("state", string(streams.StatusSent)).Msg("task state")
	t.mu.Lock()
	t.open = append(t.open, dl) // before the publish: a reply may settle dl at once
	t.mu.Unlock()
	// The lock is held across the publish and the arming of the timer, so a
	// reply or the timer handles dl only once both are done (and whatever
	// the next attempt writes into the shared header map comes after this
	// publish has read it). From the unlock on, t belongs to whoever claims
	// dl: its timer, its reply, or its instance leaving.
	dl.mu.Lock()
	err := d.nc.PublishMsg(out)
	if err == nil {
		dl.sent = time.Now()
		wait := min(t.pol.ackTimeout, t.deadline.Sub(dl.sent))
		dl.expires = dl.sent.Add(wait)
		dl.timer = time.AfterFunc(wait, func() { d.expire(dl) })
	} else {
		dl.over = true
	}
	dl.mu.Unlock()
	if err != nil {
		d.settle(dl, nil, nil, streams.NewError(streams.CodeInternal, "deliver to %s: %v", inst.ID, err), outcomeUnreachable)
		return
	}
	if e := t.stopped.Load(); e != nil {
		d.cancelDelivery(dl, e) // cancelled while it was being sent
		return
	}
	if t.hedge != nil && !hedge {
		d.armHedge(t, dl)
	}
}

// onReply handles one reply to a delivery, on the inbox's goroutine.
func (d *Dispatcher) onReply(dl *delivery, m *nats.Msg) {
	if m.Header.Get("Status") == "503" {
		dl.load.MarkAbsent(dl.inst)
		d.end(dl, nil, nil, streams.NewError(streams.CodeTimeout, "instance %s has no subscription", dl.inst.ID), outcomeUnreachable)
		return
	}
	status := streams.Status(m.Header.Get(streams.HeaderStatus))
	mine := dl.load.Inflight.Load()
	if status.Terminal() {
		mine-- // the agent no longer counts this task
	}
	dl.load.NoteActive(m.Header.Get(streams.HeaderActive), mine)
	switch status {
	case streams.StatusAcked, streams.StatusProcessing:
		dl.mu.Lock()
		if !dl.over {
			dl.acked = true
			wait := min(dl.t.pol.callTimeout(dl.t.wish, d.hints.TimeoutHint(dl.inst.Entry())), time.Until(dl.t.deadline))
			dl.expires = time.Now().Add(wait)
			dl.timer.Reset(wait)
		}
		dl.mu.Unlock()
		dl.t.log.Debug().Str("node", dl.inst.ID).Str("state", string(status)).Msg("task state")
		return
	case streams.StatusFinished:
		if m.Header.Get(streams.HeaderDirect) != "" && !d.offersDirect(dl.t) {
			d.end(dl, nil, m, streams.NewError(streams.CodeInternal, "instance %s sent its result elsewhere (%s), but the delivery offered no %s",
				dl.inst.ID, streams.HeaderDirect, streams.HeaderReplyTo), outcomeFinal)
			return
		}
		d.end(dl, m, m, nil, outcomeDone)
		return
	}
	e := streams.ErrorFromMessage(m)
	if e == nil {
		e = streams.NewError(streams.CodeInternal, "instance %s answered status %q without an error code", dl.inst.ID, m.Header.Get(streams.HeaderStatus))
	}
	kind := outcomeFinal
	switch e.Code {
	case streams.CodeTargetBusy:
		kind = outcomeBusy
	case streams.CodeTimeout:
		kind = outcomeSlow
	case streams.CodeNoAgent, streams.CodeCancelled:
		// The instance does not serve the capability (its record is stale
		// or wrong), or dropped a delivery nobody cancelled: like an
		// unreachable one, another instance may take it.
		kind = outcomeUnreachable
	}
	d.end(dl, nil, m, e, kind)
}

// expire ends a delivery whose ACK or result did not come in time.
func (d *Dispatcher) expire(dl *delivery) {
	dl.mu.Lock()
	if dl.over || time.Now().Before(dl.expires) { // ended, or an ACK re-armed the timer
		dl.mu.Unlock()
		return
	}
	dl.over = true
	acked := dl.acked
	dl.mu.Unlock()
	d.notifyCancel(dl) // whatever the instance still does for it, nobody will use
	id := dl.inst.ID
	switch {
	case time.Until(dl.t.deadline) <= 0:
		d.settle(dl, nil, nil, streams.NewError(streams.CodeDeadlineExceeded, "instance %s did not finish before the overall deadline", id), outcomeFinal)
	case !acked:
		d.settle(dl, nil, nil, streams.NewError(streams.CodeTimeout, "instance %s sent no ACK within %v", id, dl.t.pol.ackTimeout), outcomeUnreachable)
	default:
		d.settle(dl, nil, nil, streams.NewError(streams.CodeTimeout, "instance %s acknowledged but sent no result in time", id), outcomeSlow)
	}
}

// settle records a claimed delivery's outcome in its instance's breaker,
// penalty and latency, and moves its task on. res is the result, last the
// final reply (for its cost), e the error.
func (d *Dispatcher) settle(dl *delivery, res, last *nats.Msg, e *streams.Error, kind outcome) {
	d.inbox.close(dl.token)
	EndSpan(dl.span, e)
	t, load := dl.t, dl.load
	load.Inflight.Add(-1)
	now := time.Now()
	healthy := kind == outcomeDone || kind == outcomeBusy || kind == outcomeFinal && e.Code != streams.CodeInternal
	if state, changed := load.Breaker.Record(now, healthy, dl.probe, t.pol.breaker); changed {
		d.breakerChanged(dl.inst.ID, state)
	}
	if !healthy {
		load.Penalize(d.cfg.Penalty, d.cfg.PenaltyDecay, now)
	}
	if !dl.sent.IsZero() && (kind == outcomeDone || kind == outcomeSlow) {
		took := now.Sub(dl.sent)
		load.Observe(took, now)
		if kind == outcomeDone {
			d.hints.Type(dl.inst.Entry().Type).Observe(took)
			if t.hedge != nil && dl.attempt == 1 && !t.hedgedSent() {
				t.hedge.Latency.Observe(took) // a hedged first delivery was counted when the hedge went (sendHedge)
			}
		}
	}
	defer d.freed(dl.inst)
	t.mu.Lock()
	t.open = slices.DeleteFunc(t.open, func(o *delivery) bool { return o == dl })
	if t.ended { // a hedged task's other delivery decided it: this one is moot
		// Its cost is not added: the task's record, written without
		// t.mu once it ended, has been or is being written.
		t.mu.Unlock()
		return
	}
	if last != nil {
		t.spent += costOf(last)
	}
	switch {
	case kind.retryable() && len(t.open) > 0: // the task's other delivery may still answer
		t.triedIDs = append(t.triedIDs, dl.inst.ID)
		t.mu.Unlock()
		t.log.Debug().Str("node", dl.inst.ID).Str("code", string(e.Code)).Str("error", e.Message).Msg("attempt failed; another delivery runs")
		return
	case kind.retryable():
		t.triedIDs = append(t.triedIDs, dl.inst.ID)
		t.mu.Unlock()
		t.log.Debug().Str("node", dl.inst.ID).Str("code", string(e.Code)).Str("error", e.Message).Msg("attempt failed")
		d.retry(t, e, kind)
		return
	}
	t.ended = true
	t.node, t.hedgedWon = dl.inst.ID, dl.hedge
	t.inDoubt = e != nil && e.Code == streams.CodeInternal && last != nil && last.Header.Get(streams.HeaderInDoubt) == "true"
	losers := t.open
	t.open = nil
	t.mu.Unlock()
	for _, o := range losers {
		d.cancelDelivery(o, streams.NewError(streams.CodeCancelled, "another delivery of the task answered first"))
	}
	t.done(t, res, e)
}

// freed hands a slot of inst that just came free to a waiting task.
func (d *Dispatcher) freed(inst *registry.Instance) {
	for _, c := range inst.Entry().Capabilities {
		for _, key := range [2]string{c, unicastKey(c, inst.ID)} {
			if q := d.waiting(key); q != nil && q.n.Load() > 0 {
				d.pump(q)
			}
		}
	}
}

// abandon ends the deliveries to an instance that left the table, so their
// tasks go elsewhere at once.
func (d *Dispatcher) abandon(id string) {
	for _, dl := range d.inbox.to(id) {
		d.end(dl, nil, nil, streams.NewError(streams.CodeTimeout, "instance %s left the registry before answering", id), outcomeUnreachable)
	}
}

// costOf is the Reach-Cost of an agent's reply; a malformed one counts as 0
// (the agent's mistake must not fail the task it came with).
func costOf(m *nats.Msg) float64 {
	c, _ := streams.ParseCost(m.Header)
	return c
}

// offersDirect reports whether t's deliveries offer agents the caller's
// reply subject (Reach-Reply-To): on the direct tier, when the caller
// waits for a reply and Config.RelayResults is off.
func (d *Dispatcher) offersDirect(t *task) bool {
	// A task that may be hedged answers through the dispatcher: only it can
	// let one of two deliveries' results through, and say Reach-Hedged.
	return !d.cfg.RelayResults && t.seq == 0 && t.req.Reply != "" && t.hedge == nil
}

// errorHeaders are the header pairs of t's error reply beyond the code:
// the attempts (0 when nothing was delivered), the instance of the last
// attempt, and whether its outcome is in doubt.
func (t *task) errorHeaders() []string {
	h := []string{streams.HeaderAttempt, strconv.Itoa(t.attempts)}
	if t.node != "" {
		h = append(h, streams.HeaderNode, t.node)
	}
	if t.inDoubt {
		h = append(h, streams.HeaderInDoubt, "true")
	}
	if t.hedgedWon {
		h = append(h, streams.HeaderHedged, "1")
	}
	return h
}

// resultMsg returns an instance's result with the dispatcher's headers,
// nil when the agent answered the caller itself, or PAYLOAD_TOO_LARGE when
// the headers make it exceed the server's max_payload.
func (d *Dispatcher) resultMsg(t *task, res *nats.Msg) (*nats.Msg, *streams.Error) {
	if res.Header.Get(streams.HeaderDirect) != "" {
		return nil, nil // the agent answered the caller itself (onReply checked that it was offered)
	}
	out := &nats.Msg{Subject: t.req.Reply, Data: res.Data, Header: res.Header}
	out.Header.Set(streams.HeaderRequestID, t.requestID)
	out.Header.Set(streams.HeaderOrchestrationID, t.orchID)
	out.Header.Set(streams.HeaderAttempt, strconv.Itoa(t.attempts))
	out.Header.Set(streams.HeaderNode, t.node)
	out.Header.Del(streams.HeaderActive) // the agent's load report is for dispatchers
	if t.hedgedWon {
		out.Header.Set(streams.HeaderHedged, "1")
	}
	if out.Header.Get(streams.HeaderContentType) == "" {
		out.Header.Set(streams.HeaderContentType, t.contentType) // results are in their request's type
	}
	if err := streams.CheckSize(out, d.nc.MaxPayload()); err != nil {
		return nil, streams.NewError(streams.CodePayloadTooLarge, "result of %s: %v", t.node, err)
	}
	return out, nil
}

// errorMsg builds an error reply in contentType (its subject left for the
// sender to set); kv are extra header pairs.
func errorMsg(contentType, requestID, orchID string, e *streams.Error, kv ...string) *nats.Msg {
	out := streams.ErrorReply("", contentType, requestID, e)
	if orchID != "" {
		out.Header.Set(streams.HeaderOrchestrationID, orchID)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out.Header.Set(kv[i], kv[i+1])
	}
	return out
}

// Tried reports whether a strategy must not pick id now (selection.Task).
func (t *task) Tried(id string) bool { return t.tried(id) }

// AffinityKey is t's Reach-Affinity-Key (selection.Task).
func (t *task) AffinityKey() string { return t.affinity }

// Preference is t's Reach-Prefer (selection.Task).
func (t *task) Preference() string { return t.prefer }
