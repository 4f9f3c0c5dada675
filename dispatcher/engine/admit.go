package engine

import (
	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/streams"
)

// Stage 1 of a task's path, admit: a request — once its entry has found
// its reply subject answerable (dispatcher's receive: a reply subject, the
// authorizer's say) — takes one of the replica's in-flight slots, within
// its caller's fair share (selection.FairShare), or is answered OVERLOADED
// (Refusal) before it becomes a task. Decode (decode.go) follows; payload
// size is checked by the server (max_payload) and on each delivery
// (deliver.go).

// headerRetryAfter is on every OVERLOADED answer: whole seconds after which
// sending again makes sense, as HTTP's Retry-After (the gateway's too).
const (
	headerRetryAfter = "Retry-After"
	retryAfterSecs   = "1"
)

// anonymous names, in messages, the one bucket shared by the requests
// without a Reach-Source.
const anonymous = "anonymous"

// CallerOf is the identity a request's in-flight slot is counted against:
// its Reach-Source, "" (anonymous) when it has none. Admission runs before
// the authorizer, so the value is the one claimed: where auth is on, a
// request whose claim is not proven holds its slot only until NewTask
// refuses it UNAUTHORIZED; without auth a caller can claim any name
// (docs/security.md, "Fair share").
func CallerOf(h nats.Header) string { return h.Get(streams.HeaderSource) }

// Admit takes one of the replica's MaxInFlight slots for a task of
// caller (CallerOf), or returns OVERLOADED: when the replica holds
// MaxInFlight tasks, or more than Config.FairShareAt and caller holds its
// fair share (fairShare). Free(caller) gives it back when the task's
// answer is decided.
func (en *Engine) Admit(caller string) *streams.Error {
	// The cap and the share are checked before the task is counted, so a
	// flood of refused tasks never holds the count above what is admitted
	// (another caller's task would be refused for the cap meanwhile).
	var n int64
	for {
		n = en.inflight.Load() + 1
		if n > int64(en.cfg.MaxInFlight) {
			en.stats.overloaded.Add(1)
			return streams.NewError(streams.CodeOverloaded, "dispatcher %s has %d tasks in flight", en.cfg.Name, en.cfg.MaxInFlight)
		}
		ok, held, share := en.fair.Take(caller, n)
		if ok && en.inflight.CompareAndSwap(n-1, n) {
			break
		}
		if ok {
			en.fair.Give(caller) // another task was counted meanwhile: again
			continue
		}
		en.stats.overloaded.Add(1)
		if caller == "" {
			caller = anonymous
		}
		return streams.NewError(streams.CodeOverloaded, "dispatcher %s: caller %s holds %d of the %d tasks in flight, its share (above %d tasks in flight, shared by the callers holding tasks) is %d",
			en.cfg.Name, caller, held, n-1, en.cfg.FairShareAt, share)
	}
	en.tasks.Add(1)
	return nil
}

// Free gives caller's in-flight slot back; the task's Done (what Wait
// waits for) comes after its answer is sent. A task frees its
// slot once its answer is decided and before the answer is sent: a caller
// that sends its next task the moment it has the answer must find the
// slot free, or the answered task would count against its fair share.
func (en *Engine) Free(caller string) {
	en.fair.Give(caller)
	en.inflight.Add(-1)
}

// Done marks the end of a task Admit admitted, once its answer is sent:
// Wait waits for them all.
func (en *Engine) Done() { en.tasks.Done() }

// Refusal is the error reply, e, to a request that starts no task
// (Reach-Attempt 0); OVERLOADED has a Retry-After.
func Refusal(m *nats.Msg, e *streams.Error) *nats.Msg {
	ct, _ := streams.PayloadType(m.Header, m.Data)
	id, orch := TaskIDs(m.Header)
	if e.Code == streams.CodeOverloaded {
		return ErrorMsg(ct, id, orch, e, streams.HeaderAttempt, "0", headerRetryAfter, retryAfterSecs)
	}
	return ErrorMsg(ct, id, orch, e, streams.HeaderAttempt, "0")
}
