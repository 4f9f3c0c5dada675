// Package fanout runs broadcast and fan-out/fan-in beside a dispatcher
// (docs/reference.md, Broadcast and fan-out): one request in, several tasks out, one aggregate reply.
//
// A Service listens on reach.fanout and reach.broadcast.<capability> in the
// dispatchers' queue group. A fan-out's body lists branches, each an
// ordinary anycast task (the dispatcher's strategy, retries, breakers) with
// a request id of its own, Reach-Parent-Id set to the fan-out's request id
// and the fan-out's orchestration id. A broadcast sends one delivery to every
// instance of the capability that is routable when it arrives, without
// retries elsewhere. A fan-out's branches run through Dispatcher.Call in
// this process, so they cost no extra message hop, and keep everything a
// task has (retries, waiting for a slot, hedging). A broadcast runs on one
// shared delivery (shared.go): decoded, admitted and matched once by
// dispatcher.OpenShared, its branches entries in one table, replies on one
// inbox subscription, one timer for every branch's ACK and call deadline.
// The service gathers the answers, applies the completion policy (all,
// quorum or first) within max_wait, and answers the caller once: FINISHED
// when the policy is met, else FAILED with INCOMPLETE, the body carrying
// what came back either way. Branches still running when it answers are
// cancelled.
//
// Every branch leaves its own REACH_EVENTS record; the fan-out or
// broadcast leaves one more (Event.Kind "fanout" or "broadcast").
package fanout
