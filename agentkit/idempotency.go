package agentkit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
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
	Incarnation string         `msgpack:"incarnation,omitempty"` // the run of Owner that claimed it
	RequestID   string         `msgpack:"request_id"`
	ContentType string         `msgpack:"content_type,omitempty"`
	Data        []byte         `msgpack:"data,omitempty"`
	Error       *streams.Error `msgpack:"error,omitempty"`
	Cost        string         `msgpack:"cost,omitempty"`
}

// idempotency executes each key at most once across every instance.
type idempotency struct {
	kv          jetstream.KeyValue
	reg         *registry.Registry
	owner       string
	incarnation string        // this run of the owner (registry.Record.Incarnation)
	check       time.Duration // how often a waiter checks the owner is alive
	log         zerolog.Logger
	// executing holds the keys this instance claims, has claimed and not
	// settled, or is releasing: a claim of its own that is not in here
	// lost its outcome. It is also the per-key lock of this instance: one
	// task at a time claims a key here.
	executing sync.Map
	// unsure holds the keys whose claim create failed without an answer:
	// it may have been stored. Nothing ran under such a claim, so this
	// instance may take it as its own (reconcile) or delete it (abandon).
	unsure sync.Map
}

// errInDoubt is returned when the instance executing a key died before
// recording its outcome: the side effect may or may not have happened, so
// the key is not executed again.
var errInDoubt = errors.New("outcome in doubt")

// errClaimed says another execution holds the key: wait for it.
var errClaimed = errors.New("claimed by another execution")

// claimRetry bounds how long a claim create that fails without an answer
// (the store has no leader) is retried and read back before the task is
// answered TARGET_BUSY; PROCESSING goes out meanwhile.
const claimRetry = 10 * time.Second

// newIncarnation names one run of an agent process.
func newIncarnation() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// begin claims key for this instance. It returns (nil, nil) when the caller
// should execute, a stored outcome to replay, or an error. A key claimed by a
// live instance is waited for until it is done or ctx ends.
func (id *idempotency) begin(ctx context.Context, key, requestID string) (*idemRecord, error) {
	claim, _ := msgpack.Marshal(&idemRecord{State: idemPending, Owner: id.owner, Incarnation: id.incarnation, RequestID: requestID})
	for {
		if _, busy := id.executing.LoadOrStore(key, struct{}{}); !busy {
			err := id.claim(ctx, key, claim)
			if err == nil {
				return nil, nil // executing holds key until store or release
			}
			id.executing.Delete(key)
			if !errors.Is(err, errClaimed) {
				return nil, err
			}
		}
		// Another execution holds the key (here or elsewhere): wait for
		// its outcome.
		rec, err := id.wait(ctx, key)
		if rec != nil || err != nil {
			return rec, err
		}
		// The claim was released (the owner gave the task back): try again.
	}
}

// claim creates key's claim, retrying a create that gets no answer for up
// to claimRetry: such a create may have been stored, so the key is read
// back first (reconciled) and a claim of this run that nothing executed
// under is taken as this task's. nil: execute; errClaimed: another holds
// it; else the store stayed unavailable (the claim, if it landed, is
// deleted in the background once the store answers).
func (id *idempotency) claim(ctx context.Context, key string, claim []byte) error {
	rctx, cancel := context.WithTimeout(ctx, claimRetry)
	defer cancel()
	wait := 50 * time.Millisecond
	for {
		actx, acancel := context.WithTimeout(rctx, 2*time.Second)
		_, err := id.kv.Create(actx, key, claim)
		acancel()
		switch {
		case err == nil:
			id.unsure.Delete(key)
			return nil
		case errors.Is(err, jetstream.ErrKeyExists):
			if id.adopt(rctx, key) {
				return nil
			}
			return errClaimed
		}
		// No answer: the claim may or may not be stored.
		id.unsure.Store(key, struct{}{})
		id.log.Warn().Err(err).Str("key", key).Msg("idempotency claim not answered; reading it back")
		if id.adopt(rctx, key) {
			return nil
		}
		select {
		case <-rctx.Done():
			go id.abandon(key)
			return fmt.Errorf("claim idempotency key: %w", err)
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// adopt reports whether key holds a pending claim of this run whose
// create got no answer (unsure): nothing executed under it, so the task
// holding the key's lock takes it as its own.
func (id *idempotency) adopt(ctx context.Context, key string) bool {
	if _, ok := id.unsure.Load(key); !ok {
		return false
	}
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	e, err := id.kv.Get(actx, key)
	if err != nil {
		return false
	}
	rec, err := decodeIdemRecord(e.Value())
	if err != nil || !id.mine(rec) {
		return false
	}
	id.unsure.Delete(key)
	id.log.Info().Str("key", key).Msg("idempotency claim reconciled: stored though its answer was lost")
	return true
}

// mine reports whether rec is a pending claim of this run of the instance.
func (id *idempotency) mine(rec idemRecord) bool {
	return rec.State == idemPending && rec.Owner == id.owner && rec.Incarnation == id.incarnation
}

// abandonFor bounds how long a claim whose create got no answer is
// looked after, to delete it once the store answers again.
const abandonFor = time.Minute

// abandon deletes key's claim of this run whose create got no answer,
// once the store answers — unless a task of this instance took the key
// meanwhile (it adopts the claim). Without it, the claim would make every
// later attempt wait for this live instance, which is not executing it.
func (id *idempotency) abandon(key string) {
	ctx, cancel := context.WithTimeout(context.Background(), abandonFor)
	defer cancel()
	err := retryKV(ctx, func(ctx context.Context) error {
		if _, busy := id.executing.LoadOrStore(key, struct{}{}); busy {
			return nil // a task of this instance holds the key: it adopts or waits
		}
		defer id.executing.Delete(key)
		if _, ok := id.unsure.Load(key); !ok {
			return nil // adopted and settled meanwhile
		}
		e, err := id.kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			id.unsure.Delete(key)
			return nil
		case err != nil:
			return err
		}
		if rec, err := decodeIdemRecord(e.Value()); err != nil || !id.mine(rec) {
			id.unsure.Delete(key)
			return nil // not this run's claim
		}
		if err := id.kv.Delete(ctx, key, jetstream.LastRevision(e.Revision())); err != nil {
			return err
		}
		id.unsure.Delete(key)
		id.log.Info().Str("key", key).Msg("idempotency claim whose create got no answer released")
		return nil
	})
	if err != nil {
		id.log.Warn().Err(err).Str("key", key).Msg("idempotency claim whose create got no answer may be left pending")
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
	var owner, incarnation string
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
			if owner == id.owner {
				if incarnation != id.incarnation {
					return nil, fmt.Errorf("%w: an earlier run of this instance (it restarted under the same id) claimed the key and did not store its outcome; it is not executed again", errInDoubt)
				}
				if _, running := id.executing.Load(key); running {
					continue
				}
				if _, ok := id.unsure.Load(key); ok {
					return nil, nil // a claim of this run nothing executed under: take it (adopt)
				}
				return nil, fmt.Errorf("%w: this instance claimed the key and did not store its outcome (the store failed); it is not executed again", errInDoubt)
			}
			if owner == "" {
				continue
			}
			e, err := id.reg.Get(ctx, owner)
			if errors.Is(err, registry.ErrNotFound) {
				return nil, fmt.Errorf("%w: instance %s died while executing this key; it is not executed again", errInDoubt, owner)
			}
			if err == nil && incarnation != "" && e.Incarnation != "" && e.Incarnation != incarnation {
				return nil, fmt.Errorf("%w: instance %s restarted (incarnation %s, the claim's %s) while executing this key; it is not executed again",
					errInDoubt, owner, e.Incarnation, incarnation)
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
			owner, incarnation = rec.Owner, rec.Incarnation
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
	rec.State, rec.Owner, rec.Incarnation = idemDone, id.owner, id.incarnation
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
