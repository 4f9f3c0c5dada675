package agentkit

import (
	"context"
	"sync"
	"time"
)

// taskCtx is the context a handler runs with: the agent's context, the
// Request (RequestFrom), and the task's deadline. The Done channel, and the
// timer behind a deadline, are made only when something asks for them
// (Done or Err): many handlers never do, and a timer per task was a
// measurable share of a fast agent's CPU. It is cancelled when the
// handler returns, or earlier by a CANCEL for its task (cancelNow).
type taskCtx struct {
	context.Context // the agent's: cancelled on a hard stop
	req             *Request
	deadline        time.Time // zero: none of its own

	once   sync.Once
	inner  context.Context
	cancel context.CancelFunc
}

// ended is the context of a task whose handler has returned.
var ended = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

func (c *taskCtx) materialize() context.Context {
	c.once.Do(func() {
		if c.deadline.IsZero() {
			c.inner, c.cancel = context.WithCancel(c.Context)
		} else {
			c.inner, c.cancel = context.WithDeadline(c.Context, c.deadline)
		}
	})
	return c.inner
}

// cancelNow cancels the context: the dispatcher said nobody will use the
// task's answer (a CANCEL). After the handler returned it does nothing.
func (c *taskCtx) cancelNow() {
	c.materialize()
	if c.cancel != nil {
		c.cancel()
	}
}

func (c *taskCtx) Deadline() (time.Time, bool) {
	if c.deadline.IsZero() {
		return c.Context.Deadline()
	}
	if d, ok := c.Context.Deadline(); ok && d.Before(c.deadline) {
		return d, true
	}
	return c.deadline, true
}

func (c *taskCtx) Done() <-chan struct{} { return c.materialize().Done() }

func (c *taskCtx) Err() error { return c.materialize().Err() }

func (c *taskCtx) Value(key any) any {
	if key == (requestKey{}) {
		return c.req
	}
	return c.Context.Value(key)
}

// end cancels the context once its handler has returned; one made after
// that starts out cancelled.
func (c *taskCtx) end() {
	c.once.Do(func() { c.inner = ended })
	if c.cancel != nil {
		c.cancel()
	}
}
