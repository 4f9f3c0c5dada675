package agenttest

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/agent-reach/agentreach/streams"
)

// slowInput is the payload of conformance.slow (and, with MS alone, of
// conformance.busy).
type slowInput struct {
	MS      int64 `json:"ms"`
	EveryMS int64 `json:"every_ms,omitempty"`
}

// Payloads of conformance.echo, in both content types: nested values,
// non-ASCII text, and in msgpack bytes that JSON cannot carry, so that a
// reply that re-encodes instead of echoing shows.
var (
	echoJSON    = []byte(`{"text":"héllo, wörld","n":[1,2.5,-3,null],"nested":{"ok":true,"empty":{}}}`)
	echoMsgpack = mustEncode(streams.ContentTypeMsgpack, map[string]any{
		"text": "héllo, wörld", "n": []any{1, 2.5, -3, nil}, "bin": []byte{0, 1, 2, 0xff},
	})
)

// checkSlept reports what is wrong with the result of a conformance.slow
// task of ms: it must be {"slept_ms": ms}.
func checkSlept(r reply, ms int64) error {
	var out struct {
		SleptMS *int64 `json:"slept_ms"`
	}
	if err := streams.Decode(streams.ContentType(r.msg.Header, r.msg.Data), r.msg.Data, &out); err != nil || out.SleptMS == nil || *out.SleptMS != ms {
		return fmt.Errorf("the result is %s, want {\"slept_ms\": %d}", clip(r.msg.Data), ms)
	}
	return nil
}

// ackTaskMS is how long the ack rule's conformance.slow task takes: longer
// than ackWithin, so that its result cannot stand in for the ACK.
const ackTaskMS = 1500

// checkAck: a direct delivery of conformance.slow is answered ACKED (or
// PROCESSING) within ackWithin, and its result comes after.
func checkAck(ctx context.Context, s *suite) error {
	d, err := s.deliver(capSlow, streams.ContentTypeJSON, mustEncode(streams.ContentTypeJSON, slowInput{MS: ackTaskMS}))
	if err != nil {
		return err
	}
	defer d.close()
	resultBy := d.sent.Add(ackTaskMS*time.Millisecond + slack)
	first, ok := d.next(ctx, d.sent.Add(ackWithin))
	switch {
	case !ok:
		d.final(ctx, resultBy) // to say what came, if anything
		return fmt.Errorf("no ACKED, PROCESSING or result within %v of the delivery of %s {\"ms\": %d} (protocol: answer ACKED at once); saw %s",
			ackWithin, capSlow, ackTaskMS, d.seen())
	case first.is(streams.StatusFinished):
		return fmt.Errorf("the result came %v after the delivery, before the %dms of %s {\"ms\": %d} could pass; saw %s",
			round(first.after), ackTaskMS, capSlow, ackTaskMS, d.seen())
	case first.terminal():
		return fmt.Errorf("%s {\"ms\": %d} was answered %s (%s), want ACKED and then FINISHED", capSlow, ackTaskMS, first.status(), errorOf(first))
	case !first.is(streams.StatusAcked) && !first.is(streams.StatusProcessing):
		return fmt.Errorf("the first reply is %s, want ACKED", first.status())
	}
	last, ok := d.final(ctx, resultBy)
	switch {
	case !ok:
		return fmt.Errorf("no result within %v of the delivery of %s {\"ms\": %d}; saw %s", resultBy.Sub(d.sent), capSlow, ackTaskMS, d.seen())
	case !last.is(streams.StatusFinished):
		return fmt.Errorf("%s {\"ms\": %d} ended %s (%s), want FINISHED; saw %s", capSlow, ackTaskMS, last.status(), errorOf(last), d.seen())
	}
	return checkSlept(last, ackTaskMS)
}

// The processing rule's task: longer than the dispatcher's call timeout,
// with PROCESSING well within it.
const (
	processingTaskMS  = 2500
	processingEveryMS = 300
)

// checkProcessing: through the dispatcher, whose call timeout is 1 s, a
// 2.5 s conformance.slow task with PROCESSING every 300 ms finishes on its
// first attempt.
func checkProcessing(ctx context.Context, s *suite) error {
	if err := s.dispatch(ctx, false); err != nil {
		return err
	}
	in := slowInput{MS: processingTaskMS, EveryMS: processingEveryMS}
	res, err := s.call(ctx, capSlow, streams.ContentTypeJSON, mustEncode(streams.ContentTypeJSON, in))
	if err != nil {
		return err
	}
	r := reply{msg: res}
	task := fmt.Sprintf("%s {\"ms\": %d, \"every_ms\": %d} through the dispatcher (call timeout %v, restarted by every PROCESSING)",
		capSlow, processingTaskMS, processingEveryMS, CallTimeout)
	if !r.is(streams.StatusFinished) {
		return fmt.Errorf("%s ended %s (%s), want FINISHED (protocol: PROCESSING extends the per-call deadline)", task, r.status(), errorOf(r))
	}
	if a := res.Header.Get(streams.HeaderAttempt); a != "1" {
		return fmt.Errorf("%s finished on attempt %s, want 1: the dispatcher gave up on an earlier delivery, so PROCESSING did not come every %dms", task, a, processingEveryMS)
	}
	return checkSlept(r, processingTaskMS)
}

// checkContentType: conformance.echo answers with the request's body and
// content type, JSON and msgpack, direct and through the dispatcher, with
// and without a Content-Type from the caller.
func checkContentType(ctx context.Context, s *suite) error {
	cases := []struct {
		name     string
		dispatch bool
		header   string // the caller's Content-Type
		want     string
		body     []byte
	}{
		{"direct, JSON", false, streams.ContentTypeJSON, streams.ContentTypeJSON, echoJSON},
		{"direct, msgpack", false, streams.ContentTypeMsgpack, streams.ContentTypeMsgpack, echoMsgpack},
		{"through the dispatcher, JSON", true, streams.ContentTypeJSON, streams.ContentTypeJSON, echoJSON},
		{"through the dispatcher, msgpack", true, streams.ContentTypeMsgpack, streams.ContentTypeMsgpack, echoMsgpack},
		{"through the dispatcher, JSON without Content-Type", true, "", streams.ContentTypeJSON, echoJSON},
		{"through the dispatcher, msgpack without Content-Type", true, "", streams.ContentTypeMsgpack, echoMsgpack},
	}
	if err := s.dispatch(ctx, false); err != nil {
		return err
	}
	var p problems
	for _, c := range cases {
		var r reply
		if c.dispatch {
			res, err := s.call(ctx, capEcho, c.header, c.body)
			if err != nil {
				p.add("%s: %v", c.name, err)
				continue
			}
			r = reply{msg: res}
		} else {
			d, err := s.deliver(capEcho, c.header, c.body)
			if err != nil {
				return err
			}
			var ok bool
			r, ok = d.final(ctx, d.sent.Add(answerWithin))
			d.close()
			if !ok {
				p.add("%s: no result within %v; saw %s", c.name, answerWithin, d.seen())
				continue
			}
		}
		switch got := r.msg.Header.Get(streams.HeaderContentType); {
		case !r.is(streams.StatusFinished):
			p.add("%s: answered %s (%s), want FINISHED", c.name, r.status(), errorOf(r))
		case got != c.want:
			p.add("%s: the reply's Content-Type is %q, want the request's %q", c.name, got, c.want)
		case !bytes.Equal(r.msg.Data, c.body):
			p.add("%s: the body came back changed: sent %s, got %s", c.name, clip(c.body), clip(r.msg.Data))
		}
	}
	return p.err()
}

// checkBizReject: through the dispatcher, conformance.reject is FAILED with
// BIZ_REJECT and a {"code","message"} body in the request's content type,
// on the first and only attempt.
func checkBizReject(ctx context.Context, s *suite) error {
	if err := s.dispatch(ctx, false); err != nil {
		return err
	}
	var p problems
	for _, ct := range []string{streams.ContentTypeJSON, streams.ContentTypeMsgpack} {
		res, err := s.call(ctx, capReject, ct, mustEncode(ct, map[string]any{"n": 1}))
		if err != nil {
			p.add("%s: %v", ct, err)
			continue
		}
		if err := checkError(reply{msg: res}, streams.CodeBizReject, ct); err != nil {
			p.add("%s in %s: %v", capReject, ct, err)
		}
		if a := res.Header.Get(streams.HeaderAttempt); a != "1" {
			p.add("%s in %s: Reach-Attempt is %q, want \"1\" (a rejection is never retried)", capReject, ct, a)
		}
	}
	return p.err()
}

// checkBadRequest: a direct delivery of conformance.slow whose payload does
// not decode is FAILED BAD_REQUEST, and an echo afterwards is still served.
func checkBadRequest(ctx context.Context, s *suite) error {
	cases := []struct {
		contentType string
		body        []byte
	}{
		{streams.ContentTypeJSON, []byte(`{"ms":`)},
		{streams.ContentTypeMsgpack, []byte{0xc1}}, // a byte msgpack never uses
	}
	var p problems
	for _, c := range cases {
		d, err := s.deliver(capSlow, c.contentType, c.body)
		if err != nil {
			return err
		}
		r, ok := d.final(ctx, d.sent.Add(answerWithin))
		d.close()
		if !ok {
			p.add("%s with the %s payload %s: no answer within %v; saw %s", capSlow, c.contentType, clip(c.body), answerWithin, d.seen())
		} else if err := checkError(r, streams.CodeBadRequest, c.contentType); err != nil {
			p.add("%s with the %s payload %s: %v", capSlow, c.contentType, clip(c.body), err)
		}
	}
	d, err := s.deliver(capEcho, streams.ContentTypeJSON, echoJSON)
	if err != nil {
		return err
	}
	defer d.close()
	r, ok := d.final(ctx, d.sent.Add(answerWithin))
	if !ok || !r.is(streams.StatusFinished) || !bytes.Equal(r.msg.Data, echoJSON) {
		p.add("after the malformed payloads, %s was not served (want FINISHED with the body sent); saw %s", capEcho, d.seen())
	}
	return p.err()
}

// busyTaskMS is how long each conformance.busy task of the busy rule holds
// its slot.
const busyTaskMS = 1000

// checkBusy: max_concurrent + 1 concurrent direct deliveries of
// conformance.busy: at least one is answered TARGET_BUSY at once (its first
// reply, within ackWithin), every other FINISHED with {}.
func checkBusy(ctx context.Context, s *suite) error {
	n := s.rec.MaxConcurrent + 1
	body := mustEncode(streams.ContentTypeJSON, slowInput{MS: busyTaskMS})
	ds := make([]*direct, 0, n)
	defer func() {
		for _, d := range ds {
			d.close()
		}
	}()
	for range n {
		d, err := s.deliver(capBusy, streams.ContentTypeJSON, body)
		if err != nil {
			return err
		}
		ds = append(ds, d)
	}
	var p problems
	busy := 0
	for i, d := range ds {
		r, ok := d.final(ctx, d.sent.Add(busyTaskMS*time.Millisecond+slack))
		switch {
		case !ok:
			p.add("delivery %d of %d got no answer within %v; saw %s", i+1, n, busyTaskMS*time.Millisecond+slack, d.seen())
		case r.msg.Header.Get(streams.HeaderError) == string(streams.CodeTargetBusy):
			busy++
			if len(d.got) > 1 || r.after > ackWithin {
				p.add("delivery %d of %d: TARGET_BUSY must come at once, instead of ACKED; saw %s", i+1, n, d.seen())
			} else if err := checkError(r, streams.CodeTargetBusy, streams.ContentTypeJSON); err != nil {
				p.add("delivery %d of %d: %v", i+1, n, err)
			}
		case !r.is(streams.StatusFinished):
			p.add("delivery %d of %d ended %s (%s), want FINISHED or TARGET_BUSY", i+1, n, r.status(), errorOf(r))
		default:
			var out map[string]any
			if err := streams.Decode(streams.ContentTypeJSON, r.msg.Data, &out); err != nil || len(out) != 0 {
				p.add("delivery %d of %d: the result is %s, want {}", i+1, n, clip(r.msg.Data))
			}
		}
	}
	if busy == 0 {
		p.add("none of %d concurrent deliveries of %s {\"ms\": %d} was answered TARGET_BUSY, with max_concurrent %d (protocol: answer FAILED / TARGET_BUSY at once when every slot is busy)",
			n, capBusy, busyTaskMS, s.rec.MaxConcurrent)
	}
	return p.err()
}

// checkUnknownCapability: a direct delivery of a capability the agent does
// not offer is FAILED NO_AGENT at once.
func checkUnknownCapability(ctx context.Context, s *suite) error {
	d, err := s.deliver(capAbsent, streams.ContentTypeJSON, []byte(`{}`))
	if err != nil {
		return err
	}
	defer d.close()
	r, ok := d.next(ctx, d.sent.Add(ackWithin))
	if !ok {
		d.final(ctx, d.sent.Add(answerWithin+slack))
		return fmt.Errorf("a delivery of %s, which the agent does not offer, got no answer within %v (want FAILED NO_AGENT at once); saw %s",
			capAbsent, ackWithin, d.seen())
	}
	if err := checkError(r, streams.CodeNoAgent, streams.ContentTypeJSON); err != nil {
		return fmt.Errorf("a delivery of %s, which the agent does not offer: %v (want FAILED NO_AGENT at once); saw %s", capAbsent, err, d.seen())
	}
	return nil
}

// checkReplyHeaders: through the dispatcher, with results relayed and with
// direct answers offered, a FINISHED and a FAILED reply carry Reach-Status,
// Reach-Node (the agent), Reach-Attempt, the Reach-Request-Id and
// Reach-Orchestration-Id sent, Content-Type, and no Reach-Active.
func checkReplyHeaders(ctx context.Context, s *suite) error {
	var p problems
	for _, relay := range []bool{true, false} {
		if err := s.dispatch(ctx, relay); err != nil {
			return err
		}
		mode := "direct answers offered"
		if relay {
			mode = "results relayed"
		}
		for _, c := range []struct {
			capability string
			status     streams.Status
		}{{capEcho, streams.StatusFinished}, {capReject, streams.StatusFailed}} {
			requestID, orch := streams.NewRequestID(), "conformance-orch-"+nuid.Next()
			res, err := s.call(ctx, c.capability, streams.ContentTypeJSON, []byte(`{"n":1}`),
				streams.HeaderRequestID, requestID, streams.HeaderOrchestrationID, orch)
			if err != nil {
				p.add("%s, %s: %v", c.capability, mode, err)
				continue
			}
			want := [][2]string{
				{streams.HeaderStatus, string(c.status)},
				{streams.HeaderNode, s.env.AgentID},
				{streams.HeaderAttempt, "1"},
				{streams.HeaderRequestID, requestID},
				{streams.HeaderOrchestrationID, orch},
				{streams.HeaderContentType, streams.ContentTypeJSON},
			}
			for _, h := range want {
				if got := res.Header.Get(h[0]); got != h[1] {
					p.add("%s, %s: %s is %q, want %q", c.capability, mode, h[0], got, h[1])
				}
			}
			if v := res.Header.Values(streams.HeaderActive); len(v) > 0 {
				p.add("%s, %s: the caller's reply carries %s %q, which is for dispatchers only", c.capability, mode, streams.HeaderActive, v[0])
			}
		}
	}
	return p.err()
}

// The cancel rule's task: long enough to be cancelled while it runs.
const cancelTaskMS = 1500

// checkCancel: a CANCEL for a running delivery of conformance.slow, and one
// for a delivery the agent never had, leave the agent serving: an echo is
// answered at once after both. Whatever the cancelled delivery is answered
// with afterwards (its result, CANCELLED, nothing) is correct — the
// dispatcher drops it — as is ignoring the cancel.
func checkCancel(ctx context.Context, s *suite) error {
	d, err := s.deliver(capSlow, streams.ContentTypeJSON, mustEncode(streams.ContentTypeJSON, slowInput{MS: cancelTaskMS}))
	if err != nil {
		return err
	}
	defer d.close()
	// Cancelled once it runs (an ACKED), or after ackWithin all the same:
	// an agent that never acknowledges fails the ack rule, not this one.
	if first, ok := d.next(ctx, d.sent.Add(ackWithin)); ok && first.terminal() {
		return fmt.Errorf("%s {\"ms\": %d} ended at once (%s) instead of running to be cancelled; saw %s", capSlow, cancelTaskMS, first.status(), d.seen())
	}
	for _, c := range []struct{ delivery, requestID string }{
		{d.sub.Subject, d.requestID},              // the running delivery
		{s.nc.NewInbox(), streams.NewRequestID()}, // one the agent never had
	} {
		m := nats.NewMsg(s.env.Subjects.Agent(s.env.AgentID))
		m.Header.Set(streams.HeaderStatus, string(streams.StatusCancel))
		m.Header.Set(streams.HeaderRequestID, c.requestID)
		m.Header.Set(streams.HeaderAttempt, "1")
		m.Header.Set(streams.HeaderCapability, capSlow)
		m.Header.Set(streams.HeaderDelivery, c.delivery)
		if err := s.nc.PublishMsg(m); err != nil {
			return fmt.Errorf("send a CANCEL: %w", err)
		}
	}
	echo, err := s.deliver(capEcho, streams.ContentTypeJSON, []byte(`{"after":"cancel"}`))
	if err != nil {
		return err
	}
	defer echo.close()
	r, ok := echo.final(ctx, echo.sent.Add(answerWithin))
	if !ok || !r.is(streams.StatusFinished) || string(r.msg.Data) != `{"after":"cancel"}` {
		return fmt.Errorf("after a CANCEL (protocol: a message without reply subject, never answered; ignoring it is correct) the agent did not answer an echo within %v; saw %s",
			answerWithin, echo.seen())
	}
	return nil
}
