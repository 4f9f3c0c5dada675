package signature_test

import (
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/agent-reach/agentreach/auth/signature"
	"github.com/agent-reach/agentreach/streams"
)

// A caller signs a task with its seed and the verifier's public key; a
// dispatcher checks it with the verifier's private key and the caller's
// public key, neither sending the MAC key they share.
func ExampleSigner_Sign() {
	vkp, _ := nkeys.CreateCurveKeys()
	vseed, _ := vkp.Seed()
	verifier, err := signature.NewVerifier(vseed)
	if err != nil {
		panic(err)
	}
	ukp, _ := nkeys.CreateUser()
	useed, _ := ukp.Seed()
	user, _ := ukp.PublicKey()
	signer, err := signature.NewSigner("billing-1", useed, verifier.PublicKey())
	if err != nil {
		panic(err)
	}

	m := nats.NewMsg("reach.task.payment.execute")
	m.Header.Set(streams.HeaderRequestID, "r-1")
	m.Data = []byte(`{"amount": 12}`)
	signer.Sign(m, time.Now())
	_, err = verifier.Verify(m, "billing-1", user)
	fmt.Println("as sent:", m.Header.Get(streams.HeaderSource), err)

	m.Data = []byte(`{"amount": 1200}`)
	_, err = verifier.Verify(m, "billing-1", user)
	fmt.Println("changed after signing refused:", err != nil)
	// Output:
	// as sent: billing-1 <nil>
	// changed after signing refused: true
}
