// Package durable is the durable tier's own machinery, apart from routing:
// the shared consumer of REACH_TASKS (Join), the one claim per task's
// outcome in REACH_OUTCOMES (Claims), the dead letters and review entries
// and their tools (Parked, ListParked, Replay, RecordResolution), the
// dead-letter replayer (Replayer), and the rules of a submission (its
// request id, what waits in the stream, in-progress acks), and the tier
// itself (Tier): each task of REACH_TASKS taken to exactly one recorded
// outcome, routed by the dispatcher through a small interface (Router).
package durable
