package dispatcher

import (
	"sync"
	"time"
)

// With an authorizer, feedback (reach.event._feedback) is accepted only
// from the caller of the task it scores, for the instance that produced
// the result, once: the record must be signed by the identity that was the
// task's Reach-Source. A replica knows that of the tasks it finished
// itself, the latest recentCallersKept to 2×recentCallersKept of them;
// feedback on an older task, or on one another replica routed, is dropped
// (each replica ranks by the scores of the tasks it routed).
const (
	// recentCallersKept bounds the tasks a replica remembers the caller of.
	recentCallersKept = 4096
	// feedbackLogEvery is how often a dropped feedback is logged per
	// identity.
	feedbackLogEvery = time.Minute
)

// taskCaller is who called a finished task and which instance answered.
type taskCaller struct{ source, node string }

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

// claim reports whether task requestID was called by source and answered
// by node, and then forgets it: a task is scored once.
func (r *recentCallers) claim(requestID string, c taskCaller) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range []map[string]taskCaller{r.cur, r.prev} {
		if got, ok := m[requestID]; ok {
			if got != c {
				return false
			}
			delete(r.cur, requestID)
			delete(r.prev, requestID)
			return true
		}
	}
	return false
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

// rememberCaller records who called t, finished with a result, for
// checking feedback on it (with an authorizer only).
func (d *Dispatcher) rememberCaller(t *task) {
	if d.authorizer != nil && t.source != "" && t.node != "" {
		d.callers.add(t.requestID, taskCaller{source: t.source, node: t.node})
	}
}

// dropFeedback logs, once per identity per feedbackLogEvery, why a
// feedback of identity was dropped.
func (d *Dispatcher) dropFeedback(identity, requestID, reason string) {
	if d.callers.logDrop(identity, time.Now()) {
		d.log.Warn().Str("source", identity).Str("request_id", requestID).Str("reason", reason).
			Msg("feedback dropped (logged once a minute per identity)")
	}
}
