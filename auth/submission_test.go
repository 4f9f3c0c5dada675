package auth

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/auth/signature"
	"github.com/agent-reach/agentreach/streams"
)

// A submission id is the same on every resubmission, differs per identity
// and request id, needs the identity's key (another identity's signer
// under the same name makes another), and the gateway (Vouch) makes the
// same one as the identity's own client.
func TestSubmissionID(t *testing.T) {
	v := newVerifier(t)
	seed, pub := newUser(t)
	otherSeed, _ := newUser(t)
	signer := func(name string, seed []byte) *signature.Signer {
		s, err := signature.NewSigner(name, seed, v.PublicKey())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	alice := signer("alice", seed)
	id := alice.SubmissionID("r1")
	if !strings.HasPrefix(id, "alice.r1.") || len(id) != len("alice.r1.")+22 {
		t.Fatalf("SubmissionID = %q", id)
	}
	if again := alice.SubmissionID("r1"); again != id {
		t.Fatalf("resubmission's id %q, was %q", again, id)
	}
	for _, other := range []string{alice.SubmissionID("r2"), signer("bob", seed).SubmissionID("r1"), signer("alice", otherSeed).SubmissionID("r1")} {
		if other == id || strings.HasSuffix(other, id[len("alice.r1."):]) {
			t.Fatalf("another submission has id %q, alice's r1 %q", other, id)
		}
	}

	a := policyAuthorizer(t, v, map[string]any{PolicyIdentityPrefix + "alice": DirectoryEntry{Role: RoleCaller, PublicKey: pub}})
	m := nats.NewMsg("reach.submit.echo")
	m.Header.Set(streams.HeaderRequestID, "r1")
	m.Header.Set(streams.HeaderMsgID, "r1")
	if e := a.Vouch("Bearer "+alice.Bearer(), m); e != nil {
		t.Fatal(e)
	}
	if got := m.Header.Get(streams.HeaderMsgID); got != id {
		t.Fatalf("the gateway's submission id %q, the client's %q", got, id)
	}
	// A publish the gateway makes that is no submission gets none.
	m = nats.NewMsg("reach.broadcast.echo")
	if e := a.Vouch("Bearer "+alice.Bearer(), m); e != nil {
		t.Fatal(e)
	}
	if got := m.Header.Get(streams.HeaderMsgID); got != "" {
		t.Fatalf("a broadcast got Nats-Msg-Id %q", got)
	}
}
