// Package dispatcher routes tasks from publishers to agent instances.
//
// A Dispatcher subscribes to reach.task.> in a queue group, so any number of
// replicas share the load. For each task it resolves the target (one
// instance for unicast, else every routable instance offering the
// capability), picks one with the capability's strategy, delivers the task
// on reach.agent.<id> and follows it through ACKED, PROCESSING and the
// result. An instance that does not acknowledge within the ack timeout, has
// no subscription, or answers TARGET_BUSY is skipped and the same request
// (same request id) goes to another instance.
//
// A task's path is a pipeline of stages, one file each of the task engine
// (dispatcher/engine), in this order: admit, decode, resolve, pick,
// deliver, settle, record (its pipeline.go lists them). The Dispatcher is
// the lifecycle around the engine — New, Start, Drain, Close, the
// subscriptions, the registry's watches, the durable consumer and the
// dead-letter replayer — and its in-process entries: Call, Stream and a
// broadcast's shared delivery (OpenShared). A capability's settings under the live policy are
// dispatcher/config's; where a task goes, and its wait for a free slot,
// dispatcher/selection's, with no connection of its own; the durable tier
// (durable.Tier) dispatcher/durable's; the records and where they go
// dispatcher/events'; the deliveries' replies come through dispatcher/inbox;
// breakers are shared with the other replicas by dispatcher/breakers; spans
// are dispatcher/tracing's, callers' scores dispatcher/feedback's.
//
// The dispatcher holds no state that matters beyond caches: its routing
// table is rebuilt from REACH_AGENTS, and its in-flight counts start at zero.
package dispatcher
