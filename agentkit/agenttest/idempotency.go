package agenttest

import (
	"bytes"
	"context"
	"fmt"

	"github.com/nats-io/nuid"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/agent-reach/agentreach/streams"
)

// idemRecord is an outcome in REACH_IDEMPOTENCY as docs/protocol.md has it:
// msgpack {state, owner, request_id, content_type, data, error, cost}.
type idemRecord struct {
	State       string         `msgpack:"state"`
	Owner       string         `msgpack:"owner"`
	RequestID   string         `msgpack:"request_id"`
	ContentType string         `msgpack:"content_type"`
	Data        []byte         `msgpack:"data"`
	Error       *streams.Error `msgpack:"error"`
	Cost        string         `msgpack:"cost"`
}

// writeResult is the result of conformance.write.
type writeResult struct {
	Key        string `json:"key"`
	Executions *int   `json:"executions"`
}

// checkIdempotency: conformance.write twice with one key (the second as
// attempt 2 of the same request) and twice at once with another executes
// each key once, replays the same body, and leaves a done record of the
// outcome in REACH_IDEMPOTENCY. The second key is not a valid KV token, so
// it also checks the rule that hashes such keys (streams.IdempotencyKey).
// Those deliveries carry no Reach-Source; a third key comes from two
// callers (checkCallers).
func checkIdempotency(ctx context.Context, s *suite) error {
	var p problems
	retried := "conformance-" + nuid.Next()
	first, err := s.write(ctx, "", retried, "", "1")
	if err != nil {
		return err
	}
	if err := checkWrite(first, retried); err != nil {
		p.add("the first delivery of key %q: %v", retried, err)
	} else {
		again, err := s.write(ctx, "", retried, first.requestID, "2")
		switch {
		case err != nil:
			return err
		case !again.last.is(streams.StatusFinished) || !bytes.Equal(again.last.msg.Data, first.last.msg.Data):
			p.add("attempt 2 of key %q was answered %s %s, want the first outcome replayed: FINISHED %s (protocol: replay a stored outcome instead of executing again)",
				retried, again.last.status(), clip(again.last.msg.Data), clip(first.last.msg.Data))
		}
		if err := s.checkStored(ctx, "", retried, first); err != nil {
			p.add("%v", err)
		}
	}

	concurrent := "order:" + nuid.Next()
	a, b, err := s.writeTwice(ctx, concurrent)
	if err != nil {
		return err
	}
	switch err := checkWrite(a, concurrent); {
	case err != nil:
		p.add("the first of two concurrent deliveries of key %q: %v", concurrent, err)
	case !b.last.is(streams.StatusFinished) || !bytes.Equal(a.last.msg.Data, b.last.msg.Data):
		p.add("two concurrent deliveries of key %q were answered %s %s and %s %s, want one execution and its result twice",
			concurrent, a.last.status(), clip(a.last.msg.Data), b.last.status(), clip(b.last.msg.Data))
	default:
		if err := s.checkStored(ctx, "", concurrent, a); err != nil {
			p.add("%v", err)
		}
	}
	if err := s.checkCallers(ctx, &p); err != nil {
		return err
	}
	return p.err()
}

// The two callers of checkCallers: valid identity names, as Reach-Source
// holds where auth is on.
const (
	callerAlice = "conformance-alice"
	callerBob   = "conformance-bob"
)

// checkCallers: one key from two callers (Reach-Source) is two executions,
// each stored under its caller's bucket key; the first caller's retry is
// still replayed its own outcome.
func (s *suite) checkCallers(ctx context.Context, p *problems) error {
	key := "conformance-" + nuid.Next()
	alice, err := s.write(ctx, callerAlice, key, "", "1")
	if err != nil {
		return err
	}
	if err := checkWrite(alice, key); err != nil {
		p.add("the first delivery of key %q from %s: %v", key, callerAlice, err)
		return nil
	}
	bob, err := s.write(ctx, callerBob, key, "", "1")
	if err != nil {
		return err
	}
	var out writeResult
	switch err := streams.Decode(streams.ContentTypeJSON, bob.last.msg.Data, &out); {
	case !bob.last.is(streams.StatusFinished) || bob.last.msg.Header.Get(headerReplayed) != "" ||
		err != nil || out.Key != key || out.Executions == nil || *out.Executions != 2:
		p.add("key %q from %s after %s was answered %s %s (%s %q), want a second execution: FINISHED {\"key\": %q, \"executions\": 2} (protocol: the bucket key is <capability>.<caller>.<key>, the caller the delivery's Reach-Source)",
			key, callerBob, callerAlice, bob.last.status(), clip(bob.last.msg.Data), headerReplayed, bob.last.msg.Header.Get(headerReplayed), key)
	default:
		if err := s.checkStored(ctx, callerBob, key, bob); err != nil {
			p.add("%v", err)
		}
	}
	again, err := s.write(ctx, callerAlice, key, alice.requestID, "2")
	switch {
	case err != nil:
		return err
	case !again.last.is(streams.StatusFinished) || !bytes.Equal(again.last.msg.Data, alice.last.msg.Data):
		p.add("attempt 2 of key %q from %s was answered %s %s, want its own first outcome replayed: FINISHED %s",
			key, callerAlice, again.last.status(), clip(again.last.msg.Data), clip(alice.last.msg.Data))
	}
	if err := s.checkStored(ctx, callerAlice, key, alice); err != nil {
		p.add("%v", err)
	}
	return nil
}

// headerReplayed marks a replayed outcome (agentkit.HeaderReplayed).
const headerReplayed = "Reach-Replayed"

// written is one delivery of conformance.write and its final reply.
type written struct {
	requestID string
	last      reply
}

// write delivers conformance.write with idempotency key from caller ("":
// no Reach-Source), as attempt of requestID ("": a new request), and waits
// for its result.
func (s *suite) write(ctx context.Context, caller, key, requestID, attempt string) (written, error) {
	d, err := s.deliverWrite(caller, key, requestID, attempt)
	if err != nil {
		return written{}, err
	}
	defer d.close()
	return d.written(ctx)
}

// writeTwice delivers conformance.write with key twice at once, as attempts
// 1 and 2 of one request, and waits for both results.
func (s *suite) writeTwice(ctx context.Context, key string) (written, written, error) {
	one, err := s.deliverWrite("", key, "", "1")
	if err != nil {
		return written{}, written{}, err
	}
	defer one.close()
	two, err := s.deliverWrite("", key, one.requestID, "2")
	if err != nil {
		return written{}, written{}, err
	}
	defer two.close()
	a, err := one.written(ctx)
	if err != nil {
		return written{}, written{}, err
	}
	b, err := two.written(ctx)
	return a, b, err
}

func (s *suite) deliverWrite(caller, key, requestID, attempt string) (*direct, error) {
	hdr := []string{streams.HeaderIdempotencyKey, key, streams.HeaderAttempt, attempt}
	if caller != "" {
		hdr = append(hdr, streams.HeaderSource, caller)
	}
	if requestID != "" {
		hdr = append(hdr, streams.HeaderRequestID, requestID, streams.HeaderOrchestrationID, requestID)
	}
	return s.deliver(capWrite, streams.ContentTypeJSON, []byte(`{}`), hdr...)
}

// written waits for the result of a conformance.write delivery.
func (d *direct) written(ctx context.Context) (written, error) {
	r, ok := d.final(ctx, d.sent.Add(answerWithin+slack))
	if !ok {
		return written{}, fmt.Errorf("a delivery of %s with Reach-Idempotency-Key got no result within %v; saw %s", capWrite, answerWithin+slack, d.seen())
	}
	return written{requestID: d.requestID, last: r}, nil
}

// checkWrite reports what is wrong with the result of the first execution
// of key: it must be FINISHED {"key": key, "executions": 1}.
func checkWrite(w written, key string) error {
	if !w.last.is(streams.StatusFinished) {
		return fmt.Errorf("answered %s (%s), want FINISHED", w.last.status(), errorOf(w.last))
	}
	var out writeResult
	if err := streams.Decode(streams.ContentTypeJSON, w.last.msg.Data, &out); err != nil || out.Key != key || out.Executions == nil || *out.Executions != 1 {
		return fmt.Errorf("the result is %s, want {\"key\": %q, \"executions\": 1}", clip(w.last.msg.Data), key)
	}
	return nil
}

// checkStored reports what is wrong with the REACH_IDEMPOTENCY record of
// caller's key after the execution w: under <capability>.<caller>.<key>, it
// must be a done record, owned by the agent, of w's request, with w's
// content type and body.
func (s *suite) checkStored(ctx context.Context, caller, key string, w written) error {
	bucketKey := streams.IdempotencyKey(capWrite, caller, key)
	e, err := s.idem.Get(ctx, bucketKey)
	if err != nil {
		return fmt.Errorf("no record of key %q under %s %q (protocol: store the outcome before replying): %v", key, streams.BucketIdempotency, bucketKey, err)
	}
	var rec idemRecord
	if err := msgpack.Unmarshal(e.Value(), &rec); err != nil {
		return fmt.Errorf("the %s record %q is not msgpack {state, owner, request_id, content_type, data, error, cost}: %v", streams.BucketIdempotency, bucketKey, err)
	}
	want := idemRecord{State: "done", Owner: s.env.AgentID, RequestID: w.requestID, ContentType: streams.ContentTypeJSON, Data: w.last.msg.Data}
	if rec.State != want.State || rec.Owner != want.Owner || rec.RequestID != want.RequestID || rec.ContentType != want.ContentType ||
		!bytes.Equal(rec.Data, want.Data) || rec.Error != nil {
		return fmt.Errorf("the %s record %q is {state %q, owner %q, request_id %q, content_type %q, data %s, error %v}, want {state %q, owner %q, request_id %q, content_type %q, data %s}",
			streams.BucketIdempotency, bucketKey, rec.State, rec.Owner, rec.RequestID, rec.ContentType, clip(rec.Data), rec.Error,
			want.State, want.Owner, want.RequestID, want.ContentType, clip(want.Data))
	}
	return nil
}
