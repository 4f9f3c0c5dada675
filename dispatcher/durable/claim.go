package durable

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/streams"
)

// Exactly one outcome per durable task (DESIGN §6.5): before a replica
// publishes a task's outcome — its result, a dead letter, a review entry —
// it claims the outcome with a create-only write to REACH_OUTCOMES, keyed
// by the task's REACH_TASKS message (its request id and stream sequence).
// The first claim wins. A redelivery of the task (its acknowledgement was
// lost, the replica died after claiming, a publish timed out although it
// landed, or two replicas held the task at once) finds the claim and
// records the claimed outcome again under the same message id — which the
// outcome stream deduplicates — instead of deciding another: a result
// beside a dead letter cannot happen. A replayed dead letter is a new
// REACH_TASKS message, so it may have an outcome of its own.

// outcomeClaimTimeout bounds one claim's read or write.
const outcomeClaimTimeout = 5 * time.Second

// Claim is the value of a claim: where the outcome goes and, for a
// parked task, why — enough to park it again the same way.
type Claim struct {
	Outcome string `json:"outcome"` // events.OutcomeResult, OutcomeDeadLetter or OutcomeReview
	Reason  string `json:"reason,omitempty"`
	// Code and Message are the error of a parked task, or the BIZ_REJECT a
	// result records; empty for a result.
	Code      string    `json:"code,omitempty"`
	Message   string    `json:"message,omitempty"`
	Node      string    `json:"node,omitempty"`
	Attempts  int       `json:"attempts,omitempty"`
	RequestID string    `json:"request_id"`
	By        string    `json:"by"` // the replica that claimed it
	At        time.Time `json:"at"`
}

// Err is the error c records, or nil for a result.
func (c Claim) Err() *streams.Error {
	if c.Code == "" {
		return nil
	}
	return streams.NewError(streams.Code(c.Code), "%s", c.Message)
}

// ClaimKey is the REACH_OUTCOMES key of a task: one per REACH_TASKS
// message (its stream sequence seq), with its request id when that is a
// valid key token (a task refused for its request id still needs its one
// outcome).
func ClaimKey(seq uint64, requestID string) string {
	id := requestID
	if streams.ValidateInstanceID(id) != nil {
		sum := sha256.Sum256([]byte(id))
		id = "sha256-" + hex.EncodeToString(sum[:16])
	}
	return "task." + strconv.FormatUint(seq, 10) + "." + id
}

// ErrClaimed is what Claims.Take returns when another claim holds the
// task: the claim is returned beside it.
var ErrClaimed = errors.New("outcome already claimed")

// Claims are the outcome claims in REACH_OUTCOMES, taken in the name of
// one replica (By).
type Claims struct {
	KV jetstream.KeyValue
	By string // the replica's name
}

// Take claims the outcome c of the task at key for requestID. It returns
// nil when this replica won, ErrClaimed with the claim that holds it when
// one did, or the store's error (the task is then left for redelivery).
func (cs Claims) Take(key, requestID string, c Claim) (Claim, error) {
	c.RequestID, c.By, c.At = requestID, cs.By, time.Now().UTC()
	b, err := json.Marshal(c)
	if err != nil {
		return c, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), outcomeClaimTimeout)
	defer cancel()
	_, err = cs.KV.Create(ctx, key, b)
	if err == nil {
		return c, nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		// The create may have landed although its answer was lost: read
		// it back before saying it failed.
		if held, found, rerr := cs.Held(key); rerr == nil && found {
			if held.By == cs.By && held.At.Equal(c.At) {
				return c, nil
			}
			return held, ErrClaimed
		}
		return c, fmt.Errorf("claim %s in %s: %w", key, streams.BucketOutcomes, err)
	}
	held, found, err := cs.Held(key)
	switch {
	case err != nil:
		return c, fmt.Errorf("read the claim %s in %s: %w", key, streams.BucketOutcomes, err)
	case !found: // deleted (or expired) between the create and the read
		return c, fmt.Errorf("the claim %s in %s went away", key, streams.BucketOutcomes)
	}
	return held, ErrClaimed
}

// Held returns the claim at key, if there is one.
func (cs Claims) Held(key string) (Claim, bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), outcomeClaimTimeout)
	defer cancel()
	e, err := cs.KV.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return Claim{}, false, nil
	case err != nil:
		return Claim{}, false, err
	}
	var c Claim
	if err := json.Unmarshal(e.Value(), &c); err != nil || c.Outcome == "" {
		return Claim{}, false, fmt.Errorf("claim %s does not decode: %v", key, err)
	}
	return c, true, nil
}
