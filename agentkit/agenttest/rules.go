package agenttest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agent-reach/agentreach/streams"
)

// The agent under test: its type and the capabilities it serves
// (docs/conformance.md).
const (
	agentType = "conformance"
	capBusy   = "conformance.busy"
	capEcho   = "conformance.echo"
	capReject = "conformance.reject"
	capSlow   = "conformance.slow"
	capWrite  = "conformance.write"
	// capAbsent is a capability no conformance agent offers.
	capAbsent = "conformance.absent"
	// maxSlots is the largest max_concurrent the suite accepts.
	maxSlots = 16
)

// capabilities are the capabilities of a conformance agent, sorted.
var capabilities = []string{capBusy, capEcho, capReject, capSlow, capWrite}

// Bounds of the checks.
const (
	registerWithin = 10 * time.Second // the first put of the record
	ackWithin      = time.Second      // ACKED, or an immediate answer such as TARGET_BUSY
	answerWithin   = 2 * time.Second  // the result of a task that takes no time
	slack          = 3 * time.Second  // beyond a task's own duration, for its result
)

// rule is one requirement of docs/conformance.md: its id (the section's
// name), a title, and the check, which returns what was wrong.
type rule struct {
	id, title string
	check     func(ctx context.Context, s *suite) error
}

// Rule ids the suite refers to.
const ruleRegister = "register"

// rules are checked in this order. heartbeat comes late, so that the puts it
// judges have happened and it need not wait; drain comes last, as it stops
// the agent.
var rules = []rule{
	{ruleRegister, "registers under its instance id, subscribed first, with the conformance record", checkRegister},
	{"ack", "answers ACKED at once, before the result", checkAck},
	{"processing", "PROCESSING keeps a task alive past the dispatcher's call timeout", checkProcessing},
	{"content-type", "answers in the request's content type, JSON and msgpack", checkContentType},
	{"biz-reject", "a rejection is FAILED with BIZ_REJECT and a {code, message} body, not retried", checkBizReject},
	{"bad-request", "a payload that does not decode is BAD_REQUEST, and the agent keeps serving", checkBadRequest},
	{"busy", "a delivery beyond max_concurrent is TARGET_BUSY at once", checkBusy},
	{"idempotency", "an idempotency key executes once per caller; its stored outcome is replayed", checkIdempotency},
	{"unknown-capability", "a capability not offered is NO_AGENT at once", checkUnknownCapability},
	{"reply-headers", "the caller's reply carries the Reach-* headers, relayed or direct", checkReplyHeaders},
	{"cancel", "a CANCEL, for a running delivery or one it never had, leaves the agent serving", checkCancel},
	{"micro", "answers the NATS micro protocol as a service of its type, if it does (optional)", checkMicro},
	{"stream", "with Reach-Stream: 1, echo streams an array's elements as CHUNKs in order, then the whole result with Reach-Chunks", checkStream},
	{"heartbeat", "puts its record every heartbeat_ms, by the server's clock", checkHeartbeat},
	{"drain", "on SIGTERM: status draining, every task finished, key deleted, exit 0", checkDrain},
}

// problems collects what a check found wrong, so one message names all of
// it.
type problems []string

func (p *problems) add(format string, args ...any) { *p = append(*p, fmt.Sprintf(format, args...)) }

func (p problems) err() error {
	if len(p) == 0 {
		return nil
	}
	return errors.New(strings.Join(p, "; "))
}

// mustEncode encodes one of the suite's own payloads; they always encode.
func mustEncode(contentType string, v any) []byte {
	b, err := streams.Encode(contentType, v)
	if err != nil {
		panic(fmt.Sprintf("agenttest: encode %T: %v", v, err))
	}
	return b
}

// errorOf describes the error a reply carries: "BIZ_REJECT: message", or
// what is wrong with its body.
func errorOf(r reply) string {
	if r.msg.Header.Get(streams.HeaderError) == "" {
		return "no Reach-Error"
	}
	var e streams.Error
	if err := streams.Decode(streams.ContentType(r.msg.Header, r.msg.Data), r.msg.Data, &e); err != nil {
		return fmt.Sprintf("a body that does not decode as {\"code\",\"message\"}: %v", err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// checkError reports what is wrong with an error reply that should carry
// code: Reach-Status FAILED, Reach-Error code, and a {"code","message"} body
// in contentType with the same code and a message.
func checkError(r reply, code streams.Code, contentType string) error {
	var p problems
	if !r.is(streams.StatusFailed) {
		p.add("Reach-Status is %q, want %q", r.msg.Header.Get(streams.HeaderStatus), streams.StatusFailed)
	}
	if got := r.msg.Header.Get(streams.HeaderError); got != string(code) {
		p.add("Reach-Error is %q, want %q", got, code)
	}
	if got := r.msg.Header.Get(streams.HeaderContentType); got != contentType {
		p.add("Content-Type is %q, want the request's %q", got, contentType)
	}
	var e streams.Error
	switch err := streams.Decode(contentType, r.msg.Data, &e); {
	case err != nil:
		p.add("the body does not decode as {\"code\",\"message\"}: %v", err)
	case e.Code != code || e.Message == "":
		p.add("the body is %s, want {\"code\": %q, \"message\": <why>}", clip(r.msg.Data), code)
	}
	return p.err()
}

// clip shows at most 200 bytes of a body.
func clip(b []byte) string {
	const max = 200
	if len(b) > max {
		return fmt.Sprintf("%q…", b[:max])
	}
	return fmt.Sprintf("%q", b)
}
