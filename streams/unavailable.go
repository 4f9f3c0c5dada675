package streams

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStream error codes of a cluster that cannot answer for now (no meta
// or stream leader: an election, a partition, a node restarting).
const (
	jsClusterNotAvailable jetstream.ErrorCode = 10008 // JetStream system temporarily unavailable
	jsClusterNotLeader    jetstream.ErrorCode = 10009 // JetStream cluster can not handle request
	jsStreamOffline       jetstream.ErrorCode = 10118 // stream is offline
	jsStreamOfflineReason jetstream.ErrorCode = 10194 // stream is offline: <reason>
)

// ErrUnavailable wraps the last error of an operation retried against an
// unavailable JetStream until its deadline (RetryUnavailable): there is no
// leader for the stream or bucket, or no JetStream answered — an election,
// a partition, a node restarting. Provisioning would not help; it passes
// once a leader is elected.
var ErrUnavailable = errors.New("JetStream unavailable (no leader: an election, a partition or a restarting node)")

// Unavailable reports whether err says JetStream could not answer for now:
// no answer in time, a cluster or stream without a leader, or nobody
// answering a JetStream request (no responders) — every one of which
// passes by itself, unlike a missing stream or a refusal.
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	var api *jetstream.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode {
		case jsClusterNotAvailable, jsClusterNotLeader, jsStreamOffline, jsStreamOfflineReason:
			return true
		}
		return false // JetStream answered: not enabled, not found, refused …
	}
	var legacy *nats.APIError // from the parts of the client built on the older API (a KV watch)
	if errors.As(err, &legacy) {
		switch jetstream.ErrorCode(legacy.ErrorCode) {
		case jsClusterNotAvailable, jsClusterNotLeader, jsStreamOffline, jsStreamOfflineReason:
			return true
		}
		return false
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrConnectionReconnecting)
}

// Backoff of RetryUnavailable: from retryFirst, doubling up to retryMax,
// each wait drawn at random between half and all of it (jitter: callers
// that failed together do not retry together).
const (
	retryFirst = 100 * time.Millisecond
	retryMax   = 2 * time.Second
	// retryAttempt bounds one attempt (or half the time left, when more),
	// so that one lost answer does not use the whole deadline up.
	retryAttempt = 3 * time.Second
)

// RetryUnavailable runs op until it succeeds, fails for another reason
// than Unavailable, or ctx ends (without a deadline on ctx, after
// DefaultUnavailableWait). Past the deadline the last error is returned
// wrapped in ErrUnavailable, so the caller says "no leader" instead of a
// cause that would send an operator to the wrong place. op must be safe to
// repeat (a read, a create-only or deduplicated write).
func RetryUnavailable(ctx context.Context, op func(context.Context) error) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultUnavailableWait)
		defer cancel()
	}
	wait := retryFirst
	for {
		attempt := retryAttempt
		if dl, ok := ctx.Deadline(); ok {
			attempt = max(attempt, time.Until(dl)/2)
		}
		actx, cancel := context.WithTimeout(ctx, attempt)
		err := op(actx)
		cancel()
		if !Unavailable(err) {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		d := wait/2 + rand.N(wait/2+1)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		case <-time.After(d):
		}
		wait = min(2*wait, retryMax)
	}
}

// DefaultUnavailableWait bounds RetryUnavailable when its context has no
// deadline: longer than a stream leader election (seconds).
const DefaultUnavailableWait = 15 * time.Second
