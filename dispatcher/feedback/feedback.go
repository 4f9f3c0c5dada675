package feedback

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/dispatcher/events"
	"github.com/agent-reach/agentreach/streams"
)

// Scores takes callers' scores of a replica's results (requests on
// reach.feedback). Fill in its fields before the first Remember or Handle;
// its methods are then safe for concurrent use.
type Scores struct {
	NC *nats.Conn
	// JS stores the accepted scores in REACH_EVENTS.
	JS       jetstream.JetStream
	Subjects streams.Subjects
	// Dispatcher names the replica in the records it stores.
	Dispatcher string
	Log        *zerolog.Logger
	// Authorize, when set, proves a feedback's Reach-Source as a task's
	// (the dispatcher's Authorizer); a score is then accepted only from the
	// identity that called the task. Nil: no auth.
	Authorize func(m *nats.Msg) *streams.Error
	// CheckReply, when set, says whether a feedback's reply subject may be
	// answered (the dispatcher's ReplyChecker).
	CheckReply func(m *nats.Msg) *streams.Error
	// Observe folds an accepted score of instance node into its quality
	// average.
	Observe func(node string, score float64)

	callers recentCallers
}

// A caller's feedback (a request on reach.feedback) is accepted only for a
// task this replica finished itself, for the instance that produced the
// result, once; with an authorizer, only from the identity that was the
// task's Reach-Source, proven like a task. A replica knows that of the
// latest recentCallersKept to 2×recentCallersKept tasks it finished;
// feedback on an older task, or on one another replica routed, is not
// its to accept (each replica ranks by the scores of the tasks it routed).
// What it accepts it stores in REACH_EVENTS as its own record
// (reach.event._feedback), so the aggregate folds only checked scores.
const (
	// recentCallersKept bounds the tasks a replica remembers the caller of.
	recentCallersKept = 4096
	// feedbackLogEvery is how often a dropped feedback is logged per
	// identity.
	feedbackLogEvery = time.Minute
	// feedbackStoreTimeout bounds storing accepted feedback in REACH_EVENTS.
	feedbackStoreTimeout = 5 * time.Second
)

// taskCaller is who called a finished task and which instance answered;
// scored is set once its feedback was accepted.
type taskCaller struct {
	source, node string
	scored       bool
}

// recentCallers remembers the callers of a replica's latest finished
// tasks, in two generations of at most recentCallersKept each: when the
// current one is full it becomes the previous one and the oldest are
// forgotten. Its zero value is ready; it is safe for concurrent use.
type recentCallers struct {
	mu        sync.Mutex
	cur, prev map[string]taskCaller
	logged    map[string]time.Time // identity → when a drop of its feedback was last logged
}

// add remembers the caller of task requestID.
func (r *recentCallers) add(requestID string, c taskCaller) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.cur) >= recentCallersKept {
		r.prev, r.cur = r.cur, nil
	}
	if r.cur == nil {
		r.cur = make(map[string]taskCaller)
	}
	r.cur[requestID] = c
}

// A claim's verdict.
type claimVerdict int

const (
	claimUnknown    claimVerdict = iota // not a task this replica remembers
	claimAccepted                       // scored now
	claimNotCaller                      // another identity called it
	claimWrongNode                      // another instance answered it
	claimScoredOnce                     // scored before
)

// claim scores task requestID for c, once: accepted when it was answered
// by c.node and — when bySource — called by c.source.
func (r *recentCallers) claim(requestID string, c taskCaller, bySource bool) claimVerdict {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range []map[string]taskCaller{r.cur, r.prev} {
		got, ok := m[requestID]
		switch {
		case !ok:
			continue
		case bySource && got.source != c.source:
			return claimNotCaller
		case got.node != c.node:
			return claimWrongNode
		case got.scored:
			return claimScoredOnce
		}
		got.scored = true
		m[requestID] = got
		return claimAccepted
	}
	return claimUnknown
}

// logDrop reports whether a dropped feedback of identity ("" for one
// that proved none) is to be logged at now: once per feedbackLogEvery.
func (r *recentCallers) logDrop(identity string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.logged == nil {
		r.logged = make(map[string]time.Time)
	}
	if last, ok := r.logged[identity]; ok && now.Sub(last) < feedbackLogEvery {
		return false
	}
	if len(r.logged) >= recentCallersKept { // identities are proven, so few; still bounded
		for k, t := range r.logged {
			if now.Sub(t) >= feedbackLogEvery {
				delete(r.logged, k)
			}
		}
	}
	r.logged[identity] = now
	return true
}

// Remember records who called task requestID, finished with a result by
// instance node (none: nothing to score), for checking feedback on it.
// source is the task's proven Reach-Source ("" without auth).
func (s *Scores) Remember(requestID, source, node string) {
	if node != "" {
		s.callers.add(requestID, taskCaller{source: source, node: node})
	}
}

// Handle takes a caller's scores of results (reach.feedback, one JSON
// line per record, as Event with Kind "feedback"). A record counts only
// when it is a valid score of a task this replica finished, naming the
// instance that answered it, not scored before — and with an authorizer,
// when the message proves the identity that called that task. The replica
// folds the scores it accepted into the instances' quality averages,
// stores them in REACH_EVENTS as its own records (without the caller's
// signature) and answers {"accepted": n} once stored. When it accepted
// none it answers why (UNAUTHORIZED: not proven, or not the task's
// caller; BAD_REQUEST: unreadable, the wrong instance, scored already),
// where the reply gate allows, and logs it once a minute per identity;
// about a task it does not know it stays silent: another replica may have
// finished it.
func (s *Scores) Handle(m *nats.Msg) {
	source := m.Header.Get(streams.HeaderSource)
	if s.Authorize != nil {
		if e := s.Authorize(m); e != nil {
			s.drop("", m.Header.Get(streams.HeaderRequestID), e.Message)
			s.answer(m, nil, e)
			return
		}
		source = m.Header.Get(streams.HeaderSource)
	}
	evs, err := events.DecodeEvents(m.Data)
	if err != nil {
		s.answer(m, nil, streams.NewError(streams.CodeBadRequest, "feedback: %v", err))
		return
	}
	var accepted []byte
	var refused *streams.Error
	n := 0
	for i := range evs {
		ev := &evs[i]
		if ev.Kind != events.KindFeedback || ev.Score == nil || !(*ev.Score >= 0 && *ev.Score <= 1) {
			refused = streams.NewError(streams.CodeBadRequest, "feedback for %s: want kind \"feedback\" and a score from 0 to 1", ev.RequestID)
			continue
		}
		switch s.callers.claim(ev.RequestID, taskCaller{source: source, node: ev.Node}, s.Authorize != nil) {
		case claimUnknown:
			continue // another replica's task, perhaps
		case claimNotCaller:
			refused = streams.NewError(streams.CodeUnauthorized, "feedback for %s: only the task's caller may score it", ev.RequestID)
		case claimWrongNode:
			refused = streams.NewError(streams.CodeBadRequest, "feedback for %s: instance %s did not answer it", ev.RequestID, ev.Node)
		case claimScoredOnce:
			refused = streams.NewError(streams.CodeBadRequest, "feedback for %s: it was scored already (once per task)", ev.RequestID)
		case claimAccepted:
			s.Observe(ev.Node, *ev.Score)
			stored := events.Event{RequestID: ev.RequestID, Kind: events.KindFeedback, Node: ev.Node, Score: ev.Score, Start: ev.Start,
				Capability: ev.Capability, Dispatcher: s.Dispatcher}
			accepted = events.Append(accepted, &stored)
			n++
			continue
		}
		s.drop(source, ev.RequestID, refused.Message)
	}
	if n == 0 {
		if refused != nil {
			s.answer(m, nil, refused)
		}
		return
	}
	rec := nats.NewMsg(s.Subjects.FeedbackRecord())
	rec.Header.Set(events.HeaderEvents, strconv.Itoa(n))
	rec.Header.Set(streams.HeaderSource, source)
	rec.Data = accepted
	go func() { // off the subscription's goroutine: a store waits for the stream
		ctx, cancel := context.WithTimeout(context.Background(), feedbackStoreTimeout)
		defer cancel()
		if _, err := s.JS.PublishMsg(ctx, rec); err != nil {
			s.Log.Warn().Err(err).Str("source", source).Int("records", n).Msg("accepted feedback not stored in REACH_EVENTS")
			s.answer(m, nil, streams.NewError(streams.CodeInternal, "feedback: counted, but not stored: %v", err))
			return
		}
		s.answer(m, map[string]int{"accepted": n}, nil)
	}()
}

// answer answers a feedback request, when it asked for an answer
// and the reply gate lets it be answered there: body as JSON, or e.
func (s *Scores) answer(m *nats.Msg, body any, e *streams.Error) {
	if m.Reply == "" {
		return
	}
	if s.CheckReply != nil && s.CheckReply(m) != nil {
		return
	}
	requestID := m.Header.Get(streams.HeaderRequestID)
	var r *nats.Msg
	if e != nil {
		r = streams.ErrorReply(m.Reply, streams.ContentTypeJSON, requestID, e)
	} else {
		r = streams.StatusReply(m.Reply, streams.StatusFinished, requestID)
		r.Data, _ = json.Marshal(body)
		r.Header.Set(streams.HeaderContentType, streams.ContentTypeJSON)
	}
	if err := s.NC.PublishMsg(r); err != nil {
		s.Log.Debug().Err(err).Msg("feedback answer not sent")
	}
}

// drop logs, once per identity per feedbackLogEvery, why a
// feedback of identity was dropped.
func (s *Scores) drop(identity, requestID, reason string) {
	if s.callers.logDrop(identity, time.Now()) {
		s.Log.Warn().Str("source", identity).Str("request_id", requestID).Str("reason", reason).
			Msg("feedback dropped (logged once a minute per identity)")
	}
}
