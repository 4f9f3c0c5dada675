package fanout

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/events"
	"github.com/agent-reach/agentreach/streams"
)

// A broadcast's shared delivery path: the request is decoded, admitted and
// matched once (dispatcher.OpenShared), every branch is a small entry in
// one table, published to its instance with the reply subject
// <inbox>.<index>.<token> (token: 96 random bits of that branch's alone),
// and every reply comes back on one subscription to <inbox>.*.*; one timer
// keeps every branch's ACK and result deadline. A reply whose subject names
// no branch, or the wrong token, or whose Reach-Node names another instance
// than the one asked, is dropped: an instance can answer only for itself.
// The completion policy is checked at every branch's end: all waits for
// every branch, quorum ends once enough succeeded, first at the first
// success; the branches still open then get a CANCEL and are reported
// missing (CANCELLED).

// branchState is where one branch stands.
type branchState uint8

const (
	branchNew   branchState = iota // not published yet
	branchSent                     // published, waiting for its ACK
	branchAcked                    // ACKED or PROCESSING came
	branchDone                     // ended: reply, error or timer
)

// branch is one instance's entry in a shared delivery.
type branch struct {
	state     branchState
	requestID string
	token     string
	sent      time.Time
	expires   time.Time
	// How it ended (end): the agent's last message, the error, whether it
	// had acknowledged, how long it took; out is built from them (finish).
	last  *nats.Msg
	err   *streams.Error
	acked bool
	took  time.Duration
	out   outcome
}

// gather is one broadcast's shared delivery.
type gather struct {
	s      *Service
	sh     *dispatcher.Shared
	p      *parent
	inbox  string
	mode   Mode
	quorum Quorum
	need   int
	br     []branch
	source string
	capab  string
	data   []byte
	h      nats.Header // every delivery's headers; publish sets each branch's own

	mu        sync.Mutex
	timer     *time.Timer
	next      time.Time // when the timer fires; zero when unarmed
	ended     int
	succeeded int
	over      bool
	sending   bool // publish runs: the policy is decided once every branch is asked
	gone      bool // its caller cancelled it (reach.cancel)
	done      chan struct{}
	dropped   int   // replies that named no branch of this gather
	cancels   []int // the branches cancelled when it was decided
}

// broadcastShared runs a broadcast of capability on the shared path and
// returns its reply (nil and the error when nothing was sent).
//
// settle must be called once the reply has been sent.
func (s *Service) broadcastShared(ctx context.Context, m *nats.Msg, p *parent, capability string, mode Mode, quorum Quorum) (r *Reply, settle func(), e *streams.Error) {
	// The request as a task of its own, in process: the service authorized
	// it already (its signature is spent), the dispatcher checks the
	// caller's ACL once more and matches its requirements.
	h := make(nats.Header, len(p.header)+2)
	for k, v := range p.header {
		h[k] = v
	}
	h.Del(streams.HeaderAgent)
	h.Set(streams.HeaderRequestID, p.requestID)
	h.Set(streams.HeaderOrchestrationID, p.orchID)
	h.Set(streams.HeaderDeadline, strconv.FormatInt(p.deadline.UnixMilli(), 10))
	sh, e := s.d.OpenShared(capability, &nats.Msg{Header: h, Data: m.Data})
	if e != nil {
		return nil, nil, e
	}
	n := sh.Len()
	g := &gather{s: s, sh: sh, p: p, mode: mode, quorum: quorum, br: make([]branch, n), done: make(chan struct{}),
		source: h.Get(streams.HeaderSource), capab: capability, data: m.Data}
	switch mode {
	case ModeQuorum:
		g.need = quorum.Need(n)
	case ModeFirst:
		g.need = 1
	default:
		g.need = n
	}
	tokens := make([]byte, 12*n)
	if _, err := rand.Read(tokens); err != nil {
		sh.Close(streams.NewError(streams.CodeInternal, "%v", err))
		return nil, nil, streams.NewError(streams.CodeInternal, "broadcast: no random reply tokens: %v", err)
	}
	for i := range g.br {
		g.br[i].requestID = streams.NewRequestID()
		g.br[i].token = hex.EncodeToString(tokens[12*i : 12*i+12])
	}
	g.inbox = s.nc.NewRespInbox()
	g.h = sh.Header()
	g.h.Set(streams.HeaderParentID, p.requestID)
	if e := g.checkSize(); e != nil {
		sh.Close(e)
		return nil, nil, e
	}
	sh.OnCancel(g.callerCancelled)
	sub, err := s.nc.Subscribe(g.inbox+".*.*", g.onReply)
	if err != nil {
		sh.Close(streams.NewError(streams.CodeInternal, "%v", err))
		return nil, nil, streams.NewError(streams.CodeInternal, "broadcast: subscribe its inbox: %v", err)
	}
	_ = sub.SetPendingLimits(-1, 256<<20) // every branch may answer at once
	g.publish()
	select {
	case <-g.done:
	case <-ctx.Done():
	}
	_ = sub.Unsubscribe()
	r = g.finish(ctx.Err() != nil)
	return r, func() { g.settle(r) }, nil
}

// publish sends every branch its delivery. One header map serves them all:
// each publish encodes it before the next branch's values are written,
// in place, into the same value slices.
func (g *gather) publish() {
	h := g.h
	key := h.Get(streams.HeaderIdempotencyKey)
	rid, visits := []string{""}, []string{""}
	h[streams.HeaderRequestID], h[streams.HeaderVisits] = rid, visits
	idem := []string{""}
	if key != "" {
		h[streams.HeaderIdempotencyKey] = idem
	}
	subjects := g.s.d.Config().Subjects
	ack := g.sh.AckTimeout()
	msg := &nats.Msg{Data: nil, Header: h}
	g.mu.Lock()
	g.sending = true
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.sending = false
		g.check()
		g.mu.Unlock()
	}()
	for i := range g.br {
		b := &g.br[i]
		id := g.sh.Target(i)
		rid[0], visits[0] = b.requestID, g.sh.Visits(i)
		if key != "" { // each instance executes its part once
			idem[0] = key + "." + id
		}
		msg.Subject, msg.Reply, msg.Data = subjects.Agent(id), g.replySubject(i), g.data
		g.mu.Lock()
		if g.over {
			g.mu.Unlock()
			return
		}
		b.state, b.sent = branchSent, time.Now()
		b.expires = b.sent.Add(ack)
		g.arm(b.expires)
		g.mu.Unlock()
		if err := g.s.nc.PublishMsg(msg); err != nil {
			g.mu.Lock()
			g.end(i, nil, streams.NewError(streams.CodeInternal, "deliver to %s: %v", id, err))
			g.mu.Unlock()
		}
	}
}

// checkSize refuses a broadcast whose delivery, with the dispatcher's
// headers, would exceed the server's max_payload: PAYLOAD_TOO_LARGE before
// anything is sent. It measures the delivery to the instance with the
// longest id, whose subject and headers are the largest.
func (g *gather) checkSize() *streams.Error {
	longest := 0
	for i := range g.br {
		if len(g.sh.Target(i)) > len(g.sh.Target(longest)) {
			longest = i
		}
	}
	h := make(nats.Header, len(g.h)+3)
	for k, v := range g.h {
		h[k] = v
	}
	id := g.sh.Target(longest)
	h.Set(streams.HeaderRequestID, g.br[longest].requestID)
	h.Set(streams.HeaderVisits, g.sh.Visits(longest))
	if key := h.Get(streams.HeaderIdempotencyKey); key != "" {
		h.Set(streams.HeaderIdempotencyKey, key+"."+id)
	}
	m := &nats.Msg{Subject: g.s.d.Config().Subjects.Agent(id), Reply: g.replySubject(longest), Header: h, Data: g.data}
	if err := streams.CheckSize(m, g.s.nc.MaxPayload()); err != nil {
		e := streams.AsError(err)
		e.Message = "a broadcast's delivery, with the dispatcher's headers: " + e.Message
		return e
	}
	return nil
}

func (g *gather) replySubject(i int) string {
	return g.inbox + "." + strconv.Itoa(i) + "." + g.br[i].token
}

// arm makes the timer fire by at, under g.mu.
func (g *gather) arm(at time.Time) {
	if !g.next.IsZero() && !at.Before(g.next) {
		return
	}
	g.next = at
	wait := time.Until(at)
	if g.timer == nil {
		g.timer = time.AfterFunc(wait, g.onTimer)
		return
	}
	g.timer.Reset(wait)
}

// onTimer ends every branch whose time is up and arms the timer for the
// next one.
func (g *gather) onTimer() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.next = time.Time{}
	if g.over {
		return
	}
	now := time.Now()
	var next time.Time
	for i := range g.br {
		b := &g.br[i]
		if b.state != branchSent && b.state != branchAcked {
			continue
		}
		if b.expires.After(now) {
			if next.IsZero() || b.expires.Before(next) {
				next = b.expires
			}
			continue
		}
		g.cancel(i)
		id := g.sh.Target(i)
		switch {
		case !now.Before(g.sh.Deadline()):
			g.end(i, nil, streams.NewError(streams.CodeDeadlineExceeded, "instance %s did not finish before the overall deadline", id))
		case b.state == branchSent:
			g.end(i, nil, streams.NewError(streams.CodeTimeout, "instance %s sent no ACK within %v", id, b.expires.Sub(b.sent).Round(time.Millisecond)))
		default:
			g.end(i, nil, streams.NewError(streams.CodeTimeout, "instance %s acknowledged but sent no result in time", id))
		}
	}
	if !next.IsZero() && !g.over {
		g.arm(next)
	}
}

// onReply handles one message on the inbox, on the subscription's
// goroutine.
func (g *gather) onReply(m *nats.Msg) {
	i, ok := g.branchOf(m)
	g.mu.Lock()
	defer g.mu.Unlock()
	if !ok {
		g.dropped++
		g.s.log.Debug().Str("request_id", g.p.requestID).Str("subject", m.Subject).Str("node", m.Header.Get(streams.HeaderNode)).
			Msg("broadcast reply that no branch asked for dropped")
		return
	}
	b := &g.br[i]
	if g.over || b.state == branchDone || b.state == branchNew {
		return
	}
	g.sh.Note(i, m)
	id := g.sh.Target(i)
	if m.Header.Get("Status") == "503" {
		g.end(i, nil, streams.NewError(streams.CodeTimeout, "instance %s has no subscription", id))
		return
	}
	switch status := streams.Status(m.Header.Get(streams.HeaderStatus)); status {
	case streams.StatusAcked, streams.StatusProcessing:
		b.state = branchAcked
		b.expires = time.Now().Add(g.sh.CallTimeout(i))
		return
	case streams.StatusChunk:
		return // nobody asked for a stream
	case streams.StatusFinished:
		if m.Header.Get(streams.HeaderDirect) != "" {
			g.end(i, m, streams.NewError(streams.CodeInternal, "instance %s sent its result elsewhere (%s), but the delivery offered no %s",
				id, streams.HeaderDirect, streams.HeaderReplyTo))
			return
		}
		g.end(i, m, nil)
		return
	}
	e := streams.ErrorFromMessage(m)
	if e == nil {
		e = streams.NewError(streams.CodeInternal, "instance %s answered status %q without an error code", id, m.Header.Get(streams.HeaderStatus))
	}
	g.end(i, m, e)
}

// branchOf finds the branch m answers: its subject must be one of this
// gather's reply subjects (branchIndex), and a Reach-Node it carries must
// name the instance asked there.
func (g *gather) branchOf(m *nats.Msg) (int, bool) {
	i, ok := branchIndex(g.inbox, m.Subject, g.token)
	if !ok {
		return 0, false
	}
	if node := m.Header.Get(streams.HeaderNode); node != "" && node != g.sh.Target(i) {
		return 0, false
	}
	return i, true
}

func (g *gather) token(i int) (string, bool) {
	if i < 0 || i >= len(g.br) {
		return "", false
	}
	return g.br[i].token, true
}

// branchIndex reads a reply subject <inbox>.<index>.<token>: the index in
// its canonical decimal form, of a branch whose token (token(index)) is
// the one given. Anything else is no branch's.
func branchIndex(inbox, subject string, token func(int) (string, bool)) (int, bool) {
	rest, ok := strings.CutPrefix(subject, inbox)
	if !ok || len(rest) == 0 || rest[0] != '.' {
		return 0, false
	}
	idx, tok, ok := strings.Cut(rest[1:], ".")
	if !ok || len(idx) == 0 || len(idx) > 6 || len(idx) > 1 && idx[0] == '0' {
		return 0, false
	}
	i := 0
	for _, c := range []byte(idx) {
		if c < '0' || c > '9' {
			return 0, false
		}
		i = i*10 + int(c-'0')
	}
	want, ok := token(i)
	if !ok || want == "" || subtle.ConstantTimeCompare([]byte(tok), []byte(want)) != 1 {
		return 0, false
	}
	return i, true
}

// end ends branch i, under g.mu: with the agent's message (last: its
// result when e is nil, or its error reply) or the gatherer's own error e,
// and checks whether the broadcast is decided. What else a branch's end
// costs — its instance's breaker and latency, its record — waits until the
// caller has its answer (settle).
func (g *gather) end(i int, last *nats.Msg, e *streams.Error) {
	b := &g.br[i]
	if b.state == branchDone {
		return
	}
	b.acked = b.state == branchAcked
	b.state = branchDone
	b.took = time.Since(b.sent)
	b.last, b.err = last, e
	g.ended++
	if e == nil {
		g.succeeded++
	}
	g.check()
}

// check decides the gathering when every branch ended, or when a quorum
// succeeded once every branch has been asked; under g.mu.
func (g *gather) check() {
	if g.ended == len(g.br) || !g.sending && g.succeeded >= g.need && g.mode != ModeAll {
		g.decide()
	}
}

// callerCancelled ends the gathering when its caller cancels it.
func (g *gather) callerCancelled(*streams.Error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.over {
		g.gone = true
		g.decide()
	}
}

// decide ends the gathering, under g.mu.
func (g *gather) decide() {
	if g.over {
		return
	}
	g.over = true
	if g.timer != nil {
		g.timer.Stop()
	}
	close(g.done)
}

// cancel tells branch i's instance that its work is not wanted any more.
func (g *gather) cancel(i int) {
	c := nats.NewMsg(g.s.d.Config().Subjects.Agent(g.sh.Target(i)))
	c.Header.Set(streams.HeaderStatus, string(streams.StatusCancel))
	c.Header.Set(streams.HeaderRequestID, g.br[i].requestID)
	c.Header.Set(streams.HeaderAttempt, "1")
	c.Header.Set(streams.HeaderCapability, g.capab)
	c.Header.Set(streams.HeaderDelivery, g.replySubject(i))
	if err := g.s.nc.PublishMsg(c); err != nil {
		g.s.log.Debug().Err(err).Str("node", g.sh.Target(i)).Msg("cancel not sent")
	}
}

// finish ends the branches still open — cancelled, as the policy was met
// or the caller (the service closing) is gone — and builds the reply.
// settle must follow once the reply is sent.
func (g *gather) finish(gone bool) *Reply {
	g.mu.Lock()
	g.decide()
	decided := !gone && g.succeeded >= g.need && g.mode != ModeAll
	why := "another branch answered first"
	switch {
	case g.gone:
		decided, why = true, "the caller cancelled the broadcast"
	case g.mode == ModeQuorum:
		why = "the quorum was met"
	}
	for i := range g.br {
		b := &g.br[i]
		switch b.state {
		case branchDone:
			continue
		case branchSent, branchAcked:
			g.cancels = append(g.cancels, i)
		case branchNew:
			b.sent = time.Now() // never sent: its slot is given back all the same
		}
		e := streams.NewError(streams.CodeCancelled, "%s", why)
		if !decided {
			e = streams.NewError(streams.CodeCancelled, "the broadcast was stopped")
		}
		g.end(i, nil, e)
		b.out.decided, b.out.late, b.out.why = decided, !decided, why
	}
	g.mu.Unlock()
	n := len(g.br)
	ct := g.sh.ContentType()
	r := &Reply{Aggregate: streams.Aggregate{Expected: n, Replies: make([]streams.BranchReply, 0, n), Missing: []streams.Missing{}}}
	for i := range g.br {
		b := &g.br[i]
		var out *nats.Msg
		switch {
		case b.err == nil:
			out = b.last
		case b.last != nil && streams.ErrorFromMessage(b.last) != nil:
			out = b.last
		default:
			out = streams.ErrorReply("", ct, b.requestID, b.err)
		}
		out.Header.Set(streams.HeaderNode, g.sh.Target(i))
		out.Header.Set(streams.HeaderAttempt, "1")
		b.out.i, b.out.reply, b.out.latency = i, out, b.took
		r.add(g.sh.Target(i), b.out, ct, g.sh.Deadline().Sub(g.p.start))
	}
	r.complete(g.mode, g.quorum)
	return r
}

// settle does what each branch's end costs besides the reply, once the
// caller has it: a CANCEL to each branch cancelled, each instance's
// breaker, penalty and latency, each branch's record; then it gives the
// request's slots back.
func (g *gather) settle(r *Reply) {
	for _, i := range g.cancels {
		g.cancel(i)
	}
	for i := range g.br {
		b := &g.br[i]
		g.sh.Settle(i, b.took, b.last, b.err, b.acked)
		g.record(i, b.err)
	}
	g.mu.Lock()
	dropped := g.dropped
	g.mu.Unlock()
	if dropped > 0 {
		g.s.log.Info().Str("request_id", g.p.requestID).Int("dropped", dropped).Msg("broadcast replies from no branch asked dropped")
	}
	var e *streams.Error
	if !r.Complete {
		e = streams.NewError(streams.CodeIncomplete, "%s", r.Message)
	}
	g.sh.Close(e)
}

// record writes branch i's event, a task's record with the broadcast as
// its parent.
func (g *gather) record(i int, e *streams.Error) {
	b := &g.br[i]
	ev := events.Event{RequestID: b.requestID, OrchestrationID: g.sh.OrchestrationID(), Capability: g.capab,
		Status: string(streams.StatusFinished), Outcome: events.OutcomeReply, Node: g.sh.Target(i), Attempts: 1,
		Start: b.sent, LatencyMS: float64(b.took.Microseconds()) / 1000, ParentID: g.p.requestID, Source: g.source,
		Candidates: len(g.br)}
	if e != nil {
		ev.Status, ev.Code, ev.Error = events.StatusOf(e), string(e.Code), events.ErrorText(e.Message)
	}
	g.s.d.RecordEvent(ev)
}
