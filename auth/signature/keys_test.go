package signature

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/agent-reach/agentreach/streams"
)

// newVerifier returns a fresh verifier and its seed.
func newVerifier(t *testing.T) *Verifier {
	t.Helper()
	kp, err := nkeys.CreateCurveKeys()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	v, err := NewVerifier(seed)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func newUser(t *testing.T) (seed []byte, pub string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ = kp.Seed()
	pub, _ = kp.PublicKey()
	return seed, pub
}

func task(id string) *nats.Msg {
	m := nats.NewMsg("reach.task.echo")
	m.Header.Set(streams.HeaderRequestID, id)
	m.Data = []byte(`{"text":"hi"}`)
	return m
}
