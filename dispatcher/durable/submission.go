package durable

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/streams"
)

// Defaults of the durable tier.
const (
	DefaultConsumer = "reach-dispatchers"
	DefaultDeadline = time.Hour
	DefaultPending  = 1000
	DefaultAckWait  = 30 * time.Second
	// Buffered tasks (no capable instance has capacity) are put back with a
	// delay growing from BufferDelayBase to BufferDelayMax.
	BufferDelayBase = 250 * time.Millisecond
	BufferDelayMax  = 2 * time.Second
)

// Reasons recorded with a dead letter or review entry.
const (
	ReasonFailed   = "failed"   // the task failed, or exhausted its attempts
	ReasonPoison   = "poison"   // the task can never succeed (BAD_REQUEST and the like)
	ReasonDeadline = "deadline" // the overall deadline passed
	ReasonInDoubt  = "in_doubt" // an idempotent execution's outcome is unknown (Reach-In-Doubt)
)

// ConsumerConfig is the shared durable consumer every replica pulls
// REACH_TASKS with.
type ConsumerConfig struct {
	Name    string          // the durable consumer's name
	AckWait time.Duration   // before an unacknowledged task is redelivered
	Pending int             // the most tasks pulled and not yet acknowledged
	Filter  string          // the submit subjects
	Log     *zerolog.Logger // consume errors, at debug level
}

// Join creates (or updates) the shared consumer on REACH_TASKS and hands
// every task it delivers to handle, on the consumer's goroutine. Drain the
// returned context to stop: the tasks already pulled are handed on.
func Join(ctx context.Context, js jetstream.JetStream, cfg ConsumerConfig, handle func(jetstream.Msg)) (jetstream.ConsumeContext, error) {
	cons, err := js.CreateOrUpdateConsumer(ctx, streams.StreamTasks, jetstream.ConsumerConfig{
		Durable:       cfg.Name,
		Description:   "Agent-Reach dispatchers: durable-tier tasks",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: cfg.Pending,
		FilterSubject: cfg.Filter,
	})
	if err != nil {
		return nil, fmt.Errorf("dispatcher: durable consumer: %w", err)
	}
	cc, err := cons.Consume(handle,
		jetstream.PullMaxMessages(min(cfg.Pending, 500)),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			cfg.Log.Debug().Err(err).Msg("durable consume")
		}))
	if err != nil {
		return nil, fmt.Errorf("dispatcher: durable consume: %w", err)
	}
	return cc, nil
}

// RequestIDOfSubmission returns the request id a durable submission
// without Reach-Request-Id is known by: its Nats-Msg-Id's second
// dot-separated token, where SDKs put it ("<source>.<request-id>", and
// ".<proof>" after it with credentials), or the Nats-Msg-Id as it is when
// it has no dot. The caller checks the id.
func RequestIDOfSubmission(h nats.Header) string {
	id := h.Get(streams.HeaderMsgID)
	if _, rest, ok := strings.Cut(id, "."); ok {
		id, _, _ = strings.Cut(rest, ".")
	}
	return id
}

// Buffered reports whether a code means "no capacity now": the durable task
// waits instead of failing.
func Buffered(c streams.Code) bool {
	switch c {
	case streams.CodeNoAgent, streams.CodeCircuitOpen, streams.CodeTargetBusy, streams.CodeOverloaded:
		return true
	}
	return false
}

// KeepInProgress tells JetStream that msg, delivered with ackWait, is being
// worked on until the returned stop is called (an in-progress ack every
// third of ackWait), so its ack wait never expires mid-task however long
// the task takes. stop waits for the goroutine it started.
func KeepInProgress(msg jetstream.Msg, ackWait time.Duration) (stop func()) {
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		tick := time.NewTicker(ackWait / 3)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				_ = msg.InProgress()
			}
		}
	}()
	return func() { close(done); <-exited }
}
