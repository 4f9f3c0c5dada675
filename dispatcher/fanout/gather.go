package fanout

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/tracing"
	"github.com/agent-reach/agentreach/streams"
)

// Reply is the aggregate answer of a fan-out or broadcast, with the
// completion policy it was decided by.
type Reply struct {
	streams.Aggregate
	mode   Mode
	quorum Quorum
}

// Job is one branch ready to run: its task message and where it goes.
type Job struct {
	// Name names the branch in the Reply.
	Name string
	// Capability is what the branch calls.
	Capability string
	// Msg is the branch's task, as Dispatcher.Call takes it: its headers
	// (request id, orchestration and parent ids, deadline, idempotency key)
	// and body. It is the task's from then on.
	Msg *nats.Msg
	// Timeout bounds the branch (0: only the gather's max wait).
	Timeout time.Duration
}

// outcome is what one branch came back with.
type outcome struct {
	i       int
	reply   *nats.Msg
	latency time.Duration
	late    bool   // its context ended first: max_wait, the deadline, or a first-mode decision
	decided bool   // cancelled because a first-mode fan-out was decided
	why     string // why it was cancelled then; "" for a first-mode decision
}

// Gather runs jobs through d within maxWait (and ctx), and builds the reply
// in contentType by the completion policy: what a fan-out, a broadcast and
// a workflow's parallel step do. Branches still running when it decides are
// cancelled; it returns once every one has come back, which
// Dispatcher.Call makes prompt after a cancel. Each branch's Result in the
// reply is in contentType.
func Gather(ctx context.Context, d *dispatcher.Dispatcher, jobs []Job, mode Mode, quorum Quorum, maxWait time.Duration,
	contentType string, opts ...dispatcher.CallOption) *Reply {
	ctx, cancel := context.WithTimeout(ctx, maxWait)
	defer cancel()
	first, decide := context.WithCancel(ctx) // ends the others once a first-mode fan-out has its success
	defer decide()
	out := make(chan outcome, len(jobs))
	for i, j := range jobs {
		bctx, bcancel := first, context.CancelFunc(func() {})
		if j.Timeout > 0 {
			bctx, bcancel = context.WithTimeout(first, j.Timeout)
		}
		span := tracing.Branch(j.Msg.Header, j.Name, j.Capability)
		go func() {
			defer bcancel()
			start := time.Now()
			reply := d.Call(bctx, j.Capability, j.Msg, opts...)
			tracing.End(span, streams.ErrorFromMessage(reply))
			out <- outcome{i: i, reply: reply, latency: time.Since(start), late: bctx.Err() != nil,
				decided: first.Err() != nil && ctx.Err() == nil}
		}()
	}
	got := make([]outcome, len(jobs))
	for range jobs {
		o := <-out
		got[o.i] = o
		if mode == ModeFirst && o.reply.Header.Get(streams.HeaderStatus) == string(streams.StatusFinished) {
			decide()
		}
	}
	r := &Reply{Aggregate: streams.Aggregate{Expected: len(jobs), Replies: []streams.BranchReply{}, Missing: []streams.Missing{}}}
	for i, o := range got {
		r.add(jobs[i].Name, o, contentType, maxWait)
	}
	r.complete(mode, quorum)
	return r
}

// add files one branch's outcome under replies or missing.
func (r *Reply) add(name string, o outcome, contentType string, maxWait time.Duration) {
	h := o.reply.Header
	code := streams.Code(h.Get(streams.HeaderError))
	br := streams.BranchReply{Name: name, Node: h.Get(streams.HeaderNode), Status: h.Get(streams.HeaderStatus),
		LatencyMS: float64(o.latency.Microseconds()) / 1000, Attempts: int(streams.IntHeader(h, streams.HeaderAttempt))}
	switch {
	case code == "":
		br.Result = rawValue(contentType, o.reply)
		r.Replies = append(r.Replies, br)
		r.Answered++
		r.Succeeded++
	case answeredBy(code):
		br.Error = streams.ErrorFromMessage(o.reply)
		r.Replies = append(r.Replies, br)
		r.Answered++
	case o.decided && code == streams.CodeCancelled:
		why := o.why
		if why == "" {
			why = "another branch answered first"
		}
		r.Missing = append(r.Missing, streams.Missing{Name: name, Reason: string(streams.CodeCancelled), Message: why})
	case code == streams.CodeDeadlineExceeded || o.late && code == streams.CodeCancelled:
		// Out of time: its own, the fan-out's max wait or the deadline.
		r.Missing = append(r.Missing, streams.Missing{Name: name, Reason: string(streams.CodeTimeout),
			Message: fmt.Sprintf("no answer within its time (max wait %v)", maxWait)})
	default:
		m := streams.Missing{Name: name, Reason: string(code)}
		if e := streams.ErrorFromMessage(o.reply); e != nil {
			m.Message = e.Message
		}
		r.Missing = append(r.Missing, m)
	}
}

// answeredBy reports whether an error code is an instance's own answer
// (the branch replied) rather than the dispatcher's finding that none did.
func answeredBy(c streams.Code) bool {
	switch c {
	case streams.CodeBizReject, streams.CodeBadRequest, streams.CodeInternal, streams.CodePayloadTooLarge, streams.CodeUnauthorized:
		return true
	}
	return false
}

// complete applies the completion policy.
func (r *Reply) complete(mode Mode, q Quorum) {
	r.mode, r.quorum = mode, q
	r.Code, r.Message = "", ""
	need := r.Expected
	switch mode {
	case ModeQuorum:
		need = q.Need(r.Expected)
	case ModeFirst:
		need = 1
	}
	r.Complete = r.Expected > 0 && r.Succeeded >= need
	if !r.Complete {
		r.Code = streams.CodeIncomplete
		r.Message = fmt.Sprintf("%d of %d branches succeeded; %s needs %d", r.Succeeded, r.Expected, mode, need)
	}
}

// rawValue returns a branch's result body as a value to embed in a reply
// of contentType: as it is when it is in that type, converted when the
// agent answered in the other one, nil when empty.
func rawValue(contentType string, m *nats.Msg) streams.Raw {
	if len(m.Data) == 0 {
		return nil
	}
	have := streams.ContentType(m.Header, m.Data)
	if have == contentType {
		return streams.Raw(m.Data)
	}
	var v any
	if streams.Decode(have, m.Data, &v) != nil {
		v = string(m.Data)
	}
	b, err := streams.Encode(contentType, v)
	if err != nil {
		return nil
	}
	return streams.Raw(b)
}

// encode returns the reply in contentType within maxPayload (less room for
// headers): when it is too large, the largest results give way, each
// branch then reported PAYLOAD_TOO_LARGE, until it fits.
func (r *Reply) encode(contentType string, maxPayload int64) ([]byte, error) {
	for {
		b, err := r.encodeOnce(contentType)
		if err != nil {
			return nil, err
		}
		if maxPayload <= 0 || int64(len(b)) <= maxPayload-headerRoom {
			return b, nil
		}
		i := r.largest()
		if i < 0 {
			return nil, streams.NewError(streams.CodePayloadTooLarge, "the aggregate of %d branches exceeds max_payload %d without any result", r.Expected, maxPayload)
		}
		br := &r.Replies[i]
		size := len(br.Result)
		br.Result = nil
		br.Error = streams.NewError(streams.CodePayloadTooLarge, "result of %d bytes left out: the aggregate exceeds the server's max_payload of %d", size, maxPayload)
		br.Status = string(streams.StatusFailed)
		r.Succeeded--
		r.complete(r.mode, r.quorum)
	}
}

// encodeOnce encodes the reply in contentType: JSON without reflection
// (Aggregate.AppendJSON), a broadcast's aggregate holding a reply per
// instance.
func (r *Reply) encodeOnce(contentType string) ([]byte, error) {
	if contentType != streams.ContentTypeJSON {
		return streams.Encode(contentType, r)
	}
	b, err := r.AppendJSON(make([]byte, 0, 256+len(r.Replies)*128))
	if err != nil {
		return nil, streams.NewError(streams.CodeInternal, "encode JSON: %v", err)
	}
	return b, nil
}

// headerRoom is what the aggregate's headers may take of max_payload.
const headerRoom = 4 << 10

func (r *Reply) largest() int {
	best, size := -1, 0
	for i, br := range r.Replies {
		if n := len(br.Result); n > size {
			best, size = i, n
		}
	}
	return best
}

// message builds the reply to send: FINISHED or FAILED/INCOMPLETE with the
// aggregate headers.
func (r *Reply) message(contentType, requestID, orchID string, body []byte) *nats.Msg {
	m := nats.NewMsg("")
	m.Data = body
	m.Header.Set(streams.HeaderContentType, contentType)
	m.Header.Set(streams.HeaderRequestID, requestID)
	m.Header.Set(streams.HeaderOrchestrationID, orchID)
	m.Header.Set(streams.HeaderAttempt, "1")
	m.Header.Set(streams.HeaderExpected, strconv.Itoa(r.Expected))
	m.Header.Set(streams.HeaderAnswered, strconv.Itoa(r.Answered))
	if r.Complete {
		m.Header.Set(streams.HeaderStatus, string(streams.StatusFinished))
	} else {
		m.Header.Set(streams.HeaderStatus, string(streams.StatusFailed))
		m.Header.Set(streams.HeaderError, string(streams.CodeIncomplete))
	}
	return m
}

// sortByName orders a broadcast's replies and missing entries by instance
// id.
func (r *Reply) sortByName() {
	sort.Slice(r.Replies, func(i, j int) bool { return r.Replies[i].Name < r.Replies[j].Name })
	sort.Slice(r.Missing, func(i, j int) bool { return r.Missing[i].Name < r.Missing[j].Name })
}
