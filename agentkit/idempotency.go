package agentkit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

// HeaderReplayed marks a result served from REACH_IDEMPOTENCY instead of a
// new execution.
const HeaderReplayed = "Reach-Replayed"

// Idempotency record states.
const (
	idemPending = "pending"
	idemDone    = "done"
)

// idemRecord is what REACH_IDEMPOTENCY holds per key (msgpack): a claim by
// the executing instance, then the outcome to replay.
type idemRecord struct {
	State       string         `msgpack:"state"`
	Owner       string         `msgpack:"owner"`
	RequestID   string         `msgpack:"request_id"`
	ContentType string         `msgpack:"content_type,omitempty"`
	Data        []byte         `msgpack:"data,omitempty"`
	Error       *streams.Error `msgpack:"error,omitempty"`
	Cost        string         `msgpack:"cost,omitempty"`
}

// idempotency executes each key at most once across every instance.
type idempotency struct {
	kv    jetstream.KeyValue
	reg   *registry.Registry
	owner string
	check time.Duration // how often a waiter checks the owner is alive
	// executing holds the keys this instance has claimed and not settled:
	// a claim of its own that is not in here lost its outcome.
	executing sync.Map
}

// errInDoubt is returned when the instance executing a key died before
// recording its outcome: the side effect may or may not have happened, so
// the key is not executed again.
var errInDoubt = errors.New("outcome in doubt")

// begin claims key for this instance. It returns (nil, nil) when the caller
// should execute, a stored outcome to replay, or an error. A key claimed by a
// live instance is waited for until it is done or ctx ends.
func (id *idempotency) begin(ctx context.Context, key, requestID string) (*idemRecord, error) {
	claim, _ := msgpack.Marshal(&idemRecord{State: idemPending, Owner: id.owner, RequestID: requestID})
	for {
		_, err := id.kv.Create(ctx, key, claim)
		if err == nil {
			id.executing.Store(key, struct{}{})
			return nil, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, fmt.Errorf("claim idempotency key: %w", err)
		}
		rec, err := id.wait(ctx, key)
		if rec != nil || err != nil {
			return rec, err
		}
		// The claim was released (the owner gave the task back): try again.
	}
}

// Polling a pending claim (wait): the first look after pollFirst, each
// next one twice as late, up to pollMax. A KV get is a direct get of one
// key, which an agent's permissions allow for the capabilities it serves; a
// watch would be a JetStream consumer, whose deliver subject its creator
// picks, and agents may create none (docs/security.md).
const (
	pollFirst = 20 * time.Millisecond
	pollMax   = 250 * time.Millisecond
)

// wait polls key until its outcome is stored (returned), the claim is
// released (nil, nil), its owner is gone (errInDoubt), or ctx ends.
func (id *idempotency) wait(ctx context.Context, key string) (*idemRecord, error) {
	poll := time.NewTimer(pollFirst)
	defer poll.Stop()
	tick := time.NewTicker(id.check)
	defer tick.Stop()
	next := pollFirst
	var owner string
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
			if owner == id.owner {
				if _, running := id.executing.Load(key); !running {
					return nil, fmt.Errorf("%w: this instance claimed the key and did not store its outcome (the store failed, or it restarted under the same id); it is not executed again", errInDoubt)
				}
				continue
			}
			if owner == "" {
				continue
			}
			if _, err := id.reg.Get(ctx, owner); errors.Is(err, registry.ErrNotFound) {
				return nil, fmt.Errorf("%w: instance %s died while executing this key; it is not executed again", errInDoubt, owner)
			}
		case <-poll.C:
			e, err := id.kv.Get(ctx, key)
			switch {
			case errors.Is(err, jetstream.ErrKeyNotFound): // deleted or purged: the claim was released
				return nil, nil
			case err != nil && ctx.Err() != nil:
				return nil, ctx.Err()
			case err != nil:
				return nil, fmt.Errorf("read idempotency key: %w", err)
			}
			rec, err := decodeIdemRecord(e.Value())
			if err != nil {
				return nil, fmt.Errorf("unreadable idempotency record %s: %w", key, err)
			}
			if rec.State == idemDone {
				return &rec, nil
			}
			owner = rec.Owner
			next = min(2*next, pollMax)
			poll.Reset(next)
		}
	}
}

// decodeIdemRecord reads a stored record, which any agent may have
// written: checked to be one well-formed msgpack value first, so that no
// container header sizes an allocation by itself.
func decodeIdemRecord(b []byte) (idemRecord, error) {
	var rec idemRecord
	if !streams.ValidMsgpack(b) {
		return rec, errors.New("not one well-formed msgpack value")
	}
	if err := msgpack.Unmarshal(b, &rec); err != nil {
		return rec, err
	}
	if rec.Error != nil && rec.Error.Code == "" {
		return rec, errors.New("a stored error without a code") // it would replay as no error
	}
	return rec, nil
}

// release gives a claim back without an outcome (the task never ran), so a
// retry may execute it.
func (id *idempotency) release(ctx context.Context, key string) error {
	defer id.executing.Delete(key)
	return retryKV(ctx, func(ctx context.Context) error { return id.kv.Delete(ctx, key) })
}

// store records the outcome of key for replay.
func (id *idempotency) store(ctx context.Context, key string, rec *idemRecord) error {
	defer id.executing.Delete(key)
	rec.State, rec.Owner = idemDone, id.owner
	b, err := msgpack.Marshal(rec)
	if err != nil {
		return err
	}
	return retryKV(ctx, func(ctx context.Context) error { _, err := id.kv.Put(ctx, key, b); return err })
}

// retryKV runs op until it succeeds or ctx ends, backing off from 50 ms to
// 1 s: an outcome is worth waiting for across a server restart or a leader
// election, since without it the key ends in doubt.
func retryKV(ctx context.Context, op func(context.Context) error) error {
	wait := 50 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := op(actx)
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// replayMsg turns a stored outcome into a reply.
func replayMsg(subject, requestID, node string, rec *idemRecord) *nats.Msg {
	var m *nats.Msg
	if rec.Error != nil {
		m = streams.ErrorReply(subject, rec.ContentType, requestID, rec.Error)
	} else {
		m = streams.StatusReply(subject, streams.StatusFinished, requestID)
		m.Header.Set(streams.HeaderContentType, rec.ContentType)
		m.Data = rec.Data
	}
	m.Header.Set(streams.HeaderNode, node)
	m.Header.Set(HeaderReplayed, "true")
	if rec.Cost != "" {
		m.Header.Set(streams.HeaderCost, rec.Cost)
	}
	return m
}
