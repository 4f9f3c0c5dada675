package engine

import (
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/dispatcher/events"
	"github.com/agent-reach/agentreach/streams"
)

// The extension points the engine calls: metrics (Observer), access
// control (Authorizer, ReplyChecker) and workflows (Resolver). Each is set
// with a dispatcher.Option and called from the engine's own goroutines;
// none may block.

// Observer sees every task the dispatcher ends and every record it writes
// (a task's, a fan-out's, a resolution's): the record REACH_EVENTS gets,
// whether or not this replica writes records (NoEvents). Observed must not
// block, nor keep ev or write to it.
type Observer interface {
	Observed(ev *events.Event)
}

// Authorizer decides whether the sender of a task may call its capability,
// before anything is routed: it returns nil, or the error the caller gets
// (UNAUTHORIZED, or BAD_REQUEST for a credential that does not parse). m is
// the task as it arrived (its headers name and prove the caller); durable
// says whether it came through REACH_TASKS. Authorize runs on every task,
// so it must be fast.
type Authorizer interface {
	Authorize(capability string, m *nats.Msg, durable bool) *streams.Error
}

// ReplyChecker is an Authorizer that also says, before a task received on
// reach.task is admitted or anything is answered, whether its reply
// subject may be answered at all (auth.Authorizer: only inside its
// caller's own inbox). A task it refuses is dropped unanswered — even the
// Refusal, published there, would act for whoever chose the subject — and
// the checker logs it.
type ReplyChecker interface {
	CheckReply(m *nats.Msg) *streams.Error
}

// Resolver takes over the tasks addressed to names it serves — workflows,
// which shadow a capability of the same name — on both tiers and from
// every way in: reach.task, reach.submit and Call (so the HTTP gateway and
// fan-out branches too).
//
// Serves is asked for every task (it must be cheap); Names lists the names
// served (for a "did you mean" when a name is unknown). Direct runs a
// Direct-tier request and returns its reply, which the dispatcher sends to
// whoever asked (m.Reply, or Call's caller); Durable gets a durable one,
// which it must acknowledge only once its outcome is recorded (or leave to
// be redelivered). Both run on a goroutine of their own, and the task
// holds one of the replica's MaxInFlight slots until they return.
type Resolver interface {
	Serves(name string) bool
	Names() []string
	Direct(m *nats.Msg, name string) *nats.Msg
	Durable(msg jetstream.Msg, name string)
}
