package engine

import (
	"time"

	"github.com/agent-reach/agentreach/dispatcher/events"
	"github.com/agent-reach/agentreach/streams"
)

// Stage 7 of a task's path, record: every task that ends leaves one record
// in REACH_EVENTS (events.Event), counted in the replica's Stats by the
// counting model and handed to the observers (the Prometheus collectors);
// its span ends with it (dispatcher/tracing).

// Record writes the feedback record of a finished task, which started at
// start.
func (en *Engine) Record(t *Task, start time.Time, outcome string, e *streams.Error) {
	ev := events.Event{
		RequestID: t.requestID, OrchestrationID: t.orchID, Capability: t.capability, Tier: "direct",
		Dispatcher: en.cfg.Name, Status: string(streams.StatusFinished), Outcome: outcome, Node: t.node, Failed: t.triedIDs,
		Attempts: t.attempts, Cost: t.spent, Start: start, LatencyMS: float64(time.Since(start).Microseconds()) / 1000,
		ParentID: t.req.Header.Get(streams.HeaderParentID), Hedged: t.hedged, HedgeWon: t.hedgedWon, Source: t.req.Header.Get(streams.HeaderSource),
	}
	if ev.Unknown = en.served.Record(t.capability, t.node != "", e, func(c string) bool { return len(en.table.Offering(c)) > 0 || en.Resolves(c) }); e != nil {
		ev.Status, ev.Code, ev.Error = events.StatusOf(e), string(e.Code), events.ErrorText(e.Message)
	}
	if r := t.relay; r != nil { // the task has ended: its relay is settled
		ev.Streamed, ev.Chunks = true, r.Sent()
		if !r.First().IsZero() {
			ev.FirstChunkMS = float64(r.First().Sub(start).Microseconds()) / 1000
		}
	}
	if !en.records.Wanted() {
		en.records.Count(&ev) // counted all the same
		return
	}
	if t.view != nil && (len(t.view.Excluded) > 0 || len(t.passed) > 0) {
		ev.Excluded, ev.ExcludedTotal = en.exclusions(t, false, events.ExcludedInEvents)
	}
	if en.table != nil {
		ev.Candidates = en.table.Candidates(t.capability).Len()
	}
	if t.seq > 0 {
		ev.Tier = "durable"
		en.records.Publish(&ev, "event-"+t.requestID+"-"+t.req.Header.Get(streams.HeaderDLQCount))
		return
	}
	en.records.Publish(&ev, "")
}

// RecordEvent writes a feedback record that is not a task's own, such as
// a fan-out's or a broadcast's, batched like the direct tier's records.
// Dispatcher and Tier are filled in when empty. When the replica runs with
// NoEvents and no observer it only counts it (Stats).
func (en *Engine) RecordEvent(ev events.Event) {
	if !en.records.Wanted() {
		en.records.Count(&ev)
		return
	}
	if ev.Dispatcher == "" {
		ev.Dispatcher = en.cfg.Name
	}
	if ev.Tier == "" {
		ev.Tier = "direct"
	}
	en.records.Publish(&ev, "")
}

// observe hands a record to every observer.
func (en *Engine) observe(ev *events.Event) {
	for _, o := range en.hooks.Observers {
		o.Observed(ev)
	}
}
