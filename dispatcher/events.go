package dispatcher

import (
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/streams"
)

// Event is the feedback record every task leaves in REACH_EVENTS (on
// reach.event.<capability>) when it ends: who could take it, who did, how
// long it took, how many attempts and what it cost.
type Event struct {
	RequestID       string    `json:"request_id"`
	OrchestrationID string    `json:"orchestration_id"`
	Capability      string    `json:"capability"`
	Tier            string    `json:"tier"` // "direct" or "durable"
	Dispatcher      string    `json:"dispatcher"`
	Status          string    `json:"status"`           // FINISHED, FAILED, TIMEOUT
	Code            string    `json:"code,omitempty"`   // the error code of a failed task
	Outcome         string    `json:"outcome"`          // reply; durable: result, dead_letter, review
	Candidates      int       `json:"candidates"`       // routable instances when it started
	Node            string    `json:"node,omitempty"`   // the instance of the last attempt
	Failed          []string  `json:"failed,omitempty"` // instances whose attempts failed, in order
	Attempts        int       `json:"attempts"`
	Cost            float64   `json:"cost,omitempty"`
	LatencyMS       float64   `json:"latency_ms"`
	Start           time.Time `json:"start"`
}

// recordEvent publishes the feedback record of a finished task. It is a
// plain publish that the stream captures, so it adds no round trip to the
// task; a durable task's record carries a message id, so a redelivery after
// a crash does not record it twice.
func (d *Dispatcher) recordEvent(t *task, start time.Time, outcome string, e *streams.Error) {
	if d.cfg.NoEvents {
		return
	}
	ev := Event{
		RequestID: t.requestID, OrchestrationID: t.orchID, Capability: t.capability, Tier: "direct",
		Dispatcher: d.cfg.Name, Status: string(streams.StatusFinished), Outcome: outcome, Node: t.node, Failed: t.triedIDs,
		Attempts: t.attempts, Cost: t.spent, Start: start,
		LatencyMS: float64(time.Since(start).Microseconds()) / 1000,
	}
	if d.table != nil {
		ev.Candidates = d.table.Candidates(t.capability).Len()
	}
	m := nats.NewMsg("")
	if t.seq > 0 {
		ev.Tier = "durable"
		m.Header.Set(streams.HeaderMsgID, "event-"+t.requestID+"-"+t.req.Header.Get(streams.HeaderDLQCount))
	}
	if e != nil {
		ev.Status, ev.Code = string(streams.StatusFailed), string(e.Code)
		if e.Code == streams.CodeTimeout {
			ev.Status = string(streams.StatusTimeout)
		}
	}
	capability := t.capability
	if streams.ValidateCapability(capability) != nil {
		capability = "invalid" // a BAD_REQUEST for the subject itself still leaves its record
	}
	m.Subject = d.cfg.Subjects.Event(capability)
	m.Data, _ = json.Marshal(ev)
	if err := d.nc.PublishMsg(m); err != nil {
		t.log.Warn().Err(err).Msg("event record not published")
	}
}
