package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agent-reach/agentreach/streams"
)

// TestBoundedEndsOnRefusal: a context from bounded ends when the server
// refuses the identity something, long before --timeout, and the failure
// is UNAUTHORIZED naming the refusal, not the cancellation it caused.
func TestBoundedEndsOnRefusal(t *testing.T) {
	c := &connFlags{timeout: time.Hour}
	if _, err := c.options("test"); err != nil { // sets up the refusal record
		t.Fatal(err)
	}
	untouched, cancelUntouched := c.bounded(context.Background())
	defer cancelUntouched()
	ctx, cancel := c.bounded(context.Background())
	defer cancel()
	if c.permissionDenied(context.Canceled) != nil || ctx.Err() != nil {
		t.Fatal("refused before any refusal")
	}
	c.denied.record(`nats: permissions violation: Permissions Violation for Publish to "$JS.API.STREAM.INFO.KV_REACH_AGENTS"`)
	c.denied.record("a second violation") // the first one is kept
	<-ctx.Done()                          // the test's own timeout bounds this wait
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("ctx ended with %v, want it cancelled by the refusal", ctx.Err())
	}
	err := c.notProvisioned(ctx.Err(), "bucket REACH_AGENTS")
	if o := errorObject(err); o.Code != streams.CodeUnauthorized ||
		o.Message != `permission denied: Permissions Violation for Publish to "$JS.API.STREAM.INFO.KV_REACH_AGENTS"; `+
			`an identity's role and the acl decide what it may do (docs/security.md)` {
		t.Fatalf("got %+v", o)
	}
	// Every bounded context of the command ends, and one made after the
	// refusal ends at once.
	<-untouched.Done()
	late, cancelLate := c.bounded(context.Background())
	defer cancelLate()
	<-late.Done()
}
