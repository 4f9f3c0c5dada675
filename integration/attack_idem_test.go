package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/auth"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/streams"
)

// idemACL lets alice and bob call math.add.
const idemACL = `{"rules": [{"caller": "alice", "may_call": ["math.add"]}, {"caller": "bob", "may_call": ["math.add"]}]}`

// idemStack is a secure stack with callers alice and bob and the agent
// math-1 serving math.add, which answers who called it and how many times
// it has executed.
func idemStack(t *testing.T) (*SecureStack, *atomic.Int32) {
	st := NewSecureStack(t, time.Second, idemACL)
	d := st.Dispatcher(config.Config{})
	st.Identity(auth.Identity{Name: "alice", Role: auth.RoleCaller})
	st.Identity(auth.Identity{Name: "bob", Role: auth.RoleCaller})
	var n atomic.Int32
	st.Agent(agentkit.Config{ID: "math-1", Type: "math", MaxConcurrent: 4}, map[string]agentkit.Handler{
		"math.add": func(_ context.Context, r *agentkit.Request) (any, error) {
			return map[string]any{"caller": r.Header.Get(streams.HeaderSource), "n": n.Add(1)}, nil
		}})
	WaitRoutable(t, "math.add", 1, d)
	return st, &n
}

type addResult struct {
	Caller string `json:"caller"`
	N      int    `json:"n"`
}

// add calls math.add as c with idempotency key and returns what it
// answered and whether it was a replay.
func add(t *testing.T, c *agentkit.Client, key string) (addResult, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := c.Call(ctx, "math.add", map[string]int{"a": 1}, agentkit.WithIdempotencyKey(key))
	if err != nil {
		t.Fatalf("math.add with key %q: %v", key, err)
	}
	var out addResult
	if err := r.Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out, r.Header.Get(agentkit.HeaderReplayed) == "true"
}

// Bob reusing alice's idempotency key executes again and gets his own
// result, stored under his own bucket key; alice's retry under her key is
// still replayed hers (the control).
func TestAttackIdemAnotherCallersKeyIsAnotherExecution(t *testing.T) {
	st, n := idemStack(t)
	alice, bob := st.ClientAs("alice"), st.ClientAs("bob")

	first, replayed := add(t, alice, "order-1")
	if first != (addResult{"alice", 1}) || replayed {
		t.Fatalf("alice's first call: %+v (replayed %v), want {alice 1}", first, replayed)
	}
	again, replayed := add(t, alice, "order-1")
	if again != first || !replayed {
		t.Fatalf("alice's retry: %+v (replayed %v), want her first outcome %+v replayed", again, replayed, first)
	}
	got, replayed := add(t, bob, "order-1")
	if got != (addResult{"bob", 2}) || replayed {
		t.Fatalf("bob with alice's key: %+v (replayed %v), want his own execution {bob 2}", got, replayed)
	}
	if n.Load() != 2 {
		t.Fatalf("%d executions, want 2", n.Load())
	}

	kv := idemBucket(t, st.Conn())
	for caller, want := range map[string]addResult{"alice": first, "bob": got} {
		key := streams.IdempotencyKey("math.add", caller, "order-1")
		e, err := kv.Get(context.Background(), key)
		if err != nil {
			t.Fatalf("no outcome under %s: %v", key, err)
		}
		var rec struct {
			State string `msgpack:"state"`
			Owner string `msgpack:"owner"`
			Data  []byte `msgpack:"data"`
		}
		var out addResult
		if err := msgpack.Unmarshal(e.Value(), &rec); err != nil || streams.Decode(streams.ContentTypeMsgpack, rec.Data, &out) != nil {
			t.Fatalf("%s: unreadable record %q: %v", key, e.Value(), err)
		}
		if rec.State != "done" || rec.Owner != "math-1" || out != want {
			t.Errorf("%s holds {%s %s %+v}, want {done math-1 %+v}", key, rec.State, rec.Owner, out, want)
		}
	}
}

// An agent of another type can neither read nor forge math.add's stored
// outcomes, by the KV API or by the JetStream API, nor create a consumer
// on the bucket (which would let it pick a deliver subject). The math
// agent reads and writes its own (the control), and a dispatcher may
// create consumers.
func TestAttackIdemAnAgentKeepsOnlyItsOwnOutcomes(t *testing.T) {
	st, n := idemStack(t)
	alice := st.ClientAs("alice")
	st.Identity(auth.Identity{Name: "evil-1", Role: auth.RoleAgent, Type: "evil"})
	evil := watch(t, func(o ...nats.Option) *nats.Conn { return st.ConnAs("evil-1", o...) })
	first, _ := add(t, alice, "order-2")
	victim := streams.IdempotencyKey("math.add", "alice", "order-2")
	forged := streams.IdempotencyKey("math.add", "alice", "order-3")
	record, err := msgpack.Marshal(map[string]any{"state": "done", "owner": "math-1", "request_id": "r",
		"content_type": streams.ContentTypeJSON, "data": []byte(`{"caller":"alice","n":99}`)})
	if err != nil {
		t.Fatal(err)
	}
	evilKV := idemBucket(t, evil.nc) // binding (stream info) is allowed

	// By the KV API: each refused with a permissions violation.
	kvOp := func(op func(ctx context.Context) error) func(*nats.Conn) error {
		return func(*nats.Conn) error {
			// A refused request gets no reply: it ends at this timeout,
			// and the refusal is what refusedOn waits for.
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if err := op(ctx); err == nil {
				return errors.New("it succeeded")
			}
			return nil
		}
	}
	kvSubject := "$KV." + streams.BucketIdempotency + "."
	direct := "$JS.API.DIRECT.GET.KV_" + streams.BucketIdempotency + "."
	for _, c := range []struct {
		what, subject string
		do            func(*nats.Conn) error
	}{
		{"kv get", direct + kvSubject + victim, kvOp(func(ctx context.Context) error { _, err := evilKV.Get(ctx, victim); return err })},
		{"kv put", kvSubject + forged, kvOp(func(ctx context.Context) error { _, err := evilKV.Put(ctx, forged, record); return err })},
		{"kv create", kvSubject + forged, kvOp(func(ctx context.Context) error { _, err := evilKV.Create(ctx, forged, record); return err })},
		{"kv delete", kvSubject + victim, kvOp(func(ctx context.Context) error { return evilKV.Delete(ctx, victim) })},
		{"kv watch", "$JS.API.CONSUMER.CREATE.KV_" + streams.BucketIdempotency + ".", kvOp(func(ctx context.Context) error {
			w, err := evilKV.Watch(ctx, "math.>")
			if err == nil {
				_ = w.Stop()
			}
			return err
		})},
		{"raw consumer", "$JS.API.CONSUMER.CREATE.KV_" + streams.BucketIdempotency + ".c1." + kvSubject + "math.>", func(nc *nats.Conn) error {
			return nc.PublishRequest("$JS.API.CONSUMER.CREATE.KV_"+streams.BucketIdempotency+".c1."+kvSubject+"math.>", nc.NewRespInbox(),
				fmt.Appendf(nil, `{"stream_name":"KV_%s","config":{"deliver_subject":"reach.agent.math-1","filter_subject":"%smath.>"}}`,
					streams.BucketIdempotency, kvSubject))
		}},
		{"message get", "$JS.API.STREAM.MSG.GET.KV_" + streams.BucketIdempotency, func(nc *nats.Conn) error {
			return nc.PublishRequest("$JS.API.STREAM.MSG.GET.KV_"+streams.BucketIdempotency, nc.NewRespInbox(),
				[]byte(`{"last_by_subj":"`+kvSubject+victim+`"}`))
		}},
		{"direct get by body", "$JS.API.DIRECT.GET.KV_" + streams.BucketIdempotency, func(nc *nats.Conn) error {
			return nc.PublishRequest("$JS.API.DIRECT.GET.KV_"+streams.BucketIdempotency, nc.NewRespInbox(),
				[]byte(`{"last_by_subj":"`+kvSubject+victim+`"}`))
		}},
	} {
		if ok, detail := refusedOn(evil, c.subject, c.do); !ok {
			t.Errorf("%s by evil-1 was not refused on %s: %s", c.what, c.subject, detail)
		}
	}

	// Nothing it tried landed: alice's outcome is still hers, and the key
	// evil-1 tried to forge executes for real.
	if got, replayed := add(t, alice, "order-2"); got != first || !replayed {
		t.Errorf("alice's retry after the attack: %+v (replayed %v), want %+v replayed", got, replayed, first)
	}
	if got, replayed := add(t, alice, "order-3"); got != (addResult{"alice", 2}) || replayed || n.Load() != 2 {
		t.Errorf("the key evil-1 tried to forge: %+v (replayed %v), want a real execution {alice 2}", got, replayed)
	}

	// Controls: each agent stores and reads its own capabilities' outcomes;
	// a dispatcher may watch the bucket.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range []struct {
		kv  jetstream.KeyValue
		key string
	}{
		{evilKV, streams.IdempotencyKey("evil", "alice", "k")},
		{evilKV, streams.IdempotencyKey("evil.sub", "alice", "k")},
		{idemBucket(t, st.ConnAs("math-1")), streams.IdempotencyKey("math.add", "alice", "k")},
	} {
		if _, err := c.kv.Create(ctx, c.key, record); err != nil {
			t.Errorf("create %s: %v", c.key, err)
		} else if _, err := c.kv.Get(ctx, c.key); err != nil {
			t.Errorf("get %s: %v", c.key, err)
		} else if err := c.kv.Delete(ctx, c.key); err != nil {
			t.Errorf("delete %s: %v", c.key, err)
		}
	}
	w, err := idemBucket(t, st.Conn()).Watch(ctx, "math.>")
	if err != nil {
		t.Fatalf("a dispatcher cannot watch %s: %v", streams.BucketIdempotency, err)
	}
	_ = w.Stop()
}

// refusedOn is watched.violated for a subject that starts with prefix
// (a consumer's name is the client's choice): it runs do and reports
// whether the server refused a publish there with a permissions violation.
func refusedOn(w *watched, prefix string, do func(nc *nats.Conn) error) (bool, string) {
	w.t.Helper()
	return w.refused(prefix, func(err error) bool {
		return errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+prefix)
	}, do)
}

// idemBucket opens REACH_IDEMPOTENCY on nc.
func idemBucket(t *testing.T, nc *nats.Conn) jetstream.KeyValue {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, streams.BucketIdempotency)
	if err != nil {
		t.Fatalf("open %s: %v", streams.BucketIdempotency, err)
	}
	return kv
}
