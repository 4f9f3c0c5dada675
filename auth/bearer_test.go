package auth

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/auth/signature"
	"github.com/agent-reach/agentreach/registry/policy"
	"github.com/agent-reach/agentreach/streams"
)

// TestVouch checks the gateway's bearer tokens against a directory in a
// real REACH_POLICY: the token an identity derives from its credentials
// names it on a task, and a task sent over NATS comes out signed so that
// Authorize accepts it; other identities' tokens, tampered, revoked or
// malformed ones are refused with their code.
func TestVouch(t *testing.T) {
	v := newVerifier(t)
	seed, pub := newUser(t)
	otherSeed, otherPub := newUser(t)
	a := policyAuthorizer(t, v, map[string]any{
		PolicyIdentityPrefix + "web":  DirectoryEntry{Role: RoleCaller, PublicKey: pub},
		PolicyIdentityPrefix + "gone": DirectoryEntry{Role: RoleCaller, PublicKey: otherPub, Revoked: time.Unix(1700000000, 0).UTC()},
		policy.KeyACL:                 policy.ACL{Rules: []policy.ACLRule{{Caller: "web", MayCall: []string{"echo"}}}},
	})
	signer := func(name string, seed []byte) *signature.Signer {
		s, err := signature.NewSigner(name, seed, v.PublicKey())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	web := signer("web", seed).Bearer()
	if !strings.HasPrefix(web, "ar1.web.") {
		t.Fatalf("token %q", web)
	}

	// In process: named, not signed.
	m := nats.NewMsg("")
	m.Header.Set(streams.HeaderSource, "admin")
	m.Header.Set(HeaderSignature, "v1.1.forged")
	if e := a.Vouch("Bearer "+web, m); e != nil {
		t.Fatalf("in process: %v", e)
	}
	if m.Header.Get(streams.HeaderSource) != "web" || m.Header.Get(HeaderSignature) != "" {
		t.Fatalf("in process: headers %v, want Reach-Source web and no signature", m.Header)
	}
	if e := a.Authorize("echo", m, false); e != nil {
		t.Fatalf("in process, vouched: %v", e)
	}

	// Over NATS: signed, and the replica that takes it verifies it.
	m = nats.NewMsg("reach.submit.echo")
	m.Data = []byte(`{"text":"hi"}`)
	if e := a.Vouch("Bearer "+web, m); e != nil {
		t.Fatalf("over NATS: %v", e)
	}
	if m.Header.Get(streams.HeaderRequestID) == "" || m.Header.Get(HeaderSignature) == "" {
		t.Fatalf("over NATS: headers %v, want a request id and a signature", m.Header)
	}
	if e := a.Authorize("echo", m, true); e != nil {
		t.Fatalf("a vouched durable task: %v", e)
	}
	if e := a.Authorize("payment.execute", m, true); e == nil || e.Code != streams.CodeUnauthorized {
		t.Fatalf("the ACL still applies: %v", e)
	}

	for _, c := range []struct {
		name, authorization string
		code                streams.Code
	}{
		{"no header", "", streams.CodeUnauthorized},
		{"basic auth", "Basic d2ViOnB3", streams.CodeBadRequest},
		{"not ours", "Bearer eyJhbGciOi.x.y", streams.CodeBadRequest},
		{"bad name", "Bearer ar1.we b.x", streams.CodeBadRequest},
		{"unknown identity", "Bearer " + signer("nobody", seed).Bearer(), streams.CodeUnauthorized},
		{"another key's token", "Bearer " + signer("web", otherSeed).Bearer(), streams.CodeUnauthorized},
		{"tampered", "Bearer " + tampered(web), streams.CodeUnauthorized},
		{"revoked", "Bearer " + signer("gone", otherSeed).Bearer(), streams.CodeUnauthorized},
	} {
		m := nats.NewMsg("reach.submit.echo")
		m.Header.Set(streams.HeaderSource, "web")
		e := a.Vouch(c.authorization, m)
		if e == nil || e.Code != c.code {
			t.Errorf("%s: got %v, want %s", c.name, e, c.code)
		}
		if m.Header.Get(HeaderSignature) != "" {
			t.Errorf("%s: refused, yet signed", c.name)
		}
	}
}

// tampered returns token with its last character changed.
func tampered(token string) string {
	last := byte('A')
	if token[len(token)-1] == last {
		last = 'B'
	}
	return token[:len(token)-1] + string(last)
}
