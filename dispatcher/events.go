package dispatcher

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

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
	// ParentID is the request id of the fan-out, broadcast or workflow run
	// a task was a branch or step of (Reach-Parent-Id).
	ParentID string `json:"parent_id,omitempty"`
	// Kind is "fanout" or "broadcast" for the record of a scatter-gather
	// itself (its branches leave records of their own); empty for a task.
	Kind string `json:"kind,omitempty"`
	// Expected, Answered and Succeeded count a scatter-gather's branches.
	Expected  int `json:"expected,omitempty"`
	Answered  int `json:"answered,omitempty"`
	Succeeded int `json:"succeeded,omitempty"`
	// By is who resolved a review entry (RecordResolution).
	By string `json:"by,omitempty"`
	// Hedged is set when a hedge was sent for the task (docs/reference.md, Hedged requests);
	// HedgeWon when the hedge's answer was the one used.
	Hedged   bool `json:"hedged,omitempty"`
	HedgeWon bool `json:"hedge_won,omitempty"`
	// Score is a feedback record's score of the result of RequestID, from
	// 0 (useless) to 1 (perfect); Kind is then "feedback" and Node the
	// instance that produced the result.
	Score *float64 `json:"score,omitempty"`
	// Excluded lists the instances offering the capability that the task
	// could not go to, and why: requirements not met, a dependency down,
	// too slow for max_latency_ms, a breaker open — the first few of them;
	// ExcludedTotal counts them all.
	Excluded      []streams.Exclusion `json:"excluded,omitempty"`
	ExcludedTotal int                 `json:"excluded_total,omitempty"`
}

// The counting model (docs/operations.md, "The counting model"): every
// surface — a replica's Stats (reach.api.stats), its Prometheus metrics, the
// aggregate of REACH_EVENTS (reach.api.summary, `agentreach stats --by`) and
// the dashboard — counts records with Event.Count, so they count the same
// units the same way.
//
//   - A task is one piece of routed work with its own request id, ended once
//     by one record: a call (over NATS or HTTP), a durable task, a branch of
//     a broadcast or fan-out, a workflow step's call. It ends FINISHED,
//     rejected (the caller's own doing: ClassOf) or failed (the service's).
//   - A broadcast or fan-out is one request answered once, after gathering
//     its branches; its own record counts it, and the branches it expected.
//   - A branch is one of those expected parts; each runs as a task.
//   - A retry is an attempt of a task after its first, a hedge not counted.
//
// Requests refused before they become tasks (OVERLOADED at admission, no
// reply subject) leave no record and are counted apart (Stats.Overloaded,
// Stats.Dropped).

// Class is how a task's (or a scatter-gather's) outcome counts.
type Class string

// The classes of an outcome.
const (
	ClassFinished Class = "finished" // it ended FINISHED
	ClassRejected Class = "rejected" // the caller's own doing: see ClassOf
	ClassFailed   Class = "failed"   // any other error: a failure of the service
)

// ClassOf returns the class of an outcome with error code code ("" for
// FINISHED). The caller's own doing — the agent rejected the request
// (BIZ_REJECT), it was malformed (BAD_REQUEST), too large
// (PAYLOAD_TOO_LARGE), not allowed (UNAUTHORIZED) or cancelled by the caller
// (CANCELLED) — is ClassRejected; every other code is ClassFailed.
func ClassOf(code string) Class {
	switch streams.Code(code) {
	case "":
		return ClassFinished
	case streams.CodeBizReject, streams.CodeBadRequest, streams.CodePayloadTooLarge, streams.CodeUnauthorized,
		streams.CodeCancelled:
		return ClassRejected
	}
	return ClassFailed
}

// Counts is what records add up to by the counting model. Tasks is
// Finished + Rejected + Failed.
type Counts struct {
	Tasks    int64 `json:"tasks"`
	Finished int64 `json:"finished"`
	Rejected int64 `json:"rejected"` // the caller's own doing (ClassOf)
	Failed   int64 `json:"failed"`   // the service's failures
	// Retries counts the attempts of tasks after their first, hedges not
	// counted.
	Retries int64 `json:"retries"`
	// Broadcasts and FanOuts count the scatter-gathers answered; Branches
	// the branches they expected (each of which is a task of its own).
	Broadcasts int64 `json:"broadcasts"`
	FanOuts    int64 `json:"fanouts"`
	Branches   int64 `json:"branches"`
}

// Record kinds that count as a scatter-gather (Event.Kind).
const (
	KindBroadcast = "broadcast"
	KindFanOut    = "fanout"
)

// IsTask reports whether ev is a task's own record: no kind, and not a
// person's resolution of a review entry.
func (ev *Event) IsTask() bool { return ev.Kind == "" && !strings.HasPrefix(ev.Outcome, "review_") }

// Count returns what ev adds to the counts: one task of its class with its
// retries, or one broadcast or fan-out with the branches it expected, or
// nothing (a feedback score, a workflow's records, a review's resolution).
func (ev *Event) Count() Counts {
	var c Counts
	switch {
	case ev.IsTask():
		c.Tasks = 1
		switch ClassOf(ev.Code) {
		case ClassFinished:
			c.Finished = 1
		case ClassRejected:
			c.Rejected = 1
		default:
			c.Failed = 1
		}
		extra := ev.Attempts - 1
		if ev.Hedged {
			extra-- // the hedge is no retry
		}
		c.Retries = int64(max(extra, 0))
	case ev.Kind == KindBroadcast:
		c.Broadcasts, c.Branches = 1, int64(ev.Expected)
	case ev.Kind == KindFanOut:
		c.FanOuts, c.Branches = 1, int64(ev.Expected)
	}
	return c
}

// Add adds o to c.
func (c *Counts) Add(o Counts) {
	c.Tasks += o.Tasks
	c.Finished += o.Finished
	c.Rejected += o.Rejected
	c.Failed += o.Failed
	c.Retries += o.Retries
	c.Broadcasts += o.Broadcasts
	c.FanOuts += o.FanOuts
	c.Branches += o.Branches
}

// tally is a replica's Counts of the records it made, lock-free.
type tally struct {
	finished, rejected, failed, retries, broadcasts, fanouts, branches atomic.Int64
}

func (t *tally) add(c Counts) {
	for _, f := range [...]struct {
		n *atomic.Int64
		v int64
	}{{&t.finished, c.Finished}, {&t.rejected, c.Rejected}, {&t.failed, c.Failed},
		{&t.retries, c.Retries}, {&t.broadcasts, c.Broadcasts}, {&t.fanouts, c.FanOuts}, {&t.branches, c.Branches}} {
		if f.v != 0 {
			f.n.Add(f.v)
		}
	}
}

// load reads the counts; Tasks is the sum of its classes, so a snapshot
// taken while a record is counted still adds up.
func (t *tally) load() Counts {
	c := Counts{Finished: t.finished.Load(), Rejected: t.rejected.Load(), Failed: t.failed.Load(),
		Retries: t.retries.Load(), Broadcasts: t.broadcasts.Load(), FanOuts: t.fanouts.Load(), Branches: t.branches.Load()}
	c.Tasks = c.Finished + c.Rejected + c.Failed
	return c
}

// How records travel. A message on reach.event.<capability> carries one or
// more records, one JSON object per line, and says how many in its
// Reach-Events header. Direct-tier records are batched: a batch goes out
// when it holds eventBatchMax records or eventBatchBytes, or eventFlush after
// its first record, so a busy replica writes one stored message per many
// tasks instead of one per task. A durable task's record goes alone, with a
// message id, so a redelivery after a crash does not record it twice.
const (
	HeaderEvents    = streams.HeaderEvents
	eventBatchMax   = 128
	eventBatchBytes = 64 << 10
	eventFlush      = 100 * time.Millisecond
)

// DecodeEvents returns the records of one REACH_EVENTS message.
func DecodeEvents(data []byte) ([]Event, error) {
	var out []Event
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, len(data)+1)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var ev Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return out, fmt.Errorf("event record %d: %w", len(out)+1, err)
		}
		out = append(out, ev)
	}
	return out, sc.Err()
}

// eventLog holds this replica's unsent direct-tier records by subject.
type eventLog struct {
	mu      sync.Mutex
	pending map[string]*eventBatch
}

type eventBatch struct {
	buf []byte
	n   int
}

// recordEvent writes the feedback record of a finished task.
func (d *Dispatcher) recordEvent(t *task, start time.Time, outcome string, e *streams.Error) {
	ev := Event{
		RequestID: t.requestID, OrchestrationID: t.orchID, Capability: t.capability, Tier: "direct",
		Dispatcher: d.cfg.Name, Status: string(streams.StatusFinished), Outcome: outcome, Node: t.node, Failed: t.triedIDs,
		Attempts: t.attempts, Cost: t.spent, Start: start,
		LatencyMS: float64(time.Since(start).Microseconds()) / 1000,
		ParentID:  t.req.Header.Get(streams.HeaderParentID),
		Hedged:    t.hedged, HedgeWon: t.hedgedWon,
	}
	if e != nil {
		ev.Status, ev.Code = StatusOf(e), string(e.Code)
	}
	if !d.recordsWanted() {
		d.counts.add(ev.Count()) // counted all the same
		return
	}
	if t.view != nil && (len(t.view.Excluded) > 0 || len(t.passed) > 0) {
		ev.Excluded, ev.ExcludedTotal = d.exclusions(t, false, ExcludedInEvents)
	}
	if d.table != nil {
		ev.Candidates = d.table.Candidates(t.capability).Len()
	}
	if t.seq > 0 {
		ev.Tier = "durable"
		d.publishEvent(&ev, "event-"+t.requestID+"-"+t.req.Header.Get(streams.HeaderDLQCount))
		return
	}
	d.publishEvent(&ev, "")
}

// recordsWanted reports whether records are written at all: for
// REACH_EVENTS, or for an observer. Either way they are counted.
func (d *Dispatcher) recordsWanted() bool { return !d.cfg.NoEvents || len(d.observers) > 0 }

// StatusOf is the Reach-Status of a task that ended with e: TIMEOUT for
// the code TIMEOUT, FAILED for every other.
func StatusOf(e *streams.Error) string {
	if e.Code == streams.CodeTimeout {
		return string(streams.StatusTimeout)
	}
	return string(streams.StatusFailed)
}

// RecordEvent writes a feedback record that is not a task's own, such as
// a fan-out's or a broadcast's, batched like the direct tier's records.
// Dispatcher and Tier are filled in when empty. When the replica runs with
// NoEvents and no observer it only counts it (Stats).
func (d *Dispatcher) RecordEvent(ev Event) {
	if !d.recordsWanted() {
		d.counts.add(ev.Count())
		return
	}
	if ev.Dispatcher == "" {
		ev.Dispatcher = d.cfg.Name
	}
	if ev.Tier == "" {
		ev.Tier = "direct"
	}
	d.publishEvent(&ev, "")
}

// publishEvent counts ev, hands it to the observers and sends it on its
// capability's event subject: alone with msgID as its message id when one
// is given (deduplicated across redeliveries), else batched.
func (d *Dispatcher) publishEvent(ev *Event, msgID string) {
	d.counts.add(ev.Count())
	d.observe(ev)
	if d.cfg.NoEvents {
		return
	}
	capability := ev.Capability
	if streams.ValidateCapability(capability) != nil {
		capability = "invalid" // a BAD_REQUEST for the subject itself still leaves its record
	}
	subject := d.cfg.Subjects.Event(capability)
	if msgID != "" {
		m := nats.NewMsg(subject)
		m.Header.Set(streams.HeaderMsgID, msgID)
		m.Header.Set(HeaderEvents, "1")
		m.Data = appendEvent(nil, ev)
		d.publishEvents(m)
		return
	}
	d.events.mu.Lock()
	b := d.events.pending[subject]
	if b == nil {
		b = &eventBatch{}
		d.events.pending[subject] = b
	}
	if b.buf == nil {
		b.buf = (*eventBufs.Get().(*[]byte))[:0]
	}
	b.buf = appendEvent(b.buf, ev)
	b.n++
	var full *nats.Msg
	switch {
	case b.n >= eventBatchMax || len(b.buf) >= eventBatchBytes:
		full = takeBatch(subject, b)
	case b.n == 1:
		time.AfterFunc(eventFlush, func() { d.flushEvents(subject) })
	}
	d.events.mu.Unlock()
	if full != nil {
		d.publishEvents(full)
	}
}

// eventBufs holds batch buffers between batches: a batch's buffer is free
// again once its publish has copied it into the connection's buffer. A
// busy dispatcher would otherwise allocate a fresh 64 KB per 128 records;
// a subject with nothing pending holds none.
var eventBufs = sync.Pool{New: func() any {
	b := make([]byte, 0, eventBatchBytes+4<<10)
	return &b
}}

// takeBatch empties b into a message; the event log's lock is held.
func takeBatch(subject string, b *eventBatch) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Header.Set(HeaderEvents, strconv.Itoa(b.n))
	m.Data = b.buf
	b.buf, b.n = nil, 0 // an idle subject holds no buffer
	return m
}

// flushEvents sends the records waiting for subject, or every subject's
// when subject is "".
func (d *Dispatcher) flushEvents(subject string) {
	var out []*nats.Msg
	d.events.mu.Lock()
	for s, b := range d.events.pending {
		if b.n > 0 && (subject == "" || s == subject) {
			out = append(out, takeBatch(s, b))
		}
	}
	d.events.mu.Unlock()
	for _, m := range out {
		d.publishEvents(m)
	}
}

func (d *Dispatcher) publishEvents(m *nats.Msg) {
	if err := d.nc.PublishMsg(m); err != nil {
		d.log.Warn().Err(err).Str("subject", m.Subject).Str("records", m.Header.Get(HeaderEvents)).Msg("event records not published")
	}
	if cap(m.Data) >= eventBatchBytes { // a batch's buffer, copied by the publish
		buf := m.Data[:0]
		eventBufs.Put(&buf)
	}
}

// appendEvent appends ev as one line of JSON, as encoding/json writes it
// (the same keys and omissions), without reflection.
func appendEvent(b []byte, ev *Event) []byte {
	b = append(b, `{"request_id":`...)
	b = appendString(b, ev.RequestID)
	b = append(b, `,"orchestration_id":`...)
	b = appendString(b, ev.OrchestrationID)
	b = append(b, `,"capability":`...)
	b = appendString(b, ev.Capability)
	b = append(b, `,"tier":`...)
	b = appendString(b, ev.Tier)
	b = append(b, `,"dispatcher":`...)
	b = appendString(b, ev.Dispatcher)
	b = append(b, `,"status":`...)
	b = appendString(b, ev.Status)
	if ev.Code != "" {
		b = append(b, `,"code":`...)
		b = appendString(b, ev.Code)
	}
	b = append(b, `,"outcome":`...)
	b = appendString(b, ev.Outcome)
	b = append(b, `,"candidates":`...)
	b = strconv.AppendInt(b, int64(ev.Candidates), 10)
	if ev.Node != "" {
		b = append(b, `,"node":`...)
		b = appendString(b, ev.Node)
	}
	if len(ev.Failed) > 0 {
		b = append(b, `,"failed":[`...)
		for i, id := range ev.Failed {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, id)
		}
		b = append(b, ']')
	}
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(ev.Attempts), 10)
	if ev.Cost != 0 && !math.IsNaN(ev.Cost) && !math.IsInf(ev.Cost, 0) {
		b = append(b, `,"cost":`...)
		b = strconv.AppendFloat(b, ev.Cost, 'g', -1, 64)
	}
	b = append(b, `,"latency_ms":`...)
	b = strconv.AppendFloat(b, ev.LatencyMS, 'g', -1, 64)
	b = append(b, `,"start":"`...)
	b = ev.Start.AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	if ev.ParentID != "" {
		b = append(b, `,"parent_id":`...)
		b = appendString(b, ev.ParentID)
	}
	if ev.Kind != "" {
		b = append(b, `,"kind":`...)
		b = appendString(b, ev.Kind)
	}
	if ev.By != "" {
		b = append(b, `,"by":`...)
		b = appendString(b, ev.By)
	}
	if ev.Hedged {
		b = append(b, `,"hedged":true`...)
	}
	if ev.HedgeWon {
		b = append(b, `,"hedge_won":true`...)
	}
	if ev.Score != nil && !math.IsNaN(*ev.Score) && !math.IsInf(*ev.Score, 0) {
		b = strconv.AppendFloat(append(b, `,"score":`...), *ev.Score, 'g', -1, 64)
	}
	if len(ev.Excluded) > 0 { // a few entries: the plain encoder will do
		x, _ := json.Marshal(ev.Excluded)
		b = append(append(b, `,"excluded":`...), x...)
	}
	if ev.ExcludedTotal != 0 {
		b = strconv.AppendInt(append(b, `,"excluded_total":`...), int64(ev.ExcludedTotal), 10)
	}
	for _, f := range [...]struct {
		key string
		n   int
	}{{`,"expected":`, ev.Expected}, {`,"answered":`, ev.Answered}, {`,"succeeded":`, ev.Succeeded}} {
		if f.n != 0 {
			b = strconv.AppendInt(append(b, f.key...), int64(f.n), 10)
		}
	}
	return append(b, "}\n"...)
}

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	if !utf8.ValidString(s) {
		q, _ := json.Marshal(s) // replaces invalid bytes, as encoding/json does
		return append(b, q...)
	}
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c < 0x20:
			b = append(b, `\u00`...)
			b = append(b, "0123456789abcdef"[c>>4], "0123456789abcdef"[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
