package engine

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/events"
	"github.com/agent-reach/agentreach/dispatcher/selection"
	"github.com/agent-reach/agentreach/dispatcher/tracing"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

// Stage 6 of a task's path, settle: a delivery's outcome is counted in its
// instance's breaker, penalty and latency; a retryable one sends the task
// on (retry, back to resolve), any other ends it: the reply goes to the
// caller through the outbound gate (Conclude, then its entry: the
// Dispatcher's answer, Call or Stream), or a durable task's
// outcome is claimed and stored (durable.Tier, for which the Dispatcher
// routes through RouteWait). Then record.

// Outcome classifies how one delivery ended.
type Outcome int

const (
	OutcomeDone        Outcome = iota // FINISHED
	OutcomeFinal                      // an error answer no retry can help
	OutcomeBusy                       // TARGET_BUSY
	OutcomeSlow                       // acknowledged, but no result in time
	OutcomeUnreachable                // no ACK, no subscription, gone, or a transport failure
)

// retryable reports whether another delivery may help.
func (o Outcome) retryable() bool { return o >= OutcomeBusy }

// settle records a claimed delivery's outcome in its instance's breaker,
// penalty and latency, and moves its task on. res is the result, last the
// final reply (for its cost), e the error.
func (en *Engine) settle(dl *delivery, res, last *nats.Msg, e *streams.Error, kind Outcome) {
	en.inbox.Close(dl.token)
	tracing.End(dl.span, e)
	t := dl.t
	now := time.Now()
	took := time.Duration(-1)
	if !dl.sent.IsZero() {
		took = now.Sub(dl.sent)
	}
	en.Count(dl.inst, dl.load, dl.probe, t.pol, kind, e, now, took)
	if kind == OutcomeDone && took >= 0 && t.hedge != nil && dl.attempt == 1 && !t.hedgedSent() {
		t.hedge.Latency.Observe(took) // a hedged first delivery was counted when the hedge went (sendHedge)
	}
	defer en.Freed(dl.inst)
	t.mu.Lock()
	t.open = slices.DeleteFunc(t.open, func(o *delivery) bool { return o == dl })
	if t.ended { // a hedged task's other delivery decided it: this one is moot
		// Its cost is not added: the task's record, written without
		// t.mu once it ended, has been or is being written.
		t.mu.Unlock()
		return
	}
	pinned := t.pinned()
	if pinned != nil && pinned != dl { // a stream runs from another delivery: this one was cancelled
		t.mu.Unlock()
		return
	}
	if last != nil {
		t.spent += costOf(last)
	}
	switch {
	case pinned != nil: // a stream has begun: it ends with this delivery, never with a second stream
	case kind.retryable() && len(t.open) > 0: // the task's other delivery may still answer
		t.triedIDs = append(t.triedIDs, dl.inst.ID)
		t.mu.Unlock()
		t.log.Debug().Str("node", dl.inst.ID).Str("code", string(e.Code)).Str("error", e.Message).Msg("attempt failed; another delivery runs")
		return
	case kind.retryable():
		t.triedIDs = append(t.triedIDs, dl.inst.ID)
		t.mu.Unlock()
		t.log.Debug().Str("node", dl.inst.ID).Str("code", string(e.Code)).Str("error", e.Message).Msg("attempt failed")
		en.retry(t, e, kind)
		return
	}
	t.ended = true
	t.node, t.hedgedWon = dl.inst.ID, dl.hedge
	t.inDoubt = e != nil && e.Code == streams.CodeInternal && last != nil && last.Header.Get(streams.HeaderInDoubt) == "true"
	losers := t.open
	t.open = nil
	t.mu.Unlock()
	for _, o := range losers {
		en.cancelDelivery(o, streams.NewError(streams.CodeCancelled, "another delivery of the task answered first"))
	}
	t.done(t, res, e)
}

// Count records how a delivery to inst ended — kind, e its error — in the
// instance's breaker (probe: it was the breaker's probe), penalty and
// latency (took since it was sent; negative when it never was), and gives
// its slot (load's) back. Settle counts each delivery of a task so, and a
// broadcast (dispatcher.Shared) each of its own.
func (en *Engine) Count(inst *registry.Instance, load *selection.Load, probe bool, pol *config.Capability, kind Outcome, e *streams.Error, now time.Time, took time.Duration) {
	load.Inflight.Add(-1)
	healthy := kind == OutcomeDone || kind == OutcomeBusy || kind == OutcomeFinal && e.Code != streams.CodeInternal
	if state, changed := load.Breaker.Record(now, healthy, probe, pol.Breaker); changed {
		en.breakers.Changed(inst.ID, state)
	}
	if !healthy {
		load.Penalize(en.cfg.Penalty, en.cfg.PenaltyDecay, now)
	}
	if took >= 0 && (kind == OutcomeDone || kind == OutcomeSlow) {
		load.Observe(took, now)
		if kind == OutcomeDone {
			en.hints.Type(inst.Entry().Type).Observe(took)
		}
	}
}

// Freed hands a slot of inst that just came free to a waiting task.
func (en *Engine) Freed(inst *registry.Instance) {
	for _, c := range inst.Entry().Capabilities {
		for _, key := range [2]string{c, unicastKey(c, inst.ID)} {
			if q := en.waiting(key); q != nil && q.Len() > 0 {
				en.pump(q)
			}
		}
	}
}

// costOf is the Reach-Cost of an agent's reply; a malformed one counts as 0
// (the agent's mistake must not fail the task it came with).
func costOf(m *nats.Msg) float64 {
	c, _ := streams.ParseCost(m.Header)
	return c
}

// retry follows a failed delivery (or a wait for capacity): t goes to the
// next instance — at once when the last one was unreachable, after a
// jittered backoff otherwise — or ends with the last error.
func (en *Engine) retry(t *Task, e *streams.Error, kind Outcome) {
	t.last, t.lastUnreachable = e, kind == OutcomeUnreachable
	retries := t.pol.Retries
	if t.noRetry {
		retries = 0
	}
	if !mayRetry(kind, t.attempts, retries, t.spent, t.budget) {
		switch {
		case t.budget > 0 && t.spent >= t.budget:
			t.done(t, nil, streams.NewError(e.Code, "%s (cost budget %v spent: %v)", e.Message, t.budget, t.spent))
		case kind == OutcomeUnreachable:
			en.endUnrouted(t, streams.NewError(streams.CodeNoAgent, "no instance of %s answered %d attempts", t.capability, t.attempts))
		default:
			t.done(t, nil, e)
		}
		return
	}
	if kind == OutcomeUnreachable {
		en.stats.redirected.Add(1)
		en.Run(t)
		return
	}
	ceiling := backoffCeiling(en.cfg.BackoffBase, en.cfg.BackoffMax, t.attempts, time.Until(t.deadline))
	if ceiling <= 0 {
		t.done(t, nil, e)
		return
	}
	// The timer owns t until it fires, unless a cancel takes it first:
	// whoever flips waiting back moves t on.
	t.waiting.Store(true)
	en.backoffs.Store(t, struct{}{})
	time.AfterFunc(time.Duration(rand.Int64N(int64(ceiling))+1), func() { // full jitter
		if !t.waiting.CompareAndSwap(true, false) {
			return // cancelled
		}
		en.backoffs.Delete(t)
		if time.Until(t.deadline) <= 0 {
			t.done(t, nil, t.last)
			return
		}
		en.stats.redirected.Add(1)
		en.Run(t)
	})
	if e := t.stopped.Load(); e != nil {
		en.takeFromBackoff(t, e) // cancelled while the timer was armed
	}
}

// mayRetry is the retry rule: only a retryable outcome (TARGET_BUSY, a
// timeout after ACK, an unreachable instance) is retried, while deliveries
// so far (attempts) have not exceeded 1 + retries and the cost budget (if
// any) is not spent.
func mayRetry(kind Outcome, attempts, retries int, spent, budget float64) bool {
	return kind.retryable() && attempts <= retries && (budget <= 0 || spent < budget)
}

// backoffCeiling bounds the wait before retry number attempts: base doubled
// per earlier attempt, at most limit and a quarter of what remains of the
// deadline.
func backoffCeiling(base, limit time.Duration, attempts int, remaining time.Duration) time.Duration {
	return min(base<<min(max(attempts-1, 0), 16), limit, remaining/4)
}

// endUnrouted ends t, whose latest attempt failed (t.last), now that no
// instance is left to try. A durable task whose last instance was
// unreachable (no ACK, no subscription, gone: the work most likely never
// started) ends NO_AGENT (noAgent, with t.last added), so it waits in the
// stream for an instance — its idempotency key makes the later run safe —
// instead of being dead-lettered for an outage. Any other ends with t.last.
func (en *Engine) endUnrouted(t *Task, noAgent *streams.Error) {
	if t.seq == 0 || !t.lastUnreachable {
		t.done(t, nil, t.last)
		return
	}
	noAgent.Message += "; the last instance tried was unreachable: " + t.last.Message
	t.done(t, nil, noAgent)
}

// Conclude ends a task that answers a caller (over NATS or in process):
// it builds the reply the caller gets — the result with the dispatcher's
// headers, or an error reply; nil when the agent answered the caller
// itself — and counts, logs and records the outcome. The returned error
// is the task's final one (a result too large for its headers becomes
// PAYLOAD_TOO_LARGE).
func (en *Engine) Conclude(t *Task, res *nats.Msg, e *streams.Error) (*nats.Msg, *streams.Error) {
	t.Finish()
	var out *nats.Msg
	if e == nil {
		out, e = en.resultMsg(t, res)
	}
	if e == nil {
		en.scores.Remember(t.requestID, t.source, t.node)
		t.log.Debug().Str("node", t.node).Int("attempts", t.attempts).Msg("task finished")
	} else {
		t.log.Debug().Str("code", string(e.Code)).Str("error", e.Message).Int("attempts", t.attempts).Msg("task failed")
		out = ErrorMsg(t.contentType, t.requestID, t.orchID, e, t.errorHeaders()...)
	}
	en.Record(t, t.start, events.OutcomeReply, e)
	tracing.End(t.span, e)
	return out, e
}

// resultMsg returns an instance's result with the dispatcher's headers,
// nil when the agent answered the caller itself, or PAYLOAD_TOO_LARGE when
// the headers make it exceed the server's max_payload.
func (en *Engine) resultMsg(t *Task, res *nats.Msg) (*nats.Msg, *streams.Error) {
	if res.Header.Get(streams.HeaderDirect) != "" {
		return nil, nil // the agent answered the caller itself (onReply checked that it was offered)
	}
	out := &nats.Msg{Subject: t.req.Reply, Data: res.Data, Header: res.Header}
	out.Header.Set(streams.HeaderRequestID, t.requestID)
	out.Header.Set(streams.HeaderOrchestrationID, t.orchID)
	out.Header.Set(streams.HeaderAttempt, strconv.Itoa(t.attempts))
	out.Header.Set(streams.HeaderNode, t.node)
	out.Header.Del(streams.HeaderActive) // the agent's load report is for dispatchers
	if t.relay == nil {
		out.Header.Del(streams.HeaderChunks) // a caller that did not ask for a stream sees none of it
	}
	if t.hedgedWon {
		out.Header.Set(streams.HeaderHedged, "1")
	}
	if out.Header.Get(streams.HeaderContentType) == "" {
		out.Header.Set(streams.HeaderContentType, t.contentType) // results are in their request's type
	}
	if err := streams.CheckSize(out, en.nc.MaxPayload()); err != nil {
		return nil, streams.NewError(streams.CodePayloadTooLarge, "result of %s: %v", t.node, err)
	}
	return out, nil
}

// errorHeaders are the header pairs of t's error reply beyond the code:
// the attempts (0 when nothing was delivered), the instance of the last
// attempt, and whether its outcome is in doubt.
func (t *Task) errorHeaders() []string {
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

// ErrorMsg builds an error reply in contentType (its subject left for the
// sender to set); kv are extra header pairs.
func ErrorMsg(contentType, requestID, orchID string, e *streams.Error, kv ...string) *nats.Msg {
	out := streams.ErrorReply("", contentType, requestID, e)
	if orchID != "" {
		out.Header.Set(streams.HeaderOrchestrationID, orchID)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out.Header.Set(kv[i], kv[i+1])
	}
	return out
}
