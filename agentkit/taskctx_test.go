package agentkit

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestTaskContextBehavesLikeADeadlineContext(t *testing.T) {
	req := &Request{RequestID: "r1"}
	parent, cancelParent := context.WithCancel(context.Background())
	defer cancelParent()

	deadline := time.Now().Add(30 * time.Millisecond)
	c := &taskCtx{Context: parent, req: req, deadline: deadline}
	if d, ok := c.Deadline(); !ok || !d.Equal(deadline) {
		t.Fatalf("Deadline() = %v, %v", d, ok)
	}
	if r, ok := RequestFromContext(c); !ok || r != req {
		t.Fatal("the request is not in the context")
	}
	if c.Err() != nil {
		t.Fatal("Err before the deadline")
	}
	<-c.Done() // closes at the deadline
	if !errors.Is(c.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err() = %v after the deadline", c.Err())
	}
	c.end()

	// The agent's hard stop reaches a task without a deadline.
	c = &taskCtx{Context: parent, req: req}
	if _, ok := c.Deadline(); ok {
		t.Fatal("a deadline without one")
	}
	done := c.Done()
	cancelParent()
	<-done
	if !errors.Is(c.Err(), context.Canceled) {
		t.Fatalf("Err() = %v after the agent stopped", c.Err())
	}

	// Once the handler has returned the context is cancelled, whether or
	// not anyone had asked for Done before.
	for _, asked := range []bool{false, true} {
		c = &taskCtx{Context: context.Background(), req: req, deadline: time.Now().Add(time.Hour)}
		if asked {
			_ = c.Done()
		}
		c.end()
		select {
		case <-c.Done():
		default:
			t.Fatalf("asked=%v: not cancelled after the handler returned", asked)
		}
		if !errors.Is(c.Err(), context.Canceled) {
			t.Fatalf("asked=%v: Err() = %v", asked, c.Err())
		}
	}
}
