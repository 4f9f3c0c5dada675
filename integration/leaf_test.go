package integration

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/auth"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

// TestAnAgentBehindALeafNodeServesTheHub: an agent connected to a leaf node
// server, as its own identity, registers and heartbeats in the hub's
// REACH_AGENTS, answers a call a dispatcher on the hub routes to it, and
// receives a durable task.
func TestAnAgentBehindALeafNodeServesTheHub(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, _ := edgeEcho(t)

	js, err := jetstream.New(st.Conn())
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, streams.BucketAgents)
	if err != nil {
		t.Fatal(err)
	}
	WaitHeartbeat(t, kv, "edge-echo-1", 10*time.Second)

	c := st.Client()
	res, err := c.Call(ctx, "echo", echoIn{Text: "edge"})
	var out echoIn
	if err != nil || res.Decode(&out) != nil || out.Text != "edge" || res.Node != "edge-echo-1" {
		t.Fatalf("call through the leaf: %+v %+v, %v", res, out, err)
	}
	if res, err = c.SubmitAndWait(ctx, "echo", echoIn{Text: "durable"}); err != nil || res.Decode(&out) != nil || out.Text != "durable" {
		t.Fatalf("durable task through the leaf: %+v, %v", out, err)
	}
}

// TestACallerAtTheEdgeUsesTheHub: a caller connected to a leaf node server
// as its own identity, in the hub's JetStream domain
// (agentkit.WithJetStreamDomain), submits a durable task that the agent
// at the edge serves, waits for its outcome and reads the stored result by
// a direct get; the registry, read in the same domain over the link, lists
// the agent. Without the domain the stored result is out of reach: the
// direct get does not cross the link.
func TestACallerAtTheEdgeUsesTheHub(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, edge := edgeEcho(t)

	c := edge.ClientAs("edge-caller")
	res, err := c.SubmitAndWait(ctx, "echo", echoIn{Text: "from the edge"})
	var out echoIn
	if err != nil || res.Decode(&out) != nil || out.Text != "from the edge" {
		t.Fatalf("a durable task from the edge: %+v %+v, %v", res, out, err)
	}
	stored, err := c.Result(ctx, res.RequestID)
	if err != nil || stored.Decode(&out) != nil || out.Text != "from the edge" {
		t.Fatalf("the stored result read from the edge: %+v, %v", stored, err)
	}

	// The registry through the link, in the hub's domain, as the agent
	// identity at the edge (a caller may not read it, at the edge or not).
	js, err := jetstream.NewWithDomain(edge.ConnAs("edge-echo-1"), auth.HubDomain)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := registry.ListDirect(ctx, js)
	if err != nil || len(entries) != 1 || entries[0].Record.ID != "edge-echo-1" {
		t.Fatalf("the registry listed from the edge: %+v, %v", entries, err)
	}

	// Control: the same caller without the domain.
	plain, err := agentkit.NewClient(edge.ConnAs("edge-caller"), agentkit.WithCredentials(st.Store.CredsFile("edge-caller")))
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
	defer rcancel()
	if got, err := plain.Result(rctx, res.RequestID); err == nil {
		t.Fatalf("control: the result read from the edge without the hub's domain: %+v", got)
	}
}

// TestTheHubsIdentitiesReachTheEdge: the syncer pushes the account JWT to
// the leaf node server too (auth sync --leaf-server), so the edge follows
// the store with no restart. An identity made after the leaf server
// started connects to it; a revoked one loses its connection there and
// cannot connect again (the control: it could, just before).
func TestTheHubsIdentitiesReachTheEdge(t *testing.T) {
	st, edge := NewEdgeSite(t, false)
	dial := func(name string) (*nats.Conn, error) {
		o, err := auth.ConnectOptions(st.Store.CredsFile(name))
		if err != nil {
			t.Fatal(err)
		}
		return nats.Connect(edge.Server.ClientURL(), append(append(st.ClientTLS(), o...), nats.MaxReconnects(0), nats.Timeout(2*time.Second))...)
	}

	st.Identity(auth.Identity{Name: "late-caller", Role: auth.RoleCaller})
	late, err := dial("late-caller")
	if err != nil {
		t.Fatalf("an identity made after the leaf server started cannot connect to it: %v", err)
	}
	late.Close()

	held := edge.ConnAs("edge-caller")
	if again, err := dial("edge-caller"); err != nil {
		t.Fatalf("control: edge-caller cannot connect to the leaf server before its revocation: %v", err)
	} else {
		again.Close()
	}
	st.Revoke("edge-caller")
	natstest.WaitFor(t, 10*time.Second, func() error {
		if held.IsConnected() {
			return errors.New("the revoked caller's connection to the leaf server is still up")
		}
		return nil
	})
	if again, err := dial("edge-caller"); err == nil {
		again.Close()
		t.Fatal("the revoked caller connects to the leaf server")
	} else if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("the revoked caller's connection: %v, want an authorization violation", err)
	}
}

// TestALeafLinkBoundsTheEdge: the leaf link's permissions bound what the
// whole edge can do. A client of a leaf server in an attacker's hands —
// the link's credentials, no operator, anything allowed locally; its
// replies under the carried agent's inbox prefix — can do across the
// link only what the agents it carries may: it writes no REACH_POLICY key
// (the ACL, the identity directory), publishes no one's result, hears no
// other agent's deliveries; what a carried agent may do goes through.
// Revoking the carried agent takes that off the link too, though the leaf
// server still holds its old account JWT.
func TestALeafLinkBoundsTheEdge(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, edge := NewEdgeSite(t, true)
	hub := st.Conn()
	hubJS, err := jetstream.New(hub)
	if err != nil {
		t.Fatal(err)
	}
	policyKV, err := hubJS.KeyValue(ctx, streams.BucketPolicy)
	if err != nil {
		t.Fatal(err)
	}
	// Its replies under the carried agent's inbox prefix: the hub sends
	// the edge no other.
	evil := natstest.Connect(t, edge.Server, nats.CustomInboxPrefix(auth.InboxPrefix("edge-echo-1")))
	evilJS, err := jetstream.NewWithDomain(evil, auth.HubDomain)
	if err != nil {
		t.Fatal(err)
	}

	// Control: a key of what edge-echo-1 serves crosses the link.
	idem, err := evilJS.KeyValue(ctx, streams.BucketIdempotency)
	if err != nil {
		t.Fatalf("control: open REACH_IDEMPOTENCY through the leaf: %v", err)
	}
	if _, err := idem.Put(ctx, "echo.caller.k1", []byte("outcome")); err != nil {
		t.Fatalf("control: write an idempotency key of echo through the leaf: %v", err)
	}

	// REACH_POLICY: the ACL and the identity directory.
	if _, err := evilJS.KeyValue(ctx, streams.BucketPolicy); err == nil {
		t.Errorf("REACH_POLICY opened through the leaf")
	}
	for _, key := range []string{"acl", "identity.edge-echo-1"} {
		before, _ := policyKV.Get(ctx, key)
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		_, err := evil.RequestWithContext(rctx, "$JS."+auth.HubDomain+".API.$KV."+streams.BucketPolicy+"."+key, []byte(`{"rules":[]}`))
		rcancel()
		if err == nil {
			t.Errorf("a write of REACH_POLICY %s through the leaf was answered", key)
		}
		// The control write after it takes the same link, so had this one
		// crossed it would be stored by now.
		if _, err := idem.Put(ctx, "echo.caller.k2", []byte("outcome")); err != nil {
			t.Fatalf("control: %v", err)
		}
		after, _ := policyKV.Get(ctx, key)
		if revision(before) != revision(after) {
			t.Errorf("REACH_POLICY %s changed through the leaf: revision %d → %d", key, revision(before), revision(after))
		}
	}
	// Control: the dispatcher on the hub writes REACH_POLICY.
	if _, err := policyKV.Put(ctx, "leaf-test", []byte("x")); err != nil {
		t.Fatalf("control: the hub's dispatcher writes REACH_POLICY: %v", err)
	}

	// Another's result: a caller's result subject on the hub hears nothing
	// from the edge. The marker (feedback, which the carried agent may
	// send) follows it on the same link.
	heard := make(chan *nats.Msg, 16)
	for _, s := range []string{"reach.result.caller.>", "reach.feedback"} {
		if _, err := hub.ChanSubscribe(s, heard); err != nil {
			t.Fatal(err)
		}
	}
	natstest.WaitFor(t, 10*time.Second, func() error { // until the interest crossed the link
		if err := evil.Publish("reach.feedback", []byte("warm-up")); err != nil {
			return err
		}
		select {
		case <-heard:
			return nil
		case <-time.After(100 * time.Millisecond):
			return errors.New("nothing heard at the hub yet")
		}
	})
	for len(heard) > 0 {
		<-heard
	}
	if err := evil.Publish("reach.result.caller.forged", []byte("forged")); err != nil {
		t.Fatal(err)
	}
	if err := evil.Publish("reach.feedback", []byte("marker")); err != nil {
		t.Fatal(err)
	}
	for m := receive(t, heard); string(m.Data) != "marker"; m = receive(t, heard) {
		if m.Subject != "reach.feedback" {
			t.Errorf("the hub heard %s from the edge", m.Subject)
		}
	}
	// Control: the dispatcher publishes a result.
	if err := hub.Publish("reach.result.caller.real", []byte("real")); err != nil {
		t.Fatal(err)
	}
	if m := receive(t, heard); m.Subject != "reach.result.caller.real" {
		t.Errorf("control: heard %s, want the dispatcher's result", m.Subject)
	}

	// Another agent's deliveries: the edge hears reach.agent.edge-echo-1
	// (the carried agent's) but not reach.agent.hub-echo-1.
	got := make(chan *nats.Msg, 64)
	for _, s := range []string{"reach.agent.hub-echo-1", "reach.agent.edge-echo-1"} {
		if _, err := evil.ChanSubscribe(s, got); err != nil {
			t.Fatal(err)
		}
	}
	if err := evil.Flush(); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error { // until the interest crossed the link
		if err := hub.Publish("reach.agent.edge-echo-1", []byte("warm-up")); err != nil {
			return err
		}
		select {
		case <-got:
			return nil
		case <-time.After(100 * time.Millisecond):
			return errors.New("nothing heard at the edge yet")
		}
	})
	// Both subscriptions were sent over the link together; the marker
	// follows the other agent's delivery on the same connections.
	for _, s := range []string{"reach.agent.hub-echo-1", "reach.agent.edge-echo-1"} {
		if err := hub.Publish(s, []byte("marker")); err != nil {
			t.Fatal(err)
		}
	}
	for m := receive(t, got); string(m.Data) != "marker" || m.Subject != "reach.agent.edge-echo-1"; m = receive(t, got) {
		if m.Subject != "reach.agent.edge-echo-1" {
			t.Errorf("the edge heard %s", m.Subject)
		}
	}

	// Revoking the carried agent takes its subjects off the link.
	st.Revoke("edge-echo-1")
	natstest.WaitFor(t, 10*time.Second, func() error {
		pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer pcancel()
		if _, err := idem.Put(pctx, "echo.caller.k3", []byte("outcome")); err == nil {
			return errors.New("the link still carries edge-echo-1's writes")
		}
		return nil
	})
}

// revision is e's revision, 0 for none.
func revision(e jetstream.KeyValueEntry) uint64 {
	if e == nil {
		return 0
	}
	return e.Revision()
}

// receive returns the next message on ch, failing the test after 10 s.
func receive(t *testing.T, ch <-chan *nats.Msg) *nats.Msg {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("nothing received in 10 s")
		return nil
	}
}

// edgeEcho is an edge site (NewEdgeSite) whose agent edge-echo-1 serves
// echo at the leaf and is routable by a dispatcher at the hub.
func edgeEcho(t *testing.T) (*SecureStack, *LeafEdge) {
	t.Helper()
	st, edge := NewEdgeSite(t, false)
	d := st.Dispatcher(config.Config{})
	edge.Agent(agentkit.Config{ID: "edge-echo-1", Type: "echo"}, map[string]agentkit.Handler{"echo": echoHandler()})
	WaitRoutable(t, "echo", 1, d)
	return st, edge
}
