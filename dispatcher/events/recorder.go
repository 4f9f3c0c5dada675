package events

import (
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/streams"
)

// Recorder is where a replica's records go: each is counted (Counts),
// handed to the observer, and, unless off, sent on its capability's event
// subject — batched by a Log, or alone with a message id. Its methods are
// safe for concurrent use.
type Recorder struct {
	nc       *nats.Conn
	subjects streams.Subjects
	off      bool
	observe  func(ev *Event)
	log      *zerolog.Logger
	batches  *Log
	counts   Tally
}

// NewRecorder returns a recorder that publishes on nc under subjects. With
// off it sends no records (the dispatcher's NoEvents): they are counted and
// observed all the same. observe, when not nil, sees every record; it must
// not block, nor keep ev or write to it. Failed publishes are logged to log.
func NewRecorder(nc *nats.Conn, subjects streams.Subjects, off bool, observe func(ev *Event), log *zerolog.Logger) *Recorder {
	r := &Recorder{nc: nc, subjects: subjects, off: off, observe: observe, log: log}
	r.batches = NewLog(r.send)
	return r
}

// Wanted reports whether records are written at all: to REACH_EVENTS, or
// for the observer. Either way they are counted (Count).
func (r *Recorder) Wanted() bool { return !r.off || r.observe != nil }

// Count counts ev without writing it, for a record nobody wants.
func (r *Recorder) Count(ev *Event) { r.counts.Add(ev.Count()) }

// Counts returns what the records so far add up to.
func (r *Recorder) Counts() Counts { return r.counts.Load() }

// Publish counts ev, hands it to Observe and sends it on its capability's
// event subject: alone with msgID as its message id when one is given
// (deduplicated across redeliveries), else batched.
func (r *Recorder) Publish(ev *Event, msgID string) {
	r.Count(ev)
	if r.observe != nil {
		// The observer sees a copy: handing it ev would move every record
		// to the heap, observed or not.
		seen := *ev
		r.observe(&seen)
	}
	if r.off {
		return
	}
	capability := ev.Capability
	if streams.ValidateCapability(capability) != nil {
		capability = "invalid" // a BAD_REQUEST for the subject itself still leaves its record
	}
	subject := r.subjects.Event(capability)
	if msgID != "" {
		r.batches.Alone(subject, msgID, ev)
		return
	}
	r.batches.Add(subject, ev)
}

// Flush sends every record waiting in a batch.
func (r *Recorder) Flush() { r.batches.Flush("") }

// send publishes one message of records (Log).
func (r *Recorder) send(m *nats.Msg) {
	if err := r.nc.PublishMsg(m); err != nil {
		r.log.Warn().Err(err).Str("subject", m.Subject).Str("records", m.Header.Get(HeaderEvents)).Msg("event records not published")
	}
}
