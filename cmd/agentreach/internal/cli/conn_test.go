package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// TestBoundedEndsOnRefusal: a context from bounded ends when the server
// refuses the identity something, long before --timeout, and the failure
// is UNAUTHORIZED naming the refusal, not the cancellation it caused.
func TestBoundedEndsOnRefusal(t *testing.T) {
	c := &ConnFlags{Timeout: time.Hour}
	if _, err := c.Options("test"); err != nil { // sets up the refusal record
		t.Fatal(err)
	}
	untouched, cancelUntouched := c.Bounded(context.Background())
	defer cancelUntouched()
	ctx, cancel := c.Bounded(context.Background())
	defer cancel()
	if c.PermissionDenied(context.Canceled) != nil || ctx.Err() != nil {
		t.Fatal("refused before any refusal")
	}
	c.denied.record(`nats: permissions violation: Permissions Violation for Publish to "$JS.API.STREAM.INFO.KV_REACH_AGENTS"`)
	c.denied.record("a second violation") // the first one is kept
	<-ctx.Done()                          // the test's own timeout bounds this wait
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("ctx ended with %v, want it cancelled by the refusal", ctx.Err())
	}
	err := c.NotProvisioned(ctx.Err(), "bucket REACH_AGENTS")
	if o := ErrorObject(err); o.Code != streams.CodeUnauthorized ||
		o.Message != `permission denied: Permissions Violation for Publish to "$JS.API.STREAM.INFO.KV_REACH_AGENTS"; `+
			`an identity's role and the acl decide what it may do (docs/security.md)` {
		t.Fatalf("got %+v", o)
	}
	// Every bounded context of the command ends, and one made after the
	// refusal ends at once.
	<-untouched.Done()
	late, cancelLate := c.Bounded(context.Background())
	defer cancelLate()
	<-late.Done()
}

// TestNotProvisionedTellsCausesApart: the four causes of a failed JetStream
// request get four answers, and a timeout is not taken for a missing
// resource because the error it came wrapped in guessed so.
func TestNotProvisionedTellsCausesApart(t *testing.T) {
	c := &ConnFlags{servers: "nats://127.0.0.1:4222", Timeout: 10 * time.Second}
	guess := func(err error) error {
		return fmt.Errorf("registry: open REACH_AGENTS (run provisioning first): %w", err)
	}
	timeout := c.NotProvisioned(guess(context.DeadlineExceeded), "bucket REACH_AGENTS")
	if o := ErrorObject(timeout); o.Code != streams.CodeDeadlineExceeded || o.Message != "JetStream on nats://127.0.0.1:4222 did not answer "+
		"about bucket REACH_AGENTS within --timeout 10s: is the server or its cluster overloaded, or without a JetStream leader? "+
		"a longer --timeout waits more" {
		t.Errorf("timeout: %+v", o)
	}
	// Retried within the deadline against a JetStream without a leader
	// (streams.RetryUnavailable): "no leader", never the provisioning hint.
	noLeader := c.NotProvisioned(guess(fmt.Errorf("%w: %w", streams.ErrUnavailable, context.DeadlineExceeded)), "bucket REACH_AGENTS")
	if o := ErrorObject(noLeader); o.Code != "UNAVAILABLE" || !strings.Contains(o.Message, "had no leader for bucket REACH_AGENTS within --timeout 10s") ||
		!strings.Contains(o.Message, "nothing needs provisioning") {
		t.Errorf("no leader: %+v", o)
	}
	if _, err := c.Options("test"); err != nil {
		t.Fatal(err)
	}
	c.denied.record("nats: permissions violation: Permissions Violation for Publish to \"$JS.API.STREAM.INFO.KV_REACH_AGENTS\"")
	if o := ErrorObject(c.NotProvisioned(guess(context.Canceled), "bucket REACH_AGENTS")); o.Code != streams.CodeUnauthorized {
		t.Errorf("refusal: %+v", o)
	}
}

// TestNoRandomizeDialsTheFirstServer: with --no-randomize every connection
// goes to the first URL of --server (a dispatcher's own node), the others
// being fallbacks; shuffled, 16 connections would all land there with
// probability 2^-16.
func TestNoRandomizeDialsTheFirstServer(t *testing.T) {
	first, second := natstest.RunServer(t), natstest.RunServer(t)
	var c ConnFlags
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	c.Register(fs, 5*time.Second, "")
	if err := fs.Parse([]string{"--server", first.ClientURL() + ", " + second.ClientURL(), "--no-randomize"}); err != nil {
		t.Fatal(err)
	}
	for range 16 {
		nc, err := c.Connect("test")
		if err != nil {
			t.Fatal(err)
		}
		got := nc.ConnectedUrl()
		nc.Close()
		if got != first.ClientURL() {
			t.Fatalf("connected to %s, want the first of --server, %s", got, first.ClientURL())
		}
	}
	first.Shutdown()
	first.WaitForShutdown()
	nc, err := c.Connect("test")
	if err != nil {
		t.Fatalf("the first server down: %v", err)
	}
	defer nc.Close()
	if got := nc.ConnectedUrl(); got != second.ClientURL() {
		t.Fatalf("the first server down: connected to %s, want the fallback %s", got, second.ClientURL())
	}
}
