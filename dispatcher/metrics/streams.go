package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/streams"
)

// StreamCounts is what the durable streams hold at a moment.
type StreamCounts struct {
	// At is when the server was asked.
	At time.Time
	// Messages holds the messages of REACH_TASKS (durable tasks pending),
	// REACH_DLQ and REACH_REVIEW by stream name; a stream that could not
	// be read is missing.
	Messages map[string]uint64
	// Pending holds REACH_TASKS's messages by capability.
	Pending map[string]uint64
}

// StreamCounter reads StreamCounts from the server at most once per
// interval, however often it is asked. Its methods are safe for
// concurrent use.
type StreamCounter struct {
	js       jetstream.JetStream
	subjects streams.Subjects
	every    time.Duration

	mu    sync.Mutex
	last  StreamCounts
	reads int // how often the server was asked
}

// NewStreamCounter returns a counter of the streams on js that reuses a
// reading for every (at least a second is advised).
func NewStreamCounter(js jetstream.JetStream, subjects streams.Subjects, every time.Duration) *StreamCounter {
	return &StreamCounter{js: js, subjects: subjects, every: every}
}

// Counts returns the latest reading, asking the server again when it is
// older than the interval (for up to 2 s). Callers wait for one reading
// at a time.
func (c *StreamCounter) Counts() StreamCounts {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.last.At.IsZero() && time.Since(c.last.At) < c.every {
		return c.last
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c.reads++
	out := StreamCounts{At: time.Now(), Messages: make(map[string]uint64), Pending: make(map[string]uint64)}
	for _, name := range []string{streams.StreamTasks, streams.StreamDLQ, streams.StreamReview} {
		s, err := c.js.Stream(ctx, name)
		if err != nil {
			continue // not there, or the server is away: no figure this time
		}
		var opts []jetstream.StreamInfoOpt
		if name == streams.StreamTasks {
			opts = append(opts, jetstream.WithSubjectFilter(c.subjects.SubmitWildcard()))
		}
		info, err := s.Info(ctx, opts...)
		if err != nil {
			continue
		}
		out.Messages[name] = info.State.Msgs
		if name == streams.StreamTasks {
			for subject, n := range info.State.Subjects {
				out.Pending[c.subjects.CapabilityFromSubmit(subject)] += n
			}
		}
	}
	c.last = out
	return out
}

// readCount returns how often the server was asked.
func (c *StreamCounter) readCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads
}
