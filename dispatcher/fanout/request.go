package fanout

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/agent-reach/agentreach/streams"
)

// Limits and defaults of a fan-out request.
const (
	// MaxBranches bounds the branches of one fan-out.
	MaxBranches = 256
	// DefaultQuorum is the share of branches that must succeed in quorum
	// mode when the request names none: the seeds' partial threshold.
	DefaultQuorum = 0.6
)

// Mode is a completion policy.
type Mode string

// Completion policies.
const (
	// ModeAll is met when every branch succeeded (broadcast's default).
	ModeAll Mode = "all"
	// ModeQuorum is met when a quorum of branches succeeded (fan-out's
	// default, quorum 0.6).
	ModeQuorum Mode = "quorum"
	// ModeFirst is met by the first success; the other branches are
	// cancelled then.
	ModeFirst Mode = "first"
)

// Quorum is how many branches must succeed in quorum mode: a fraction of
// them (0 < Fraction < 1, rounded up) or a count (Count ≥ 1).
type Quorum struct {
	Fraction float64
	Count    int
}

// Need returns how many successes of n branches the quorum asks for.
func (q Quorum) Need(n int) int {
	if q.Count > 0 {
		return q.Count
	}
	f := q.Fraction
	if f == 0 {
		f = DefaultQuorum
	}
	return int(math.Ceil(f * float64(n)))
}

func (q Quorum) String() string {
	if q.Count > 0 {
		return strconv.Itoa(q.Count)
	}
	return strconv.FormatFloat(q.Fraction, 'g', -1, 64)
}

// NewQuorum reads a quorum given as a number: below 1 a fraction of the
// branches, a whole number from 1 on a count; anything else is an error
// saying what is wanted.
func NewQuorum(v float64) (Quorum, error) {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0) || v <= 0:
		return Quorum{}, fmt.Errorf("quorum %v: want a fraction between 0 and 1 (0.6) or a count of branches (3)", v)
	case v < 1:
		return Quorum{Fraction: v}, nil
	case v != math.Trunc(v) || v > MaxBranches*64:
		return Quorum{}, fmt.Errorf("quorum %v: a count must be a whole number of branches", v)
	}
	return Quorum{Count: int(v)}, nil
}

// ParseQuorum reads the Reach-Quorum header: "0.6" (a fraction) or "3"
// (a count).
func ParseQuorum(v string) (Quorum, *streams.Error) {
	f, err := strconv.ParseFloat(v, 64)
	if err == nil {
		var q Quorum
		if q, err = NewQuorum(f); err == nil {
			return q, nil
		}
	}
	return Quorum{}, streams.NewError(streams.CodeBadRequest, "header %s %q: want a fraction between 0 and 1 (0.6) or a count (3)", streams.HeaderQuorum, v)
}

// Branch is one task of a fan-out.
type Branch struct {
	// Name identifies the branch in the reply (an id: letters, digits, '_'
	// and '-').
	Name string
	// Capability is what the branch calls.
	Capability string
	// Agent, when set, sends the branch to this instance only (unicast).
	Agent string
	// Payload is the branch's body, in the fan-out request's content type;
	// empty when the request gave none.
	Payload []byte
	// Timeout bounds the branch (0: the fan-out's max wait); it is also the
	// per-call timeout the branch asks for (Reach-Timeout).
	Timeout time.Duration
}

// Request is a decoded fan-out body.
type Request struct {
	Branches []Branch
	Mode     Mode
	Quorum   Quorum
	// MaxWait bounds the whole fan-out; 0 means the largest branch timeout,
	// or the fan-out's deadline when no branch has one.
	MaxWait time.Duration
}

// DecodeRequest reads and validates a fan-out body of contentType. Every
// problem is a BAD_REQUEST naming the field: no branches, too many, a
// branch without a name or with a duplicate one, an invalid capability or
// agent id, a negative timeout, an unknown mode, a quorum that is no
// fraction or count, or one larger than the branches.
func DecodeRequest(contentType string, body []byte) (*Request, *streams.Error) {
	var (
		req *Request
		err error
	)
	var w streams.FanOutRequest
	switch contentType {
	case streams.ContentTypeJSON:
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err = dec.Decode(&w); err == nil && dec.More() {
			err = errors.New("more than one JSON value")
		}
	case streams.ContentTypeMsgpack:
		if !streams.ValidMsgpack(body) { // first: a container header must not size an allocation by itself
			err = errors.New("not one well-formed msgpack value")
			break
		}
		dec := msgpack.NewDecoder(bytes.NewReader(body))
		dec.SetCustomStructTag("json")
		dec.DisallowUnknownFields(true)
		err = dec.Decode(&w)
	default:
		err = fmt.Errorf("unsupported content type %q", contentType)
	}
	if err == nil {
		req, err = validate(&w)
	}
	if err != nil {
		return nil, streams.NewError(streams.CodeBadRequest, "fan-out: %v", err)
	}
	return req, nil
}

func validate(w *streams.FanOutRequest) (*Request, error) {
	n := len(w.Branches)
	switch {
	case n == 0:
		return nil, errors.New("branches: at least one is required")
	case n > MaxBranches:
		return nil, fmt.Errorf("branches: %d, more than the %d allowed", n, MaxBranches)
	}
	req := &Request{Mode: Mode(w.Mode), Branches: make([]Branch, n)}
	switch req.Mode {
	case "":
		req.Mode = ModeQuorum
	case ModeAll, ModeQuorum, ModeFirst:
	default:
		return nil, fmt.Errorf("mode %q: want %s, %s or %s", w.Mode, ModeAll, ModeQuorum, ModeFirst)
	}
	if w.Quorum != nil {
		q, err := NewQuorum(*w.Quorum)
		if err != nil {
			return nil, err
		}
		if q.Count > n {
			return nil, fmt.Errorf("quorum %d: more than the %d branches", q.Count, n)
		}
		req.Quorum = q
	}
	if w.MaxWaitMS != nil {
		if *w.MaxWaitMS < 0 {
			return nil, fmt.Errorf("max_wait_ms %d: must not be negative", *w.MaxWaitMS)
		}
		req.MaxWait = time.Duration(min(*w.MaxWaitMS, maxMS)) * time.Millisecond
	}
	seen := make(map[string]int, n)
	for i, b := range w.Branches {
		field := fmt.Sprintf("branches[%d]", i)
		if streams.ValidateInstanceID(b.Name) != nil {
			return nil, fmt.Errorf("%s.name %q: want 1 to %d letters, digits, '_' and '-'", field, b.Name, streams.MaxNameLength)
		}
		if j, dup := seen[b.Name]; dup {
			return nil, fmt.Errorf("%s.name: %q is also the name of branches[%d]", field, b.Name, j)
		}
		seen[b.Name] = i
		if err := streams.ValidateCapability(b.Capability); err != nil {
			return nil, fmt.Errorf("%s.capability: %w", field, err)
		}
		if b.Agent != "" {
			if err := streams.ValidateInstanceID(b.Agent); err != nil {
				return nil, fmt.Errorf("%s.agent: %w", field, err)
			}
		}
		if b.TimeoutMS < 0 {
			return nil, fmt.Errorf("%s.timeout_ms %d: must not be negative", field, b.TimeoutMS)
		}
		req.Branches[i] = Branch{Name: b.Name, Capability: b.Capability, Agent: b.Agent, Payload: []byte(b.Payload),
			Timeout: time.Duration(min(b.TimeoutMS, maxMS)) * time.Millisecond}
	}
	return req, nil
}

// maxMS caps millisecond fields so that they convert to a Duration: a day.
const maxMS = 24 * 60 * 60 * 1000
