package agentkit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/streams"
)

// ErrUnknownCall is returned by Feedback for a request id this client did
// not call recently (it remembers the last recentCallsKept); FeedbackFor
// names the instance itself.
var ErrUnknownCall = errors.New("agentkit: no recent call with that request id")

// recentCallsKept is how many calls' instances a Client remembers.
const recentCallsKept = 4096

// recentCalls remembers which instance answered the latest calls.
type recentCalls struct {
	mu    sync.Mutex
	nodes map[string]string
	order []string // ring of request ids, oldest at next
	next  int
}

func (r *recentCalls) add(requestID, node string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.nodes == nil {
		r.nodes = make(map[string]string, recentCallsKept)
		r.order = make([]string, 0, recentCallsKept)
	}
	if _, ok := r.nodes[requestID]; ok {
		r.nodes[requestID] = node
		return
	}
	if len(r.order) < recentCallsKept {
		r.order = append(r.order, requestID)
	} else {
		delete(r.nodes, r.order[r.next])
		r.order[r.next] = requestID
		r.next = (r.next + 1) % recentCallsKept
	}
	r.nodes[requestID] = node
}

func (r *recentCalls) node(requestID string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n, ok := r.nodes[requestID]
	return n, ok
}

// feedbackRecord is a feedback record as REACH_EVENTS holds it (the
// dispatcher's Event fields it sets).
type feedbackRecord struct {
	RequestID string    `json:"request_id"`
	Kind      string    `json:"kind"`
	Node      string    `json:"node"`
	Score     float64   `json:"score"`
	Start     time.Time `json:"start"`
}

// Feedback records how good the result of a call this client made was:
// score from 0 (useless) to 1 (perfect). The record goes to REACH_EVENTS
// (reach.event._feedback), where dispatchers fold it into the instance's
// quality average, which `Reach-Prefer: quality` ranks by. It returns once
// the stream has stored it. Where auth is on (WithCredentials) the record
// is signed, and counts only when this client's identity called the task.
func (c *Client) Feedback(ctx context.Context, requestID string, score float64) error {
	node, ok := c.recent.node(requestID)
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownCall, requestID)
	}
	return c.FeedbackFor(ctx, requestID, node, score)
}

// FeedbackFor is Feedback for a result whose instance the caller names
// (Result.Node), such as one of another client's calls.
func (c *Client) FeedbackFor(ctx context.Context, requestID, node string, score float64) error {
	switch {
	case !(score >= 0 && score <= 1):
		return streams.NewError(streams.CodeBadRequest, "feedback score %v: want a number from 0 to 1", score)
	case streams.ValidateInstanceID(requestID) != nil:
		return streams.NewError(streams.CodeBadRequest, "feedback: request id %q is not valid", requestID)
	case streams.ValidateInstanceID(node) != nil:
		return streams.NewError(streams.CodeBadRequest, "feedback: instance id %q is not valid", node)
	}
	b, err := json.Marshal(feedbackRecord{RequestID: requestID, Kind: "feedback", Node: node, Score: score, Start: time.Now().UTC()})
	if err != nil {
		return err
	}
	m := nats.NewMsg(c.subjects.Feedback())
	m.Header.Set(streams.HeaderEvents, "1")
	m.Header.Set(streams.HeaderRequestID, requestID)
	m.Data = append(b, '\n')
	c.sign(m) // where auth is on, dispatchers count only the task's caller's feedback
	if _, err := c.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("agentkit: feedback for %s: %w", requestID, err)
	}
	return nil
}
