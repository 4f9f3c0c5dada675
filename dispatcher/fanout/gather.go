package fanout

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/streams"
)

// Reply is the aggregate answer of a fan-out or broadcast (DESIGN §8), in
// the request's content type.
type Reply struct {
	// Code and Message are set when the completion policy was not met
	// (INCOMPLETE), so that a caller reading only {"code","message"} of an
	// error reply still learns why.
	Code    streams.Code `json:"code,omitempty"`
	Message string       `json:"message,omitempty"`
	// Expected counts the branches (for a broadcast, the instances asked);
	// Answered those that replied, with a result or an error of their own;
	// Succeeded those that FINISHED.
	Expected  int  `json:"expected"`
	Answered  int  `json:"answered"`
	Succeeded int  `json:"succeeded"`
	Complete  bool `json:"complete"`
	// Replies holds one entry per branch that answered, in request order
	// (for a broadcast, by instance id).
	Replies []BranchReply `json:"replies"`
	// Missing holds the branches that did not answer, with the reason.
	Missing []Missing `json:"missing"`

	mode   Mode // the completion policy applied (not on the wire)
	quorum Quorum
}

// BranchReply is what one branch answered.
type BranchReply struct {
	Name   string `json:"name"`
	Node   string `json:"node,omitempty"`
	Status string `json:"status"`
	// Result is the branch's result as a value: raw JSON inside a JSON
	// reply, a raw msgpack value inside a msgpack reply.
	Result    any            `json:"result,omitempty"`
	Error     *streams.Error `json:"error,omitempty"`
	LatencyMS float64        `json:"latency_ms"`
	Attempts  int            `json:"attempts"`
}

// Missing is a branch without an answer of its own: none in time
// (TIMEOUT), nothing to deliver it to (NO_AGENT, CIRCUIT_OPEN, …), or
// cancelled once a first-mode fan-out was decided (CANCELLED).
type Missing struct {
	Name    string `json:"name"`
	Reason  string `json:"reason"`
	Message string `json:"message,omitempty"`
}

// job is one branch ready to run: its task message and where it goes.
type job struct {
	name       string
	capability string
	msg        *nats.Msg
	timeout    time.Duration
}

// outcome is what one branch came back with.
type outcome struct {
	i       int
	reply   *nats.Msg
	latency time.Duration
	late    bool // its context ended first: max_wait, the deadline, or a first-mode decision
	decided bool // cancelled because a first-mode fan-out was decided
}

// gather runs jobs through d within maxWait (and ctx), and builds the reply
// in contentType by the completion policy. Branches still running when it
// decides are cancelled; it returns once every one has come back, which
// Dispatcher.Call makes prompt after a cancel.
func gather(ctx context.Context, d *dispatcher.Dispatcher, jobs []job, mode Mode, quorum Quorum, maxWait time.Duration,
	contentType string, opts ...dispatcher.CallOption) *Reply {
	ctx, cancel := context.WithTimeout(ctx, maxWait)
	defer cancel()
	first, decide := context.WithCancel(ctx) // ends the others once a first-mode fan-out has its success
	defer decide()
	out := make(chan outcome, len(jobs))
	for i, j := range jobs {
		bctx, bcancel := first, context.CancelFunc(func() {})
		if j.timeout > 0 {
			bctx, bcancel = context.WithTimeout(first, j.timeout)
		}
		go func() {
			defer bcancel()
			start := time.Now()
			reply := d.Call(bctx, j.capability, j.msg, opts...)
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
	r := &Reply{Expected: len(jobs), Replies: []BranchReply{}, Missing: []Missing{}}
	for i, o := range got {
		r.add(jobs[i].name, o, contentType, maxWait)
	}
	r.complete(mode, quorum)
	return r
}

// add files one branch's outcome under replies or missing.
func (r *Reply) add(name string, o outcome, contentType string, maxWait time.Duration) {
	h := o.reply.Header
	code := streams.Code(h.Get(streams.HeaderError))
	br := BranchReply{Name: name, Node: h.Get(streams.HeaderNode), Status: h.Get(streams.HeaderStatus),
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
		r.Missing = append(r.Missing, Missing{Name: name, Reason: string(streams.CodeCancelled), Message: "another branch answered first"})
	case o.late && (code == streams.CodeCancelled || code == streams.CodeDeadlineExceeded):
		r.Missing = append(r.Missing, Missing{Name: name, Reason: string(streams.CodeTimeout),
			Message: fmt.Sprintf("no answer within its time (max wait %v)", maxWait)})
	default:
		m := Missing{Name: name, Reason: string(code)}
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
func rawValue(contentType string, m *nats.Msg) any {
	if len(m.Data) == 0 {
		return nil
	}
	have := streams.ContentType(m.Header, m.Data)
	if have != contentType {
		var v any
		if streams.Decode(have, m.Data, &v) != nil {
			return string(m.Data)
		}
		return v
	}
	if contentType == streams.ContentTypeMsgpack {
		return msgpack.RawMessage(m.Data)
	}
	return json.RawMessage(m.Data)
}

// encode returns the reply in contentType within maxPayload (less room for
// headers): when it is too large, the largest results give way, each
// branch then reported PAYLOAD_TOO_LARGE, until it fits.
func (r *Reply) encode(contentType string, maxPayload int64) ([]byte, error) {
	for {
		b, err := streams.Encode(contentType, r)
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
		size := resultSize(br.Result)
		br.Result = nil
		br.Error = streams.NewError(streams.CodePayloadTooLarge, "result of %d bytes left out: the aggregate exceeds the server's max_payload of %d", size, maxPayload)
		br.Status = string(streams.StatusFailed)
		r.Succeeded--
		r.complete(r.mode, r.quorum)
	}
}

// headerRoom is what the aggregate's headers may take of max_payload.
const headerRoom = 4 << 10

func (r *Reply) largest() int {
	best, size := -1, 0
	for i, br := range r.Replies {
		if n := resultSize(br.Result); n > size {
			best, size = i, n
		}
	}
	return best
}

func resultSize(v any) int {
	switch x := v.(type) {
	case json.RawMessage:
		return len(x)
	case msgpack.RawMessage:
		return len(x)
	case string:
		return len(x)
	}
	if v == nil {
		return 0
	}
	b, _ := json.Marshal(v)
	return len(b)
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
