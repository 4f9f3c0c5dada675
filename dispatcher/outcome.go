package dispatcher

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

// outcomeClaim is the value of a claim: where the outcome goes and, for a
// parked task, why — enough to park it again the same way.
type outcomeClaim struct {
	Outcome string `json:"outcome"` // OutcomeResult, OutcomeDeadLetter or OutcomeReview
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

// err is the error c records, or nil for a result.
func (c outcomeClaim) err() *streams.Error {
	if c.Code == "" {
		return nil
	}
	return streams.NewError(streams.Code(c.Code), "%s", c.Message)
}

// outcomeKey is the REACH_OUTCOMES key of t: one per REACH_TASKS message
// (its sequence), with its request id when that is a valid key token (a
// task refused for its request id still needs its one outcome).
func outcomeKey(t *task) string {
	id := t.requestID
	if streams.ValidateInstanceID(id) != nil {
		sum := sha256.Sum256([]byte(id))
		id = "sha256-" + hex.EncodeToString(sum[:16])
	}
	return "task." + strconv.FormatUint(t.seq, 10) + "." + id
}

// errOutcomeClaimed is what claimOutcome returns when another claim holds
// the task: the claim is returned beside it.
var errOutcomeClaimed = errors.New("outcome already claimed")

// claimOutcome claims t's outcome c. It returns nil when this replica
// won, errOutcomeClaimed with the claim that holds it when one did, or the
// store's error (the task is then left for redelivery).
func (d *Dispatcher) claimOutcome(t *task, c outcomeClaim) (outcomeClaim, error) {
	c.RequestID, c.By, c.At = t.requestID, d.cfg.Name, time.Now().UTC()
	b, err := json.Marshal(c)
	if err != nil {
		return c, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), outcomeClaimTimeout)
	defer cancel()
	key := outcomeKey(t)
	_, err = d.outcomes.Create(ctx, key, b)
	if err == nil {
		return c, nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		// The create may have landed although its answer was lost: read
		// it back before saying it failed.
		if held, found, rerr := d.heldOutcome(t); rerr == nil && found {
			if held.By == d.cfg.Name && held.At.Equal(c.At) {
				return c, nil
			}
			return held, errOutcomeClaimed
		}
		return c, fmt.Errorf("claim %s in %s: %w", key, streams.BucketOutcomes, err)
	}
	held, found, err := d.heldOutcome(t)
	switch {
	case err != nil:
		return c, fmt.Errorf("read the claim %s in %s: %w", key, streams.BucketOutcomes, err)
	case !found: // deleted (or expired) between the create and the read
		return c, fmt.Errorf("the claim %s in %s went away", key, streams.BucketOutcomes)
	}
	return held, errOutcomeClaimed
}

// heldOutcome returns the claim on t's outcome, if there is one.
func (d *Dispatcher) heldOutcome(t *task) (outcomeClaim, bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), outcomeClaimTimeout)
	defer cancel()
	e, err := d.outcomes.Get(ctx, outcomeKey(t))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return outcomeClaim{}, false, nil
	case err != nil:
		return outcomeClaim{}, false, err
	}
	var c outcomeClaim
	if err := json.Unmarshal(e.Value(), &c); err != nil || c.Outcome == "" {
		return outcomeClaim{}, false, fmt.Errorf("claim %s does not decode: %v", outcomeKey(t), err)
	}
	return c, true, nil
}
