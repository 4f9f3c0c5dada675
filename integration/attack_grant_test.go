package integration

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/auth"
	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/workflow"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// Security issue 25, capability hijack: an agent identity puts whatever
// capabilities it likes in its own REACH_AGENTS record. The dispatcher
// routes it only what its identity's grant covers (auth agent --serves, by
// default its type and everything under it).

// grantACL lets the caller call everything the test routes.
const grantACL = `{"rules": [{"caller": "caller", "may_call": ["math.add", "risk.>", "wf.add"]}]}`

// ignoredRecord is the authorizer's log message of a record it does not let
// the dispatcher route.
const ignoredRecord = "agent record ignored: not routed (logged once per instance)"

// grantDispatcher starts a dispatcher of st as SecureAdmin with its
// authorizer logging into logs, the workflow engine as its resolver, and
// its fan-out and broadcast service.
func grantDispatcher(t *testing.T, st *SecureStack, logs *natstest.LogBuffer) (*dispatcher.Dispatcher, *workflow.Engine) {
	t.Helper()
	nc := st.ConnAs(SecureAdmin)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	az, err := auth.NewAuthorizer(ctx, js, st.verifier, auth.AuthorizerConfig{}, auth.WithAuthorizerLogger(zerolog.New(logs)))
	if err == nil {
		err = az.Start(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(az.Close)
	e, err := workflow.New(nc, workflow.Config{}, workflow.WithLogger(st.log))
	if err != nil {
		t.Fatal(err)
	}
	d, err := dispatcher.New(nc, config.Config{}, dispatcher.WithLogger(st.log), dispatcher.WithAuthorizer(az), dispatcher.WithResolver(e))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx, d); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close(); _ = e.Close() })
	st.mu.Lock()
	st.authorizers[d] = az
	st.mu.Unlock()
	st.FanOut(d)
	return d, e
}

// ignoredLines returns the log lines of the records of agent ignored.
func ignoredLines(logs *natstest.LogBuffer, agent string) int {
	n := 0
	for _, l := range logs.Lines(ignoredRecord) {
		if l["agent"] == agent {
			n++
		}
	}
	return n
}

// wantCode fails unless err is a streams error of code.
func wantCode(t *testing.T, what string, err error, code streams.Code) *streams.Error {
	t.Helper()
	var se *streams.Error
	if !errors.As(err, &se) || se.Code != code {
		t.Fatalf("%s: got %v, want %s", what, err, code)
	}
	return se
}

// TestAgentIsRoutedOnlyItsGrant: an agent identity of type evil registers
// math.add. No math.add task — direct, durable, unicast, broadcast,
// fan-out branch or workflow step — reaches it: with no other math agent
// the caller gets NO_AGENT (naming it as not granted), and once the legit
// math agent (default grant math, math.>) runs, that one serves them all.
// The dispatcher logs the ignored record once, not per task or heartbeat.
func TestAgentIsRoutedOnlyItsGrant(t *testing.T) {
	st := NewSecureStack(t, 200*time.Millisecond, grantACL)
	var logs natstest.LogBuffer
	d, e := grantDispatcher(t, st, &logs)
	PutWorkflow(t, st.Conn(), "name: wf.add\nsteps:\n  - name: add\n    call: math.add\n", e)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	var evil, legit atomic.Int32
	st.Identity(auth.Identity{Name: "evil-1", Role: auth.RoleAgent, Type: "evil"}) // grant: evil, evil.>
	st.Agent(agentkit.Config{ID: "evil-1", Type: "evil"}, map[string]agentkit.Handler{
		"math.add": counted(&evil, func(context.Context, *agentkit.Request) (any, error) { return map[string]int{"sum": -1}, nil })})
	natstest.WaitFor(t, 5*time.Second, func() error {
		if len(d.Table().Offering("math.add")) != 1 {
			return errors.New("the dispatcher has not read evil-1's record yet")
		}
		return nil
	})
	c := st.Client()
	_, err := c.Call(ctx, "math.add", map[string]int{"a": 1, "b": 2})
	se := wantCode(t, "math.add offered only by evil-1", err, streams.CodeNoAgent)
	if len(se.Excluded) != 1 || se.Excluded[0].Node != "evil-1" || se.Excluded[0].Reason != dispatcher.ExcludedNotGranted {
		t.Fatalf("NO_AGENT excludes %+v, want evil-1 as not granted", se.Excluded)
	}
	_, err = c.Call(ctx, "math.add", map[string]int{"a": 1, "b": 2}, agentkit.WithHeader(streams.HeaderAgent, "evil-1"))
	wantCode(t, "math.add addressed to evil-1", err, streams.CodeNoAgent)

	// The legit math agent, with its type's default grant, serves math.add.
	st.Identity(auth.Identity{Name: "math-1", Role: auth.RoleAgent, Type: "math"})
	st.Agent(agentkit.Config{ID: "math-1", Type: "math"}, map[string]agentkit.Handler{
		"math.add": counted(&legit, func(context.Context, *agentkit.Request) (any, error) { return map[string]int{"sum": 3}, nil })})
	WaitRoutable(t, "math.add", 1, d)
	for range 10 {
		if res, err := c.Call(ctx, "math.add", map[string]int{"a": 1, "b": 2}); err != nil || res.Node != "math-1" {
			t.Fatalf("math.add: %+v, %v", res, err)
		}
	}
	if res, err := c.SubmitAndWait(ctx, "math.add", map[string]int{"a": 1, "b": 2}); err != nil || res.Node != "math-1" {
		t.Fatalf("durable math.add: %+v, %v", res, err)
	}
	if g, err := c.Broadcast(ctx, "math.add", map[string]int{"a": 1, "b": 2}); err != nil || g.Expected != 1 || g.Succeeded != 1 || g.Replies[0].Node != "math-1" {
		t.Fatalf("broadcast math.add: %+v, %v", g, err)
	}
	if g, err := c.FanOut(ctx, []agentkit.Branch{{Name: "x", Capability: "math.add", Payload: map[string]int{}},
		{Name: "y", Capability: "math.add", Payload: map[string]int{}}}); err != nil || g.Succeeded != 2 {
		t.Fatalf("fan-out of math.add: %+v, %v", g, err)
	}
	if _, err := c.Call(ctx, "wf.add", map[string]int{"a": 1, "b": 2}); err != nil {
		t.Fatalf("workflow with a math.add step: %v", err)
	}
	_, err = c.Call(ctx, "math.add", map[string]int{"a": 1, "b": 2}, agentkit.WithHeader(streams.HeaderAgent, "evil-1"))
	wantCode(t, "math.add addressed to evil-1 beside math-1", err, streams.CodeNoAgent)
	if n := evil.Load(); n != 0 {
		t.Fatalf("evil-1 received %d math.add tasks", n)
	}
	if n := legit.Load(); n != 10+1+1+2+1 {
		t.Errorf("math-1 served %d tasks, want 15", n)
	}
	// Logged once: its record was checked again as math-1 joined and at
	// every call, and evil-1 kept heartbeating all along.
	if n := ignoredLines(&logs, "evil-1"); n != 1 {
		t.Fatalf("evil-1's record logged %d times, want once:\n%s", n, logs.String())
	}
	if n := ignoredLines(&logs, "math-1"); n != 0 {
		t.Fatalf("math-1's record logged as ignored:\n%s", logs.String())
	}
}

// TestServesGrantsPatterns: an agent made with --serves 'risk.*' is routed
// risk.credit; one whose record also offers risk.credit.x, outside that
// grant, is routed nothing, until its grant is extended — without a
// restart — and nothing again once it is revoked.
func TestServesGrantsPatterns(t *testing.T) {
	st := NewSecureStack(t, 200*time.Millisecond, grantACL)
	var logs natstest.LogBuffer
	d, _ := grantDispatcher(t, st, &logs)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	reply := func(id string) agentkit.Handler {
		return func(context.Context, *agentkit.Request) (any, error) { return map[string]string{"from": id}, nil }
	}
	for _, id := range []string{"risk-1", "risk-2"} {
		st.Identity(auth.Identity{Name: id, Role: auth.RoleAgent, Type: "risk", Serves: []string{"risk.*"}})
	}
	st.Agent(agentkit.Config{ID: "risk-1", Type: "risk"}, map[string]agentkit.Handler{"risk.credit": reply("risk-1")})
	st.Agent(agentkit.Config{ID: "risk-2", Type: "risk"}, map[string]agentkit.Handler{"risk.credit": reply("risk-2"), "risk.credit.x": reply("risk-2")})
	natstest.WaitFor(t, 5*time.Second, func() error {
		if len(d.Table().Offering("risk.credit")) != 2 {
			return errors.New("the dispatcher has not read both records yet")
		}
		return nil
	})
	WaitRoutable(t, "risk.credit", 1, d)
	c := st.Client()
	for range 5 {
		if res, err := c.Call(ctx, "risk.credit", nil); err != nil || res.Node != "risk-1" {
			t.Fatalf("risk.credit: %+v, %v", res, err)
		}
	}
	_, err := c.Call(ctx, "risk.credit.x", nil)
	wantCode(t, "risk.credit.x, outside risk.*", err, streams.CodeNoAgent)
	if n := ignoredLines(&logs, "risk-2"); n != 1 {
		t.Fatalf("risk-2's record logged %d times, want once:\n%s", n, logs.String())
	}

	// Its grant extended: routable, no restart.
	if _, err := st.Store.SetServes("risk-2", []string{"risk.>"}); err != nil {
		t.Fatal(err)
	}
	st.WaitSynced()
	WaitRoutable(t, "risk.credit.x", 1, d)
	WaitRoutable(t, "risk.credit", 2, d)
	// A new grant is new permissions (the outcomes it may keep), so the
	// agent moves to a new connection: until it has subscribed again a
	// call can find no subscription.
	natstest.WaitFor(t, 10*time.Second, func() error {
		res, err := c.Call(ctx, "risk.credit.x", nil)
		if err == nil && res.Node != "risk-2" {
			t.Fatalf("risk.credit.x after the grant answered by %s", res.Node)
		}
		return err
	})
	if n := len(logs.Lines("agent record within its identity's grant again: routed")); n != 1 {
		t.Fatalf("%d lines for risk-2 routed again, want 1:\n%s", n, logs.String())
	}

	// Revoked: its record, still in the bucket until it expires, is
	// routed nothing.
	st.Revoke("risk-2")
	WaitRoutable(t, "risk.credit.x", 0, d)
	WaitRoutable(t, "risk.credit", 1, d)
	if res, err := c.Call(ctx, "risk.credit", nil); err != nil || res.Node != "risk-1" {
		t.Fatalf("risk.credit after risk-2's revocation: %+v, %v", res, err)
	}
}
