package signature

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/agent-reach/agentreach/streams"
)

// The caller's key (from its seed) and the dispatcher's (from the
// verifier's private key and the caller's public key) agree, for many keys.
func TestSignerVerifierAgree(t *testing.T) {
	v := newVerifier(t)
	for i := range 50 {
		seed, pub := newUser(t)
		s, err := NewSigner("billing-1", seed, v.PublicKey())
		if err != nil {
			t.Fatal(err)
		}
		m := task("r1")
		now := time.UnixMilli(1700000000123)
		s.Sign(m, now)
		if m.Header.Get(streams.HeaderSource) != "billing-1" {
			t.Fatal("Sign did not set Reach-Source")
		}
		at, err := v.Verify(m, "billing-1", pub)
		if err != nil || !at.Equal(now) {
			t.Fatalf("key %d: verify = %v, %v", i, at, err)
		}
	}
}

func TestVerifyRefuses(t *testing.T) {
	v := newVerifier(t)
	seed, pub := newUser(t)
	otherSeed, otherPub := newUser(t)
	s, _ := NewSigner("billing-1", seed, v.PublicKey())
	other, _ := NewSigner("billing-1", otherSeed, v.PublicKey())
	wrongVerifier, _ := NewSigner("billing-1", seed, newVerifier(t).PublicKey())
	now := time.Now()
	for name, c := range map[string]struct {
		make func() *nats.Msg
		user string
	}{
		"another key":      {func() *nats.Msg { m := task("r1"); other.Sign(m, now); return m }, pub},
		"another verifier": {func() *nats.Msg { m := task("r1"); wrongVerifier.Sign(m, now); return m }, pub},
		"body changed":     {func() *nats.Msg { m := task("r1"); s.Sign(m, now); m.Data = []byte(`{}`); return m }, pub},
		"request id changed": {func() *nats.Msg {
			m := task("r1")
			s.Sign(m, now)
			m.Header.Set(streams.HeaderRequestID, "r2")
			return m
		}, pub},
		"subject changed": {func() *nats.Msg { m := task("r1"); s.Sign(m, now); m.Subject = "reach.task.pay"; return m }, pub},
		"time changed": {func() *nats.Msg {
			m := task("r1")
			s.Sign(m, now)
			m.Header.Set(streams.HeaderSignature, "v2.1."+m.Header.Get(streams.HeaderSignature)[17:])
			return m
		}, pub},
		"deadline changed": {func() *nats.Msg {
			m := task("r1")
			m.Header.Set(streams.HeaderDeadline, "1700000030000")
			s.Sign(m, now)
			m.Header.Set(streams.HeaderDeadline, "1700000099999")
			return m
		}, pub},
		"deadline added": {func() *nats.Msg {
			m := task("r1")
			s.Sign(m, now)
			m.Header.Set(streams.HeaderDeadline, "1700000099999")
			return m
		}, pub},
		"idempotency key changed": {func() *nats.Msg {
			m := task("r1")
			m.Header.Set(streams.HeaderIdempotencyKey, "k1")
			s.Sign(m, now)
			m.Header.Set(streams.HeaderIdempotencyKey, "k2")
			return m
		}, pub},
		"v1, the same MAC": {func() *nats.Msg {
			m := task("r1")
			s.Sign(m, now)
			m.Header.Set(streams.HeaderSignature, "v1."+strings.TrimPrefix(m.Header.Get(streams.HeaderSignature), "v2."))
			return m
		}, pub},
		"replayed by its own signer as another source": {func() *nats.Msg {
			m := task("r1")
			m.Header.Set(streams.HeaderSource, "billing-2")
			s.SignReplay(m, now)
			return m
		}, pub},
		"claims another's key": {func() *nats.Msg { m := task("r1"); s.Sign(m, now); return m }, otherPub},
		"malformed":            {func() *nats.Msg { m := task("r1"); m.Header.Set(streams.HeaderSignature, "v2.x"); return m }, pub},
		"missing":              {func() *nats.Msg { return task("r1") }, pub},
	} {
		if _, err := v.Verify(c.make(), "billing-1", c.user); !errors.Is(err, ErrBadSignature) {
			t.Errorf("%s: verify = %v, want ErrBadSignature", name, err)
		}
	}
	// A signature made for one name does not prove another.
	m := task("r1")
	s.Sign(m, now)
	if _, err := v.Verify(m, "billing-2", pub); !errors.Is(err, ErrBadSignature) {
		t.Errorf("other name: %v", err)
	}
}

func BenchmarkSign(b *testing.B) {
	kp, _ := nkeys.CreateCurveKeys()
	pub, _ := kp.PublicKey()
	seed, _ := nkeys.CreateUser()
	us, _ := seed.Seed()
	s, err := NewSigner("billing-1", us, pub)
	if err != nil {
		b.Fatal(err)
	}
	m := task("r1")
	now := time.Now()
	for b.Loop() {
		s.Sign(m, now)
	}
}

// FuzzVerify: whatever a task's Reach-Signature holds, verification never
// panics, and it passes only for the signer's own signature of that task.
func FuzzVerify(f *testing.F) {
	kp, _ := nkeys.CreateCurveKeys()
	vseed, _ := kp.Seed()
	v, err := NewVerifier(vseed)
	if err != nil {
		f.Fatal(err)
	}
	user, _ := nkeys.CreateUser()
	seed, _ := user.Seed()
	pub, _ := user.PublicKey()
	s, err := NewSigner("billing-1", seed, v.PublicKey())
	if err != nil {
		f.Fatal(err)
	}
	m := task("r1")
	s.Sign(m, time.UnixMilli(1700000000000))
	good := m.Header.Get(streams.HeaderSignature)
	for _, seed := range []string{good, "v1." + strings.TrimPrefix(good, "v2."), "v2.1700000000000.", "v2..x", "v2.1.x", "", "v2.-5.abc",
		"v2.99999999999999999999.a", good + "=", strings.TrimSuffix(good, good[len(good)-1:]), "v3.1700000000000.x"} {
		f.Add(seed, "r1")
	}
	f.Fuzz(func(t *testing.T, sig, requestID string) {
		m := task(requestID)
		m.Header.Set(streams.HeaderSignature, sig)
		_, err := v.Verify(m, "billing-1", pub)
		if err == nil && (sig != good || requestID != "r1") {
			t.Fatalf("accepted %q for request %q", sig, requestID)
		}
		if err != nil && !errors.Is(err, ErrBadSignature) {
			t.Fatalf("error without ErrBadSignature: %v", err)
		}
	})
}

// BenchmarkSignVerify is one task's cost on both sides: the caller signs
// it, a dispatcher verifies it (the MAC key cached, as Authorizer keeps it).
func BenchmarkSignVerify(b *testing.B) {
	kp, _ := nkeys.CreateCurveKeys()
	vseed, _ := kp.Seed()
	v, err := NewVerifier(vseed)
	if err != nil {
		b.Fatal(err)
	}
	user, _ := nkeys.CreateUser()
	seed, _ := user.Seed()
	pub, _ := user.PublicKey()
	s, err := NewSigner("billing-1", seed, v.PublicKey())
	if err != nil {
		b.Fatal(err)
	}
	m := task("r1")
	m.Header.Set(streams.HeaderDeadline, "1700000030000")
	m.Header.Set(streams.HeaderIdempotencyKey, "order-42")
	m.Data = make([]byte, 1024)
	now := time.Now()
	for b.Loop() {
		s.Sign(m, now)
		if _, err := v.Verify(m, "billing-1", pub); err != nil {
			b.Fatal(err)
		}
	}
}
