package auth

import (
	"bytes"
	"encoding/base64"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/auth/signature"
	"github.com/agent-reach/agentreach/registry/policy"
	"github.com/agent-reach/agentreach/streams"
)

// replayStack is an authorizer over a directory of a caller (billing-1), a
// second caller (billing-2) and a dispatcher identity (ops), with the
// clock moved by hand.
type replayStack struct {
	a             *Authorizer
	now           atomic.Pointer[time.Time]
	caller, other *signature.Signer
	operator      *signature.Signer
	logs          bytes.Buffer
	logsMu        sync.Mutex
	requests      atomic.Int64
}

func newReplayStack(t *testing.T, cfg AuthorizerConfig) *replayStack {
	t.Helper()
	v := newVerifier(t)
	seed, pub := newUser(t)
	seed2, pub2 := newUser(t)
	opsSeed, opsPub := newUser(t)
	st := &replayStack{}
	start := time.Now()
	st.now.Store(&start)
	st.a = policyAuthorizerConfig(t, v, cfg, map[string]any{
		PolicyIdentityPrefix + "billing-1": DirectoryEntry{Role: RoleCaller, PublicKey: pub},
		PolicyIdentityPrefix + "billing-2": DirectoryEntry{Role: RoleCaller, PublicKey: pub2},
		PolicyIdentityPrefix + "ops":       DirectoryEntry{Role: RoleDispatcher, PublicKey: opsPub},
		policy.KeyACL:                      policy.ACL{Rules: []policy.ACLRule{{Caller: "billing-*", MayCall: []string{"payment.*"}}}},
	}, withClock(func() time.Time { return *st.now.Load() }),
		WithAuthorizerLogger(zerolog.New(lockedWriter{&st.logsMu, &st.logs})))
	var err error
	for _, s := range []struct {
		to   **signature.Signer
		name string
		seed []byte
	}{{&st.caller, "billing-1", seed}, {&st.other, "billing-2", seed2}, {&st.operator, "ops", opsSeed}} {
		if *s.to, err = signature.NewSigner(s.name, s.seed, v.PublicKey()); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

func (st *replayStack) advance(d time.Duration) {
	t := st.now.Load().Add(d)
	st.now.Store(&t)
}

// task is a signed direct-tier task of s, as it arrives over NATS.
func (st *replayStack) task(s *signature.Signer, subject, requestID string) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Sub = &nats.Subscription{}
	m.Header.Set(streams.HeaderRequestID, requestID)
	m.Header.Set(streams.HeaderDeadline, "1700000030000")
	m.Header.Set(streams.HeaderIdempotencyKey, "order-1")
	m.Data = []byte(`{"amount":1}`)
	s.Sign(m, *st.now.Load())
	return m
}

// copyOf is a captured copy of m, as an eavesdropper would re-publish it.
func copyOf(m *nats.Msg) *nats.Msg {
	c := &nats.Msg{Subject: m.Subject, Data: append([]byte(nil), m.Data...), Header: nats.Header{}, Sub: &nats.Subscription{}}
	for k, v := range m.Header {
		c.Header[k] = append([]string(nil), v...)
	}
	return c
}

func wantCode(t *testing.T, what string, e *streams.Error, code streams.Code, says string) {
	t.Helper()
	switch {
	case code == "" && e != nil:
		t.Errorf("%s: refused: %v", what, e)
	case code != "" && (e == nil || e.Code != code || !strings.Contains(e.Message, says)):
		t.Errorf("%s: got %v, want %s saying %q", what, e, code, says)
	}
}

// A signed message is accepted once: its copy is refused (and logged once
// a minute per identity), while a retry signed again, its cancel and its
// feedback (same request id, other subjects) pass. Changing what v2 covers
// after signing fails the MAC.
func TestSignatureAcceptedOnce(t *testing.T) {
	st := newReplayStack(t, AuthorizerConfig{})
	m := st.task(st.caller, "reach.task.payment.execute", "r1")
	m0 := copyOf(m) // what an eavesdropper captured
	wantCode(t, "the task", st.a.Authorize("payment.execute", m, false), "", "")
	wantCode(t, "its copy", st.a.Authorize("payment.execute", copyOf(m0), false), streams.CodeUnauthorized, "accepted once")
	wantCode(t, "a second copy", st.a.Authorize("payment.execute", copyOf(m0), false), streams.CodeUnauthorized, "accepted once")
	st.logsMu.Lock()
	if n := strings.Count(st.logs.String(), "replayed message refused"); n != 1 {
		t.Errorf("%d replay log lines, want 1 (once a minute per identity): %s", n, st.logs.String())
	}
	st.logsMu.Unlock()

	st.advance(time.Millisecond) // a retry signs again, at another time
	wantCode(t, "a retry with a fresh signature", st.a.Authorize("payment.execute", st.task(st.caller, "reach.task.payment.execute", "r1"), false), "", "")
	wantCode(t, "its cancel", st.a.Authorize("", st.task(st.caller, "reach.cancel", "r1"), false), "", "")
	wantCode(t, "its feedback", st.a.Authorize("", st.task(st.caller, "reach.event._feedback", "r1"), false), "", "")
	wantCode(t, "another caller's task of the same id", st.a.Authorize("payment.execute", st.task(st.other, "reach.task.payment.execute", "r1"), false), "", "")

	// A durable task's redelivery carries the same signature: no replay.
	d := st.task(st.caller, "reach.submit.payment.execute", "r9")
	d.Sub = nil
	for range 3 {
		wantCode(t, "a durable delivery", st.a.Authorize("payment.execute", copyOf(d), true), "", "")
	}

	for name, change := range map[string]func(*nats.Msg){
		"deadline":        func(m *nats.Msg) { m.Header.Set(streams.HeaderDeadline, "1700000099999") },
		"no deadline":     func(m *nats.Msg) { m.Header.Del(streams.HeaderDeadline) },
		"idempotency key": func(m *nats.Msg) { m.Header.Set(streams.HeaderIdempotencyKey, "order-2") },
		"body":            func(m *nats.Msg) { m.Data = []byte(`{"amount":1000}`) },
		"request id":      func(m *nats.Msg) { m.Header.Set(streams.HeaderRequestID, "r3") },
	} {
		m := st.task(st.caller, "reach.task.payment.execute", "r2-"+strings.ReplaceAll(name, " ", "-"))
		change(m)
		wantCode(t, name+" changed after signing", st.a.Authorize("payment.execute", m, false), streams.CodeUnauthorized, "changed after signing")
	}

	// Past the validity window the copy is refused as too old, and the
	// cache has forgotten it.
	st.advance(DefaultMaxAge + 2*time.Second)
	wantCode(t, "its copy, later", st.a.Authorize("payment.execute", copyOf(m0), false), streams.CodeUnauthorized, "at most")
	wantCode(t, "a fresh task", st.a.Authorize("payment.execute", st.task(st.caller, "reach.task.payment.execute", "r4"), false), "", "")
	if n := st.a.replays.len(*st.now.Load(), DefaultMaxAge); n != 1 {
		t.Errorf("the cache holds %d signatures, want 1 (the expired ones gone)", n)
	}
}

// At its cap the cache drops its oldest second and refuses what was made
// before it, never accepting a copy it forgot.
func TestReplayCacheFullShortensTheWindow(t *testing.T) {
	c := newReplayCache(replayShards) // one signature per shard
	now := time.Unix(1700000000, 0)
	sig := func(b byte) string {
		var k [32]byte
		k[0] = 0 // one shard
		k[1] = b
		return toB64(k)
	}
	if v := c.accept(sig(1), now.Add(-10*time.Second), now, time.Minute); v != replayFresh {
		t.Fatalf("first: %v", v)
	}
	if v := c.accept(sig(2), now, now, time.Minute); v != replayFresh {
		t.Fatalf("second, the shard full: %v", v)
	}
	// The first was forgotten: its copy is refused by the floor.
	if v := c.accept(sig(1), now.Add(-10*time.Second), now, time.Minute); v != replayTooEarly {
		t.Errorf("a forgotten signature's copy: %v, want refused as too early", v)
	}
	if v := c.accept(sig(2), now, now, time.Minute); v != replaySeen {
		t.Errorf("the remembered one's copy: %v, want seen", v)
	}
	// Another signature of the full shard's only second evicts it: refused.
	if v := c.accept(sig(3), now, now, time.Minute); v != replayTooEarly {
		t.Errorf("a third in the same second: %v, want refused", v)
	}
	if v := c.accept(sig(2), now, now, time.Minute); v != replayTooEarly {
		t.Errorf("the evicted one's copy: %v, want refused", v)
	}
	// A later second is accepted again.
	if v := c.accept(sig(4), now.Add(time.Second), now.Add(time.Second), time.Minute); v != replayFresh {
		t.Errorf("a fresh signature a second later: %v", v)
	}
}

// A parked task's replay runs as its caller only when a dispatcher
// identity signed it (Reach-Replayed-By), on the durable tier; the
// dispatcher's own replayer signs as the caller (SignReplay).
func TestReplayedBy(t *testing.T) {
	st := newReplayStack(t, AuthorizerConfig{})
	parked := func() *nats.Msg { // a parked entry: the caller's task, no signature
		m := nats.NewMsg("reach.submit.payment.execute")
		m.Header.Set(streams.HeaderRequestID, "r1")
		m.Header.Set(streams.HeaderSource, "billing-1")
		m.Header.Set(streams.HeaderIdempotencyKey, "r1")
		m.Data = []byte(`{"amount":1}`)
		return m
	}
	m := parked()
	st.operator.SignReplay(m, *st.now.Load())
	if m.Header.Get(streams.HeaderSource) != "billing-1" || m.Header.Get(HeaderReplayedBy) != "ops" {
		t.Fatalf("SignReplay headers: %v", m.Header)
	}
	wantCode(t, "the operator's replay", st.a.Authorize("payment.execute", m, true), "", "")

	m = parked()
	if err := st.a.SignReplay(m); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "the dispatcher's own replay", st.a.Authorize("payment.execute", m, true), "", "")

	m = parked()
	wantCode(t, "the parked entry as stored", st.a.Authorize("payment.execute", m, true), streams.CodeUnauthorized, "carries no Reach-Signature")
	m = parked()
	st.other.SignReplay(m, *st.now.Load())
	wantCode(t, "a caller's replay of another's entry", st.a.Authorize("payment.execute", m, true), streams.CodeUnauthorized, "only a dispatcher identity")
	m = parked()
	st.other.Sign(m, *st.now.Load())
	m.Header.Set(streams.HeaderSource, "billing-1")
	wantCode(t, "a caller signing another's entry", st.a.Authorize("payment.execute", m, true), streams.CodeUnauthorized, "not proven")
	m = parked()
	st.other.Sign(m, *st.now.Load())
	m.Header.Set(streams.HeaderSource, "billing-1")
	m.Header.Set(HeaderReplayedBy, "ops")
	wantCode(t, "a caller naming the operator", st.a.Authorize("payment.execute", m, true), streams.CodeUnauthorized, "not proven")
	m = parked()
	st.operator.SignReplay(m, *st.now.Load())
	m.Sub = &nats.Subscription{}
	m.Subject = "reach.task.payment.execute"
	wantCode(t, "a replay on the direct tier", st.a.Authorize("payment.execute", m, false), streams.CodeUnauthorized, "only on a durable task")
	m = parked()
	m.Header.Set(streams.HeaderSource, "billing-7")
	st.operator.SignReplay(m, *st.now.Load())
	wantCode(t, "a replay of an unknown caller", st.a.Authorize("payment.execute", m, true), streams.CodeUnauthorized, "no known identity")
	m = parked()
	m.Header.Set(streams.HeaderSource, "billing-7")
	if err := st.a.SignReplay(m); err == nil {
		t.Error("SignReplay signed for an unknown caller")
	}
	m = parked()
	st.operator.SignReplay(m, *st.now.Load())
	m.Header.Add(HeaderReplayedBy, "billing-2")
	wantCode(t, "a second Reach-Replayed-By", st.a.Authorize("payment.execute", m, true), streams.CodeUnauthorized, "appears 2 times")
	// The replay still needs the ACL to let its caller call.
	m = parked()
	m.Subject = "reach.submit.echo"
	st.operator.SignReplay(m, *st.now.Load())
	wantCode(t, "a replay the ACL does not grant its caller", st.a.Authorize("echo", m, true), streams.CodeUnauthorized, "ACL does not let billing-1")
}

func toB64(k [32]byte) string { return base64.RawURLEncoding.EncodeToString(k[:]) }

// BenchmarkReplayCacheAccept is the dispatcher's per-message cost of the
// replay cache: a fresh signature remembered (the cache at its steady size,
// 2 minutes of 1,000 messages a second).
func BenchmarkReplayCacheAccept(b *testing.B) {
	c := newReplayCache(DefaultReplayCacheSize)
	now := time.Unix(1700000000, 0)
	var k [32]byte
	i := uint64(0)
	for b.Loop() {
		i++
		for j := range 8 {
			k[j] = byte(i >> (8 * j))
		}
		at := now.Add(time.Duration(i) * time.Millisecond) // 1,000 a second
		if c.accept(toB64(k), at, at, DefaultMaxAge) != replayFresh {
			b.Fatal("refused a fresh signature")
		}
	}
}
