package integration

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/auth"
	"github.com/agent-reach/agentreach/auth/signature"
	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/durable"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// sigsACL lets two callers call the same capabilities: mallory may read
// the dead letters of caller's tasks (reach.dlq.flaky), as the ACL lets
// every caller of a capability.
const sigsACL = `{"rules": [
  {"caller": "caller", "may_call": ["echo", "flaky"]},
  {"caller": "mallory", "may_call": ["echo", "flaky"]}]}`

// sigsStack is a secure stack with one dispatcher, an echo agent that
// counts its deliveries by request id, and a second caller, mallory,
// known to the dispatcher.
func sigsStack(t *testing.T) (*SecureStack, *dispatcher.Dispatcher, *sync.Map) {
	st := NewSecureStack(t, time.Second, sigsACL)
	st.Identity(auth.Identity{Name: "mallory", Role: auth.RoleCaller})
	d := st.Dispatcher(config.Config{})
	st.mu.Lock()
	az := st.authorizers[d]
	st.mu.Unlock()
	natstest.WaitFor(t, 10*time.Second, func() error {
		if got, want := az.Revision(), st.policyRevision(); got < want {
			return fmt.Errorf("the dispatcher has read policy revision %d, want %d", got, want)
		}
		return nil
	})
	var seen sync.Map // request id → *atomic.Int32, deliveries
	st.Agent(agentkit.Config{ID: "echo-1", Type: "echo"}, map[string]agentkit.Handler{"echo": func(_ context.Context, r *agentkit.Request) (any, error) {
		n, _ := seen.LoadOrStore(r.RequestID, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		return r.Data, nil
	}})
	WaitRoutable(t, "echo", 1, d)
	return st, d, &seen
}

func deliveries(seen *sync.Map, id string) int32 {
	if n, ok := seen.Load(id); ok {
		return n.(*atomic.Int32).Load()
	}
	return 0
}

// signedTask is a direct-tier echo task of signer, complete and signed.
func signedTask(signer *signature.Signer, id string) *nats.Msg {
	return signedTaskAt(signer, id, time.Now())
}

// signedTaskAt is signedTask signed at at.
func signedTaskAt(signer *signature.Signer, id string, at time.Time) *nats.Msg {
	m := nats.NewMsg(streams.Subjects{}.Task("echo"))
	m.Header.Set(streams.HeaderRequestID, id)
	m.Header.Set(streams.HeaderDeadline, fmt.Sprint(time.Now().Add(30*time.Second).UnixMilli()))
	m.Header.Set(streams.HeaderIdempotencyKey, "key-"+id)
	m.Data = []byte(`{"text":"hi"}`)
	signer.Sign(m, at)
	return m
}

// copyMsg is a captured copy of m with a reply subject of its own.
func copyMsg(m *nats.Msg) *nats.Msg {
	c := nats.NewMsg(m.Subject)
	c.Data = append([]byte(nil), m.Data...)
	for k, v := range m.Header {
		c.Header[k] = append([]string(nil), v...)
	}
	return c
}

func wantRefusal(t *testing.T, what string, reply *nats.Msg, rule string) {
	t.Helper()
	e := streams.ErrorFromMessage(reply)
	if e == nil || e.Code != streams.CodeUnauthorized || !strings.Contains(e.Message, rule) {
		t.Errorf("%s: answered %v (%s), want UNAUTHORIZED naming %q", what, e, reply.Data, rule)
	}
}

// Reach-Signature v2 covers the deadline, the idempotency key and the
// body: a task changed in any of them after signing is refused and reaches
// no agent; the same task unchanged is answered.
func TestSignatureCoversDeadlineIdempotencyKeyAndBody(t *testing.T) {
	st, _, seen := sigsStack(t)
	signer, err := auth.LoadSigner(st.Store.CredsFile(SecureCaller))
	if err != nil {
		t.Fatal(err)
	}
	nc := st.ConnAs(SecureCaller)
	for name, change := range map[string]func(*nats.Msg){
		"deadline": func(m *nats.Msg) {
			m.Header.Set(streams.HeaderDeadline, fmt.Sprint(time.Now().Add(time.Hour).UnixMilli()))
		},
		"idempotency-key": func(m *nats.Msg) { m.Header.Set(streams.HeaderIdempotencyKey, "another-key") },
		"body":            func(m *nats.Msg) { m.Data = []byte(`{"text":"bye"}`) },
	} {
		m := signedTask(signer, "changed-"+name)
		change(m)
		reply, err := nc.RequestMsg(m, 20*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		wantRefusal(t, name+" changed after signing", reply, "changed after signing")
		if n := deliveries(seen, "changed-"+name); n != 0 {
			t.Errorf("%s changed after signing: delivered %d times", name, n)
		}
	}
	// Control: the same task, unchanged.
	reply, err := nc.RequestMsg(signedTask(signer, "unchanged"), 20*time.Second)
	if err != nil || streams.ErrorFromMessage(reply) != nil || string(reply.Data) != `{"text":"hi"}` {
		t.Fatalf("the unchanged task: %v, %v %s", err, streams.ErrorFromMessage(reply), reply.Data)
	}
}

// A captured signed task re-published is refused the second time (its
// signature was accepted once) and runs once; a retry signed again, with
// the same request id, is answered; a v1 signature is refused naming v2.
func TestCapturedSignedTaskIsAcceptedOnce(t *testing.T) {
	st, _, seen := sigsStack(t)
	signer, err := auth.LoadSigner(st.Store.CredsFile(SecureCaller))
	if err != nil {
		t.Fatal(err)
	}
	nc := st.ConnAs(SecureCaller)
	signedAt := time.Now()
	m := signedTaskAt(signer, "captured", signedAt)
	captured := copyMsg(m)
	if reply, err := nc.RequestMsg(m, 20*time.Second); err != nil || streams.ErrorFromMessage(reply) != nil {
		t.Fatalf("the task: %v %v", err, streams.ErrorFromMessage(reply))
	}
	for i := range 2 {
		reply, err := nc.RequestMsg(copyMsg(captured), 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		wantRefusal(t, fmt.Sprintf("copy %d", i+1), reply, "accepted once")
	}
	if n := deliveries(seen, "captured"); n != 1 {
		t.Errorf("the captured task ran %d times, want once", n)
	}
	// Control: the caller retries the same request, signed again.
	reply, err := nc.RequestMsg(signedTaskAt(signer, "captured", signedAt.Add(time.Millisecond)), 20*time.Second)
	if err != nil || streams.ErrorFromMessage(reply) != nil {
		t.Fatalf("a retry with a fresh signature: %v %v", err, streams.ErrorFromMessage(reply))
	}
	// A v1 signature (the same MAC under the old version) is refused naming v2.
	old := signedTask(signer, "old")
	old.Header.Set(auth.HeaderSignature, "v1."+strings.TrimPrefix(old.Header.Get(auth.HeaderSignature), "v2."))
	reply, err = nc.RequestMsg(old, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	wantRefusal(t, "a v1 signature", reply, "sign with v2")
}

// A parked task keeps no Reach-Signature. Re-published from REACH_DLQ by
// another caller of its capability — as stored, re-signed by that caller,
// or signed by it as a replayer — it is refused UNAUTHORIZED (and parked
// as poison) and never runs as its caller; an operator's replay (a
// dispatcher identity's SignReplay) and the dispatcher's own replayer run
// it as its caller.
func TestParkedTaskReplaysOnlyThroughADispatcherIdentity(t *testing.T) {
	st, d, _ := sigsStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var broken atomic.Bool
	broken.Store(true)
	type run struct{ id, source, replayer string }
	runs := make(chan run, 16)
	st.Agent(agentkit.Config{ID: "flaky-1", Type: "flaky"}, map[string]agentkit.Handler{"flaky": func(_ context.Context, r *agentkit.Request) (any, error) {
		if broken.Load() {
			return nil, agentkit.BadRequest("not today")
		}
		runs <- run{r.RequestID, r.Header.Get(streams.HeaderSource), r.Header.Get(auth.HeaderReplayedBy)}
		return r.Data, nil
	}})
	WaitRoutable(t, "flaky", 1, d)
	subjects := streams.Subjects{}

	// What lands in REACH_DLQ, as an admin and as mallory (who may read
	// the dead letters of what it may call) see it.
	parked := make(chan *nats.Msg, 16)
	if _, err := st.Conn().ChanSubscribe(subjects.DeadLetter("flaky"), parked); err != nil {
		t.Fatal(err)
	}
	mallory := st.ConnAs("mallory")
	stolen, err := mallory.SubscribeSync(subjects.DeadLetter("flaky"))
	if err != nil {
		t.Fatal(err)
	}
	if err := mallory.Flush(); err != nil {
		t.Fatal(err)
	}
	waitParked := func(id string) *nats.Msg {
		t.Helper()
		for {
			select {
			case m := <-parked:
				if m.Header.Get(streams.HeaderRequestID) == id {
					return m
				}
			case <-ctx.Done():
				t.Fatalf("%s was not parked", id)
			}
		}
	}

	c := st.Client()
	submit := func(id string) {
		t.Helper()
		if _, err := c.Submit(ctx, "flaky", map[string]int{"n": 1}, agentkit.WithRequestID(id)); err != nil {
			t.Fatal(err)
		}
	}
	submit("parked-1")
	entry := waitParked("parked-1")
	if v := entry.Header.Values(auth.HeaderSignature); len(v) > 0 {
		t.Fatalf("the dead letter stores the caller's signature %q", v)
	}
	if entry.Header.Get(streams.HeaderSource) != SecureCaller {
		t.Fatalf("the dead letter's Reach-Source is %q", entry.Header.Get(streams.HeaderSource))
	}
	copied, err := stolen.NextMsg(20 * time.Second)
	if err != nil {
		t.Fatalf("mallory reads the dead letters of flaky: %v", err)
	}
	broken.Store(false)

	// Mallory re-publishes the entry to run it as caller.
	malloryGate, err := auth.LoadSigner(st.Store.CredsFile("mallory"))
	if err != nil {
		t.Fatal(err)
	}
	mjs, err := jetstream.New(mallory)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []struct {
		name, rule string
		sign       func(*nats.Msg)
	}{
		{"as stored", "carries no Reach-Signature", func(*nats.Msg) {}},
		{"signed by mallory as a replayer", "only a dispatcher identity", func(m *nats.Msg) { malloryGate.SignReplay(m, time.Now()) }},
		{"signed by mallory, naming caller", "not proven", func(m *nats.Msg) {
			malloryGate.Sign(m, time.Now())
			m.Header.Set(streams.HeaderSource, SecureCaller)
		}},
		{"signed by mallory, naming the operator as replayer", "not proven", func(m *nats.Msg) {
			malloryGate.Sign(m, time.Now())
			m.Header.Set(streams.HeaderSource, SecureCaller)
			m.Header.Set(auth.HeaderReplayedBy, SecureAdmin)
		}},
	} {
		id := "stolen-" + strings.ReplaceAll(a.name, " ", "-")
		id = strings.ReplaceAll(strings.ReplaceAll(id, ",", ""), "--", "-")
		m := copyMsg(copied)
		m.Subject = subjects.Submit("flaky")
		for _, k := range []string{streams.HeaderDLQReason, streams.HeaderDLQAttempts, streams.HeaderError, streams.HeaderStatus,
			streams.HeaderLastError, streams.HeaderNode} {
			m.Header.Del(k)
		}
		m.Header.Set(streams.HeaderRequestID, id)
		m.Header.Set(streams.HeaderMsgID, id)
		a.sign(m)
		if _, err := mjs.PublishMsg(ctx, m); err != nil {
			t.Fatalf("%s: mallory may submit flaky tasks: %v", a.name, err)
		}
		p := waitParked(id)
		if code, reason := p.Header.Get(streams.HeaderError), p.Header.Get(streams.HeaderLastError); code != string(streams.CodeUnauthorized) ||
			!strings.Contains(reason, a.rule) {
			t.Errorf("%s: parked with %s %q, want UNAUTHORIZED naming %q", a.name, code, reason, a.rule)
		}
		if v := p.Header.Values(auth.HeaderSignature); len(v) > 0 {
			t.Errorf("%s: the dead letter stores a signature %q", a.name, v)
		}
	}

	// Control: the operator replays the entry with a dispatcher identity.
	admin, err := jetstream.New(st.Conn())
	if err != nil {
		t.Fatal(err)
	}
	operator, err := auth.LoadSigner(st.Store.CredsFile(SecureAdmin))
	if err != nil {
		t.Fatal(err)
	}
	list, err := durable.ListParked(ctx, admin, subjects, streams.StreamDLQ)
	if err != nil {
		t.Fatal(err)
	}
	entryOf := func(id string) durable.Parked {
		for _, p := range list {
			if p.RequestID == id {
				return p
			}
		}
		t.Fatalf("no dead letter of %s in %d", id, len(list))
		return durable.Parked{}
	}
	if err := durable.Replay(ctx, admin, subjects, entryOf("parked-1"), time.Time{}, durable.ReplaySign(func(m *nats.Msg) error {
		operator.SignReplay(m, time.Now())
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-runs:
		if r != (run{"parked-1", SecureCaller, SecureAdmin}) {
			t.Errorf("the operator's replay ran as %+v, want parked-1 of %s replayed by %s", r, SecureCaller, SecureAdmin)
		}
	case <-ctx.Done():
		t.Fatal("the operator's replay did not run")
	}
	// None of mallory's copies ran.
	select {
	case r := <-runs:
		t.Fatalf("another run: %+v", r)
	default:
	}

	// Control: the dispatcher's own replayer runs a dead letter as its caller.
	broken.Store(true)
	submit("parked-2")
	waitParked("parked-2")
	broken.Store(false)
	for _, p := range list { // mallory's refused copies are no longer needed
		if strings.HasPrefix(p.RequestID, "stolen-") {
			if err := durable.DeleteParked(ctx, admin, streams.StreamDLQ, p.Seq); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n, err := d.ReplayDeadLetters(ctx); err != nil || n < 1 {
		t.Fatalf("the replayer: %d, %v", n, err)
	}
	select {
	case r := <-runs:
		if r.id != "parked-2" || r.source != SecureCaller {
			t.Errorf("the replayer's replay ran as %+v, want parked-2 of %s", r, SecureCaller)
		}
	case <-ctx.Done():
		t.Fatal("the replayer's replay did not run")
	}
}
