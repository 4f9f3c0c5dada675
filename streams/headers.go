package streams

// Header names of the wire contract (docs/protocol.md). Metadata always travels in
// headers, never in the payload.
const (
	HeaderRequestID       = "Reach-Request-Id"
	HeaderOrchestrationID = "Reach-Orchestration-Id"
	HeaderTraceParent     = "traceparent"
	HeaderSource          = "Reach-Source"
	// HeaderSignature proves a task's Reach-Source to the dispatchers
	// (package auth). It is for them alone: no delivery carries it.
	HeaderSignature = "Reach-Signature"
	// HeaderReplayedBy names the dispatcher identity whose Reach-Signature
	// proves a replayed dead letter or review entry (package auth).
	HeaderReplayedBy     = "Reach-Replayed-By"
	HeaderAgent          = "Reach-Agent"
	HeaderCapability     = "Reach-Capability"
	HeaderIdempotencyKey = "Reach-Idempotency-Key"
	HeaderTimeout        = "Reach-Timeout"
	HeaderDeadline       = "Reach-Deadline"
	HeaderHops           = "Reach-Hops"
	HeaderAttempt        = "Reach-Attempt"
	HeaderStatus         = "Reach-Status"
	HeaderError          = "Reach-Error"
	HeaderNode           = "Reach-Node"
	HeaderCost           = "Reach-Cost"
	// HeaderAffinityKey selects an instance by consistent hashing when the
	// capability's strategy is "hash".
	HeaderAffinityKey = "Reach-Affinity-Key"
	// HeaderBudget is the caller's cost budget: each attempt's Reach-Cost
	// draws it down, and no retry starts once it is spent.
	HeaderBudget = "Reach-Budget"
	// HeaderActive is set by agents on ACKED and final replies: how many
	// tasks the instance is running (a final reply does not count its own
	// task). Dispatchers use it as a fresh load report between heartbeats.
	HeaderActive = "Reach-Active"
	// HeaderVisits lists the instances a chain has reached (comma
	// separated), for loop protection; dispatchers append, agentkit carries
	// it across hops.
	HeaderVisits      = "Reach-Visits"
	HeaderContentType = "Content-Type"
	// HeaderReplyTo is set by dispatchers on a direct-tier delivery: the
	// caller's reply subject. An agent allowed to publish there may send its
	// FINISHED result straight to the caller (with the Reach-Request-Id,
	// Reach-Orchestration-Id and Reach-Attempt of the delivery) and answer
	// the delivery's own reply subject with HeaderDirect instead of the
	// result. Agents that ignore it answer as always.
	HeaderReplyTo = "Reach-Reply-To"
	// HeaderDirect, "1" on a FINISHED reply without a body, says that the
	// result went to the caller directly (HeaderReplyTo).
	HeaderDirect = "Reach-Direct"

	// Orchestration: broadcast, fan-out, requirements, hedging, workflows
	// (docs/protocol.md).
	HeaderRequire  = "Reach-Require"   // caller: task requirements, JSON
	HeaderPrefer   = "Reach-Prefer"    // caller: latency, cost or quality
	HeaderQuorum   = "Reach-Quorum"    // caller: broadcast completion, a fraction (0.6) or a count (3)
	HeaderExpected = "Reach-Expected"  // dispatcher: on a broadcast or fan-out reply, branches expected
	HeaderAnswered = "Reach-Answered"  // dispatcher: on a broadcast or fan-out reply, branches that answered
	HeaderHedged   = "Reach-Hedged"    // dispatcher: "1" when a hedged second delivery produced the answer
	HeaderParentID = "Reach-Parent-Id" // dispatcher: on a branch or workflow step, the fan-out's or run's request id
	HeaderRunID    = "Reach-Run-Id"    // dispatcher: on a workflow's reply, its run id

	// HeaderEvents says how many records (JSON lines) a REACH_EVENTS
	// message holds.
	HeaderEvents = "Reach-Events"

	// HeaderDelivery is set on a CANCEL: the reply subject of the delivery
	// it cancels, which names that delivery alone (two copies of a durable
	// task redelivered at once share request id and attempt).
	HeaderDelivery = "Reach-Delivery"

	// HeaderInDoubt, "true" on an INTERNAL error reply, says that the
	// outcome of an idempotent execution is unknown: the instance that
	// claimed the idempotency key left before storing an outcome, so the side
	// effect may or may not have happened and the key is not executed again.
	// A durable task answered so goes to REACH_REVIEW (reason "in_doubt"),
	// for a person to decide, never to the dead-letter replayer.
	HeaderInDoubt = "Reach-In-Doubt"

	// Durable tier: set on dead letters, review entries and replays.
	HeaderDLQReason   = "Reach-DLQ-Reason"
	HeaderDLQAttempts = "Reach-DLQ-Attempts"
	HeaderDLQCount    = "Reach-DLQ-Count"
	// HeaderLastError carries the last error message of a parked task.
	HeaderLastError = "Reach-Last-Error"
	// HeaderDLQDropped, on a parked entry, says its payload was left out
	// because the task with the entry's headers exceeded max_payload; its
	// value is the payload's size in bytes. Such an entry cannot be
	// replayed: the task must be submitted again, smaller.
	HeaderDLQDropped = "Reach-DLQ-Dropped"
	// HeaderMsgID is JetStream's deduplication id; submissions use the
	// request id.
	HeaderMsgID = "Nats-Msg-Id"
	// HeaderStream is a caller's "1": relay the agent's chunks
	// (docs/protocol.md, Streaming results).
	HeaderStream = "Reach-Stream"
	// HeaderSeq numbers a CHUNK of a task's stream, from 1.
	HeaderSeq = "Reach-Seq"
	// HeaderChunks is on a streamed task's final message: how many chunks
	// were sent before it.
	HeaderChunks = "Reach-Chunks"
)

// Status is a task's lifecycle state as carried in the Reach-Status header.
type Status string

// Task states. CREATED and SENT exist only inside the dispatcher; the others
// travel on the wire.
const (
	StatusCreated    Status = "CREATED"
	StatusSent       Status = "SENT"
	StatusAcked      Status = "ACKED"
	StatusProcessing Status = "PROCESSING"
	StatusFinished   Status = "FINISHED"
	StatusFailed     Status = "FAILED"
	StatusTimeout    Status = "TIMEOUT"
	// StatusChunk is one piece of a streamed result (Reach-Seq numbers
	// it); it neither ends the task nor is its result.
	StatusChunk Status = "CHUNK"
	// StatusCancel is not a task state but an instruction: a message on
	// reach.agent.<id> without a reply subject, naming a task by
	// Reach-Request-Id (and Reach-Attempt), that nobody will use the
	// answer of any more. Ignoring it is always correct.
	StatusCancel Status = "CANCEL"
)

// Terminal reports whether a task in state s has ended.
func (s Status) Terminal() bool {
	return s == StatusFinished || s == StatusFailed || s == StatusTimeout
}
