package auth

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/auth/signature"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/registry/policy"
	"github.com/agent-reach/agentreach/streams"
)

// TestAuthorizer checks every rule of Authorize against a directory and an
// ACL in a real REACH_POLICY, with the clock moved by hand.
func TestAuthorizer(t *testing.T) {
	v := newVerifier(t)
	seed, pub := newUser(t)
	_, revokedPub := newUser(t)
	now := time.Now()
	a := policyAuthorizer(t, v, map[string]any{
		PolicyIdentityPrefix + "billing-1": DirectoryEntry{Role: RoleCaller, PublicKey: pub},
		PolicyIdentityPrefix + "billing-9": DirectoryEntry{Role: RoleCaller, PublicKey: revokedPub, Revoked: time.Unix(1700000000, 0).UTC()},
		policy.KeyACL:                      policy.ACL{Rules: []policy.ACLRule{{Caller: "billing-*", MayCall: []string{"payment.*"}}}},
	}, withClock(func() time.Time { return now }))
	signer, err := signature.NewSigner("billing-1", seed, v.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	sub := &nats.Subscription{} // a message from NATS has one
	n := 0
	msg := func(subject string, at time.Time) *nats.Msg {
		m := nats.NewMsg(subject)
		m.Sub = sub
		n++ // each its own task: one signature is accepted once
		m.Header.Set(streams.HeaderRequestID, fmt.Sprintf("r%d", n))
		m.Data = []byte(`{"amount":1}`)
		signer.Sign(m, at)
		return m
	}
	for _, c := range []struct {
		name       string
		capability string
		m          func() *nats.Msg
		durable    bool
		code       streams.Code // "" for allowed
	}{
		{"signed and granted", "payment.execute", func() *nats.Msg { return msg("reach.task.payment.execute", now) }, false, ""},
		{"not granted", "echo", func() *nats.Msg { return msg("reach.task.echo", now) }, false, streams.CodeUnauthorized},
		{"a fan-out's caller only", "", func() *nats.Msg { return msg("reach.fanout", now) }, false, ""},
		{"no source", "payment.execute", func() *nats.Msg {
			m := msg("reach.task.payment.execute", now)
			m.Header.Del(streams.HeaderSource)
			return m
		}, false, streams.CodeUnauthorized},
		{"no signature", "payment.execute", func() *nats.Msg {
			m := msg("reach.task.payment.execute", now)
			m.Header.Del(HeaderSignature)
			return m
		}, false, streams.CodeUnauthorized},
		{"malformed signature", "payment.execute", func() *nats.Msg {
			m := msg("reach.task.payment.execute", now)
			m.Header.Set(HeaderSignature, "v2.soon.x")
			return m
		}, false, streams.CodeBadRequest},
		{"a v1 signature", "payment.execute", func() *nats.Msg {
			m := msg("reach.task.payment.execute", now)
			m.Header.Set(HeaderSignature, "v1."+strings.TrimPrefix(m.Header.Get(HeaderSignature), "v2."))
			return m
		}, false, streams.CodeUnauthorized},
		{"unknown identity", "payment.execute", func() *nats.Msg {
			m := msg("reach.task.payment.execute", now)
			m.Header.Set(streams.HeaderSource, "billing-2")
			return m
		}, false, streams.CodeUnauthorized},
		{"revoked identity", "payment.execute", func() *nats.Msg {
			m := msg("reach.task.payment.execute", now)
			m.Header.Set(streams.HeaderSource, "billing-9")
			return m
		}, false, streams.CodeUnauthorized},
		{"signed for another subject", "payment.execute", func() *nats.Msg {
			m := msg("reach.task.payment.refund", now)
			m.Subject = "reach.task.payment.execute"
			return m
		}, false, streams.CodeUnauthorized},
		{"too old", "payment.execute", func() *nats.Msg { return msg("reach.task.payment.execute", now.Add(-DefaultMaxAge-time.Second)) }, false, streams.CodeUnauthorized},
		{"from the future", "payment.execute", func() *nats.Msg { return msg("reach.task.payment.execute", now.Add(DefaultMaxAge+time.Second)) }, false, streams.CodeUnauthorized},
		{"durable, an hour old", "payment.execute", func() *nats.Msg {
			m := msg("reach.submit.payment.execute", now.Add(-time.Hour))
			m.Sub = nil
			return m
		}, true, ""},
		{"durable, older than a day", "payment.execute", func() *nats.Msg {
			m := msg("reach.submit.payment.execute", now.Add(-DefaultDurableMaxAge-time.Second))
			m.Sub = nil
			return m
		}, true, streams.CodeUnauthorized},
		{"in process, vouched for", "payment.execute", func() *nats.Msg {
			m := nats.NewMsg("")
			m.Header.Set(streams.HeaderSource, "billing-7")
			return m
		}, false, ""},
		{"in process, not granted", "echo", func() *nats.Msg {
			m := nats.NewMsg("")
			m.Header.Set(streams.HeaderSource, "billing-7")
			return m
		}, false, streams.CodeUnauthorized},
		{"in process, no source", "payment.execute", func() *nats.Msg { return nats.NewMsg("") }, false, streams.CodeUnauthorized},
	} {
		m := c.m()
		e := a.Authorize(c.capability, m, c.durable)
		switch {
		case c.code == "" && e != nil:
			t.Errorf("%s: refused: %v", c.name, e)
		case c.code != "" && (e == nil || e.Code != c.code):
			t.Errorf("%s: got %v, want %s", c.name, e, c.code)
		}
		if c.code == "" && m.Sub != nil && m.Header.Get(HeaderSignature) != "" {
			t.Errorf("%s: the signature stays on a direct-tier task: an agent could replay it", c.name)
		}
		if c.code == "" && c.durable && m.Header.Get(HeaderSignature) == "" {
			t.Errorf("%s: a durable task lost its signature: a dead letter's replay would be refused", c.name)
		}
	}
}

// policyAuthorizer starts an authorizer with verifier v over a real
// REACH_POLICY holding policy (key → value, as JSON) on a server of its
// own, once it has read every identity in it; the test's cleanup stops it.
func policyAuthorizer(t *testing.T, v *signature.Verifier, policy map[string]any, opts ...AuthorizerOption) *Authorizer {
	t.Helper()
	return policyAuthorizerConfig(t, v, AuthorizerConfig{}, policy, opts...)
}

// policyAuthorizerConfig is policyAuthorizer with cfg.
func policyAuthorizerConfig(t *testing.T, v *signature.Verifier, cfg AuthorizerConfig, policy map[string]any, opts ...AuthorizerOption) *Authorizer {
	t.Helper()
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	natstest.Provision(t, nc, streams.Topology{Memory: true})
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, streams.BucketPolicy)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for key, value := range policy {
		b, _ := json.Marshal(value)
		if _, err := registry.PutPolicy(ctx, kv, key, b); err != nil {
			t.Fatal(err)
		}
		if name, ok := strings.CutPrefix(key, PolicyIdentityPrefix); ok {
			names = append(names, name)
		}
	}
	a, err := NewAuthorizer(ctx, js, v, cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	natstest.WaitFor(t, 5*time.Second, func() error {
		v := a.current()
		for _, name := range names {
			if v.entry(name) == nil {
				return fmt.Errorf("identity %s is not loaded yet", name)
			}
		}
		return nil
	})
	return a
}

// TestAuthorizerAnswersOnlyInTheCallersInbox checks the reply gate: a task
// from NATS is answered only inside its proven caller's inbox or a
// dispatcher identity's (the gateway's); any other reply subject is
// refused, cleared so that nothing is published there, and logged once a
// minute per identity.
func TestAuthorizerAnswersOnlyInTheCallersInbox(t *testing.T) {
	v := newVerifier(t)
	seed, pub := newUser(t)
	_, otherPub := newUser(t)
	var now atomic.Pointer[time.Time]
	start := time.Now()
	now.Store(&start)
	var logs bytes.Buffer
	var logsMu sync.Mutex
	a := policyAuthorizer(t, v, map[string]any{
		PolicyIdentityPrefix + "billing-1":  DirectoryEntry{Role: RoleCaller, PublicKey: pub},
		PolicyIdentityPrefix + "billing-10": DirectoryEntry{Role: RoleCaller, PublicKey: otherPub},
		PolicyIdentityPrefix + "gw":         DirectoryEntry{Role: RoleDispatcher, PublicKey: otherPub},
		policy.KeyACL:                       policy.ACL{Rules: []policy.ACLRule{{Caller: "billing-*", MayCall: []string{"payment.*"}}}},
	}, withClock(func() time.Time { return *now.Load() }),
		WithAuthorizerLogger(zerolog.New(lockedWriter{&logsMu, &logs})))
	signer, err := signature.NewSigner("billing-1", seed, v.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	task := func(reply string) *nats.Msg {
		m := nats.NewMsg("reach.task.payment.execute")
		m.Sub, m.Reply = &nats.Subscription{}, reply
		n++ // each its own task: one signature is accepted once
		m.Header.Set(streams.HeaderRequestID, fmt.Sprintf("r%d", n))
		signer.Sign(m, *now.Load())
		return m
	}
	for _, reply := range []string{"", "_INBOX.billing-1.mux.1", "_INBOX.gw.mux.7"} {
		m := task(reply)
		if e := a.CheckReply(m); e != nil {
			t.Errorf("reply %q: CheckReply refused: %v", reply, e)
		}
		if e := a.Authorize("payment.execute", m, false); e != nil || m.Reply != reply {
			t.Errorf("reply %q: refused (%v), reply now %q", reply, e, m.Reply)
		}
	}
	refusals := func() int {
		logsMu.Lock()
		defer logsMu.Unlock()
		return strings.Count(logs.String(), "reply subject outside")
	}
	for i, reply := range []string{"$KV.REACH_POLICY.acl", "_INBOX.billing-10.mux.1", "_INBOX.billing-1", "reach.agent.pay-1", "_INBOX.nobody.x"} {
		for _, gate := range []func(*nats.Msg) *streams.Error{
			a.CheckReply,
			func(m *nats.Msg) *streams.Error { return a.Authorize("payment.execute", m, false) },
		} {
			m := task(reply)
			e := gate(m)
			if e == nil || e.Code != streams.CodeUnauthorized || !strings.Contains(e.Message, "outside billing-1's inbox") || m.Reply != "" {
				t.Errorf("reply %q: got %v, reply now %q; want UNAUTHORIZED naming the rule, and the reply cleared", reply, e, m.Reply)
			}
		}
		if i == 0 && refusals() != 1 {
			t.Fatalf("a first refusal logged %d times, want once", refusals())
		}
	}
	if n := refusals(); n != 1 {
		t.Errorf("refusals of one identity within a minute logged %d times, want once", n)
	}
	// A task naming no caller is answered (refused) in any identity's
	// inbox, its sender's; nowhere else.
	for reply, ok := range map[string]bool{"_INBOX.billing-10.mux.1": true, "$KV.REACH_POLICY.acl": false, "_INBOX.nobody.x": false} {
		m := task(reply)
		m.Header.Del(streams.HeaderSource)
		if e := a.CheckReply(m); (e == nil) != ok || (m.Reply == reply) != ok {
			t.Errorf("reply %q with no Reach-Source: got %v, reply now %q; want answerable %v", reply, e, m.Reply, ok)
		}
	}
	logsMu.Lock()
	logs.Reset()
	logsMu.Unlock()
	later := start.Add(replyLogEvery)
	now.Store(&later)
	if e := a.CheckReply(task("$KV.REACH_POLICY.acl")); e == nil || refusals() != 1 {
		t.Errorf("a refusal a minute later: %v, logged %d times, want once", e, refusals())
	}
}

// lockedWriter serialises writes to a buffer that the test reads.
type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
