// Package idem executes each idempotency key at most once across every
// agent instance, through REACH_IDEMPOTENCY (docs/protocol.md,
// Idempotency): a create-only claim, the outcome stored before the reply,
// waiting for another execution's outcome, claims reconciled after a
// create without answer, and a claim of a dead or restarted owner in
// doubt.
package idem

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

// Idempotency record states.
const (
	StatePending = "pending"
	StateDone    = "done"
)

// Record is what REACH_IDEMPOTENCY holds per key (msgpack): a claim by
// the executing instance, then the outcome to replay.
type Record struct {
	State       string         `msgpack:"state"`
	Owner       string         `msgpack:"owner"`
	Incarnation string         `msgpack:"incarnation,omitempty"` // the run of Owner that claimed it
	RequestID   string         `msgpack:"request_id"`
	ContentType string         `msgpack:"content_type,omitempty"`
	Data        []byte         `msgpack:"data,omitempty"`
	Error       *streams.Error `msgpack:"error,omitempty"`
	Cost        string         `msgpack:"cost,omitempty"`
}

// Store executes each key at most once across every instance.
type Store struct {
	KV          jetstream.KeyValue
	Reg         *registry.Registry
	Owner       string
	Incarnation string        // this run of the owner (registry.Record.Incarnation)
	Check       time.Duration // how often a waiter checks the owner is alive
	// MaxRetrying bounds the claims retried at once while the store does
	// not answer (0: no bound); a claim beyond it gives up at its first
	// unanswered create. Each one retried holds its task's slot for up to
	// claimRetry, so without a bound a store without a leader takes every
	// slot of the agent, and calls that need no claim are refused too.
	MaxRetrying int
	// Done ends what is looked after in the background — unanswered
	// claims (abandon), outcomes not stored in time (settle): the agent's
	// stop. Until then each is looked after however long the store stays
	// unavailable; nil bounds an abandon to abandonFor and settles nothing
	// late.
	Done     <-chan struct{}
	Log      zerolog.Logger
	retrying atomic.Int64
	// executing holds the keys this instance claims, has claimed and not
	// settled, or is releasing: a claim of its own that is not in here
	// lost its outcome. It is also the per-key lock of this instance: one
	// task at a time claims a key here.
	executing sync.Map
	// unsure holds the keys whose claim create failed without an answer:
	// it may have been stored. Nothing ran under such a claim, so this
	// instance may take it as its own (reconcile) or delete it (abandon).
	unsure sync.Map
	// abandoning holds the keys an abandon looks after: one per key.
	abandoning sync.Map
}

// ErrInDoubt is returned when the instance executing a key died before
// recording its outcome: the side effect may or may not have happened, so
// the key is not executed again.
var ErrInDoubt = errors.New("outcome in doubt")

// errClaimed says another execution holds the key: wait for it.
var errClaimed = errors.New("claimed by another execution")

// claimRetry bounds how long a claim create that fails without an answer
// (the store has no leader) is retried and read back before the task is
// answered TARGET_BUSY; PROCESSING goes out meanwhile.
const claimRetry = 10 * time.Second

// NewIncarnation names one run of an agent process.
func NewIncarnation() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Begin claims key for this instance. It returns (nil, nil) when the caller
// should execute, a stored outcome to replay, or an error. A key claimed by a
// live instance is waited for until it is done or ctx ends.
func (id *Store) Begin(ctx context.Context, key, requestID string) (*Record, error) {
	claim, _ := msgpack.Marshal(&Record{State: StatePending, Owner: id.Owner, Incarnation: id.Incarnation, RequestID: requestID})
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
			// A claim of this run whose create got no answer, not
			// adopted (the wait ended first): deleted once the store
			// answers, or every later attempt waits for this live owner.
			id.lookAfter(key)
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
func (id *Store) claim(ctx context.Context, key string, claim []byte) error {
	rctx, cancel := context.WithTimeout(ctx, claimRetry)
	defer cancel()
	wait := 50 * time.Millisecond
	reserved := false // counted in retrying
	for {
		actx, acancel := context.WithTimeout(rctx, 2*time.Second)
		_, err := id.KV.Create(actx, key, claim)
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
		// No answer: the claim may or may not be stored (even "no
		// responders" after the client's own retries: a chaos run found
		// such a claim stored).
		id.unsure.Store(key, claim)
		if !reserved {
			if id.MaxRetrying > 0 && id.retrying.Add(1) > int64(id.MaxRetrying) {
				id.retrying.Add(-1)
				id.lookAfter(key)
				return fmt.Errorf("claim idempotency key: %w (%d claims already wait for the store)", err, id.MaxRetrying)
			}
			reserved = true
			if id.MaxRetrying > 0 {
				defer id.retrying.Add(-1)
			}
		}
		id.Log.Warn().Err(err).Str("key", key).Msg("idempotency claim not answered; reading it back")
		if id.adopt(rctx, key) {
			return nil
		}
		select {
		case <-rctx.Done():
			id.lookAfter(key)
			return fmt.Errorf("claim idempotency key: %w", err)
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// adopt reports whether key holds a pending claim of this run whose
// create got no answer (unsure): nothing executed under it, so the task
// holding the key's lock takes it as its own.
func (id *Store) adopt(ctx context.Context, key string) bool {
	if _, ok := id.unsure.Load(key); !ok {
		return false
	}
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	e, err := id.KV.Get(actx, key)
	if err != nil {
		return false
	}
	rec, err := Decode(e.Value())
	if err != nil || !id.mine(rec) {
		return false
	}
	id.unsure.Delete(key)
	id.Log.Info().Str("key", key).Msg("idempotency claim reconciled: stored though its answer was lost")
	return true
}

// mine reports whether rec is a pending claim of this run of the instance.
func (id *Store) mine(rec Record) bool {
	return rec.State == StatePending && rec.Owner == id.Owner && rec.Incarnation == id.Incarnation
}

// abandonFor bounds how long a claim whose create got no answer is
// looked after, to delete it once the store answers again, by a Store
// without Done.
const abandonFor = time.Minute

// lookAfterContext bounds what is looked after in the background (an
// abandon, a late outcome): until Done, or for abandonFor
// without it.
func (id *Store) lookAfterContext() (context.Context, context.CancelFunc) {
	if id.Done == nil {
		return context.WithTimeout(context.Background(), abandonFor)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-id.Done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// lookAfter starts an abandon of key if a create of this run got no
// answer (unsure) and no abandon looks after it yet.
func (id *Store) lookAfter(key string) {
	if _, ok := id.unsure.Load(key); !ok {
		return
	}
	if _, looked := id.abandoning.LoadOrStore(key, struct{}{}); looked {
		return
	}
	go func() {
		defer id.abandoning.Delete(key)
		id.abandon(key)
	}()
}

// errHeld says a task of this instance holds a key that abandon looks
// after.
var errHeld = errors.New("a task of this instance holds the key")

// abandon deletes key's claim of this run whose create got no answer,
// once the store answers — unless a task of this instance adopted it
// meanwhile. Without it, the claim would make every later attempt at
// another instance wait for this live one, which is not executing it,
// until the task's deadline (a durable task's is an hour), its
// PROCESSING keeping the dispatcher's delivery alive.
func (id *Store) abandon(key string) {
	ctx, cancel := id.lookAfterContext()
	defer cancel()
	err := retryKV(ctx, func(ctx context.Context) error {
		if _, busy := id.executing.LoadOrStore(key, struct{}{}); busy {
			if _, ok := id.unsure.Load(key); !ok {
				return nil // adopted by the task holding it
			}
			// Its holder may let go without adopting the claim — the task
			// that started this abandon and has yet to drop the key, or one
			// whose own create or read back went unanswered — so look again.
			id.Log.Debug().Str("key", key).Msg("idempotency claim whose create got no answer: a task of this instance holds the key; looking again")
			return errHeld
		}
		defer id.executing.Delete(key)
		if _, ok := id.unsure.Load(key); !ok {
			return nil // adopted and settled meanwhile
		}
		e, err := id.KV.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			return id.confirmFree(ctx, key)
		case err != nil:
			return err
		}
		if rec, err := Decode(e.Value()); err != nil || !id.mine(rec) {
			id.unsure.Delete(key)
			return nil // not this run's claim
		}
		if err := id.KV.Delete(ctx, key, jetstream.LastRevision(e.Revision())); err != nil {
			return err
		}
		id.unsure.Delete(key)
		id.Log.Info().Str("key", key).Msg("idempotency claim whose create got no answer released")
		return nil
	})
	if err != nil {
		id.Log.Warn().Err(err).Str("key", key).Msg("idempotency claim whose create got no answer may be left pending")
	}
}

// errBehind says a read found no claim the store holds: the replica that
// answered is behind its leader.
var errBehind = errors.New("the replica read is behind its leader")

// confirmFree settles an unanswered claim that a read did not find. A read
// is a direct get, which any replica answers, also one that has not yet
// applied a create its leader took just before stepping down: that claim
// is committed by the next leader, after the read. Only the leader can say
// the key is free, so the claim is created again: stored, it is this
// run's and is deleted at once; refused as existing, the read was behind
// and abandon looks again.
func (id *Store) confirmFree(ctx context.Context, key string) error {
	claim, _ := id.unsure.Load(key)
	b, _ := claim.([]byte)
	rev, err := id.KV.Create(ctx, key, b)
	switch {
	case errors.Is(err, jetstream.ErrKeyExists):
		return errBehind
	case err != nil:
		return err
	}
	if err := id.KV.Delete(ctx, key, jetstream.LastRevision(rev)); err != nil {
		return err // looked at again: the claim read back is this run's
	}
	id.unsure.Delete(key)
	return nil
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

// readTimeout bounds one read of a pending claim or of its owner's record.
const readTimeout = 2 * time.Second

// wait polls key until its outcome is stored (returned), the claim is
// released (nil, nil), its owner is gone (ErrInDoubt), or ctx ends.
func (id *Store) wait(ctx context.Context, key string) (*Record, error) {
	poll := time.NewTimer(pollFirst)
	defer poll.Stop()
	tick := time.NewTicker(id.Check)
	defer tick.Stop()
	next := pollFirst
	var owner, incarnation string
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
			if owner == id.Owner {
				if incarnation != id.Incarnation {
					return nil, fmt.Errorf("%w: an earlier run of this instance (it restarted under the same id) claimed the key and did not store its outcome; it is not executed again", ErrInDoubt)
				}
				if _, running := id.executing.Load(key); running {
					continue
				}
				if _, ok := id.unsure.Load(key); ok {
					return nil, nil // a claim of this run nothing executed under: take it (adopt)
				}
				return nil, fmt.Errorf("%w: this instance claimed the key and did not store its outcome (the store failed); it is not executed again", ErrInDoubt)
			}
			if owner == "" {
				continue
			}
			gctx, cancel := context.WithTimeout(ctx, readTimeout)
			e, err := id.Reg.Get(gctx, owner)
			cancel()
			if errors.Is(err, registry.ErrNotFound) {
				return nil, fmt.Errorf("%w: instance %s died while executing this key; it is not executed again", ErrInDoubt, owner)
			}
			if err == nil && incarnation != "" && e.Incarnation != "" && e.Incarnation != incarnation {
				return nil, fmt.Errorf("%w: instance %s restarted (incarnation %s, the claim's %s) while executing this key; it is not executed again",
					ErrInDoubt, owner, e.Incarnation, incarnation)
			}
		case <-poll.C:
			gctx, cancel := context.WithTimeout(ctx, readTimeout)
			e, err := id.KV.Get(gctx, key)
			cancel()
			switch {
			case errors.Is(err, jetstream.ErrKeyNotFound): // deleted or purged: the claim was released
				return nil, nil
			case err != nil && ctx.Err() != nil:
				return nil, ctx.Err()
			case errors.Is(err, context.DeadlineExceeded):
				// Unanswered (a request lost on a link that is down): ask
				// again, instead of waiting on it until the task's
				// deadline while PROCESSING keeps the delivery alive.
				poll.Reset(next)
				continue
			case err != nil:
				return nil, fmt.Errorf("read idempotency key: %w", err)
			}
			rec, err := Decode(e.Value())
			if err != nil {
				return nil, fmt.Errorf("unreadable idempotency record %s: %w", key, err)
			}
			if rec.State == StateDone {
				return &rec, nil
			}
			owner, incarnation = rec.Owner, rec.Incarnation
			next = min(2*next, pollMax)
			poll.Reset(next)
		}
	}
}

// Decode reads a stored record, which any agent may have
// written: checked to be one well-formed msgpack value first, so that no
// container header sizes an allocation by itself.
func Decode(b []byte) (Record, error) {
	var rec Record
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

// Release gives a claim back without an outcome (the task never ran), so a
// retry may execute it.
func (id *Store) Release(ctx context.Context, key string) error {
	return id.settle(ctx, key, "released", func(ctx context.Context) error { return id.KV.Delete(ctx, key) })
}

// Save records the outcome of key for replay.
func (id *Store) Save(ctx context.Context, key string, rec *Record) error {
	rec.State, rec.Owner, rec.Incarnation = StateDone, id.Owner, id.Incarnation
	b, err := msgpack.Marshal(rec)
	if err != nil {
		id.executing.Delete(key)
		return err
	}
	return id.settle(ctx, key, "stored", func(ctx context.Context) error { _, err := id.KV.Put(ctx, key, b); return err })
}

// settle runs op, key's outcome or release, until it succeeds or ctx ends.
// If ctx ends first, a Store with Done keeps trying in the background until
// the agent stops, still holding key: a task of this instance waits for it
// instead of taking the key for in doubt, and another instance's wait on
// this live owner ends once the store answers — not at its task's deadline
// (an hour for a durable task).
func (id *Store) settle(ctx context.Context, key, what string, op func(context.Context) error) error {
	err := retryKV(ctx, op)
	if err == nil || id.Done == nil {
		id.executing.Delete(key)
		return err
	}
	go func() {
		defer id.executing.Delete(key)
		lctx, cancel := id.lookAfterContext()
		defer cancel()
		if err := retryKV(lctx, op); err == nil {
			id.Log.Info().Str("key", key).Msg("idempotency outcome " + what + " late")
		}
	}()
	return err
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
