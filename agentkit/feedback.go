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

// ErrFeedbackNotAccepted is returned by Feedback when no dispatcher
// accepted the score (see Feedback).
var ErrFeedbackNotAccepted = errors.New("agentkit: no dispatcher accepted the feedback (the task is unknown to them, already scored, or another identity's)")

const (
	// recentCallsKept is how many calls' instances a Client remembers.
	recentCallsKept = 4096
	// feedbackWait bounds how long Feedback waits for a dispatcher's answer.
	feedbackWait = 5 * time.Second
)

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
// score from 0 (useless) to 1 (perfect). It asks the dispatchers
// (reach.feedback); the replica that finished the call folds the score into
// the instance's quality average, which `Reach-Prefer: quality` ranks by,
// stores it in REACH_EVENTS, and answers once stored. Where auth is on
// (WithCredentials) the request is signed, and counts only when this
// client's identity called the task. A score no dispatcher accepts — the
// task is unknown to them (not routed by a dispatcher, or one of the
// thousands before a replica's last 4,096), already scored, or another
// identity's — gets no answer: ErrFeedbackNotAccepted once ctx ends or
// after 5 s.
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
	ctx, cancel := context.WithTimeout(ctx, feedbackWait)
	defer cancel()
	reply, err := c.nc.RequestMsgWithContext(ctx, m)
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("%w: %s on %s", ErrFeedbackNotAccepted, requestID, node)
	case err != nil:
		return fmt.Errorf("agentkit: feedback for %s: %w", requestID, err)
	}
	if e := streams.ErrorFromMessage(reply); e != nil {
		return e
	}
	return nil
}
