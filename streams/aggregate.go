package streams

import (
	"encoding/json"
	"errors"

	"github.com/vmihailenco/msgpack/v5"
)

// Wire types of broadcast and fan-out (docs/reference.md, Broadcast and
// fan-out). Their fields are encoded under the json tags in both content
// types, like every body.

// Raw is a value embedded as it is in a body of one content type: raw JSON
// inside a JSON body, one raw msgpack value inside a msgpack body (a
// payload, a branch's result). A Raw holds bytes of the content type of
// the body it came in or goes out in.
type Raw []byte

var errRawNotJSON = errors.New("streams: raw value is not JSON")

// MarshalJSON writes r as it is; empty is null.
func (r Raw) MarshalJSON() ([]byte, error) {
	if len(r) == 0 {
		return []byte("null"), nil
	}
	if !json.Valid(r) {
		return nil, errRawNotJSON
	}
	return r, nil
}

// UnmarshalJSON keeps the value's bytes.
func (r *Raw) UnmarshalJSON(b []byte) error {
	*r = append((*r)[:0], b...)
	return nil
}

// EncodeMsgpack writes r as it is; empty is nil.
func (r Raw) EncodeMsgpack(enc *msgpack.Encoder) error {
	if len(r) == 0 {
		return enc.EncodeNil()
	}
	return msgpack.RawMessage(r).EncodeMsgpack(enc)
}

// DecodeMsgpack keeps the value's bytes.
func (r *Raw) DecodeMsgpack(dec *msgpack.Decoder) error {
	b, err := dec.DecodeRaw()
	*r = Raw(b)
	return err
}

// FanOutRequest is the body of a request on reach.fanout.
type FanOutRequest struct {
	Branches []FanOutBranch `json:"branches"`
	// Mode is "all", "quorum" (the default) or "first".
	Mode string `json:"mode,omitempty"`
	// Quorum is a fraction of the branches below 1, or a count from 1 on;
	// nil means 0.6.
	Quorum *float64 `json:"quorum,omitempty"`
	// MaxWaitMS bounds the fan-out; nil or 0 means the largest branch
	// timeout, or the deadline.
	MaxWaitMS *int64 `json:"max_wait_ms,omitempty"`
}

// FanOutBranch is one branch of a FanOutRequest.
type FanOutBranch struct {
	Name       string `json:"name"`
	Capability string `json:"capability"`
	Agent      string `json:"agent,omitempty"`
	Payload    Raw    `json:"payload,omitempty"`
	TimeoutMS  int64  `json:"timeout_ms,omitempty"`
}

// Aggregate is the reply of a broadcast or fan-out.
type Aggregate struct {
	// Code and Message are set when the completion policy was not met
	// (INCOMPLETE), so that a caller reading only {"code","message"} of an
	// error reply still learns why.
	Code    Code   `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
	// Expected counts the branches (for a broadcast, the instances asked);
	// Answered those whose instance replied, with a result or an error of
	// its own; Succeeded those that finished.
	Expected  int  `json:"expected"`
	Answered  int  `json:"answered"`
	Succeeded int  `json:"succeeded"`
	Complete  bool `json:"complete"`
	// Replies holds one entry per branch that answered, in request order
	// (for a broadcast, by instance id).
	Replies []BranchReply `json:"replies"`
	// Missing holds the branches without an answer of their own.
	Missing []Missing `json:"missing"`
}

// BranchReply is what one branch of an Aggregate answered.
type BranchReply struct {
	Name   string `json:"name"`
	Node   string `json:"node,omitempty"`
	Status string `json:"status"`
	// Result is the branch's result in the aggregate's content type.
	Result    Raw     `json:"result,omitempty"`
	Error     *Error  `json:"error,omitempty"`
	LatencyMS float64 `json:"latency_ms"`
	Attempts  int     `json:"attempts"`
}

// Missing is a branch of an Aggregate without an answer of its own: none in
// time (TIMEOUT), nothing to deliver it to (NO_AGENT, CIRCUIT_OPEN, …), or
// cancelled once a first-mode fan-out was decided (CANCELLED).
type Missing struct {
	Name    string `json:"name"`
	Reason  string `json:"reason"`
	Message string `json:"message,omitempty"`
}
