// Package eventstats aggregates the task record in REACH_EVENTS: per
// capability, agent instance or agent type, the tasks (finished, rejected
// by the caller's own doing, failed), success rate, latency percentiles
// (p50, p95, p99), retries, cost and quality (the callers' feedback
// scores) over a sliding window, with the broadcasts and fan-outs in the
// total, and per capability a series of volume and latency over time.
// Records are counted by dispatcher.Event.Count, as the replica's counters
// and its metrics count them.
//
// An Aggregator is fed one Event at a time (Add) and answers Summary and
// Series at any moment from what it holds: it is kept incrementally, never
// recomputed per question. A Follower feeds one from the stream itself (an
// ordered consumer from the start of the window on), so every dispatcher
// replica that follows REACH_EVENTS holds the same aggregate: the record
// of every replica's tasks, not only its own, which an Observer would see.
// `agentreach stats --by` builds one the same way from the stream.
//
// Latencies are counted in logarithmic buckets 20 % wide, so a
// percentile is exact to within about 10 %; counts, cost and scores are
// exact.
package eventstats
