package registry_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/registry/policy"
	"github.com/agent-reach/agentreach/streams"
)

func policyBucket(t *testing.T, js jetstream.JetStream) jetstream.KeyValue {
	t.Helper()
	kv, err := js.KeyValue(context.Background(), streams.BucketPolicy)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

func startPolicyWatcher(t *testing.T, js jetstream.JetStream, opts ...registry.WatchOption) *registry.PolicyWatcher {
	t.Helper()
	w, err := registry.NewPolicyWatcher(context.Background(), js, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

func putPolicy(t *testing.T, kv jetstream.KeyValue, key, src string) uint64 {
	t.Helper()
	rev, err := registry.PutPolicy(context.Background(), kv, key, []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

// strategy returns capability's resolved strategy, "" when none is set.
func strategy(w *registry.PolicyWatcher, capability string) string {
	if s := w.Current().For(capability).Strategy; s != nil {
		return *s
	}
	return ""
}

func waitStrategy(t *testing.T, w *registry.PolicyWatcher, capability, want string) {
	t.Helper()
	natstest.WaitFor(t, 5*time.Second, func() error {
		if got := strategy(w, capability); got != want {
			return fmt.Errorf("strategy of %s is %q, want %q", capability, got, want)
		}
		return nil
	})
}

func TestPolicyWatcherResolvesCapabilities(t *testing.T) {
	_, js := setup(t, 0)
	kv := policyBucket(t, js)
	putPolicy(t, kv, "defaults", `{"strategy": "least_load", "retries": 3, "breaker": {"cooldown": "10s", "probes": 2},
		"require": {"labels": {"region": "eu-west"}}}`)
	last := putPolicy(t, kv, "capability.orders.query", `{"retries": -1, "breaker": {"probes": 5},
		"require": {"labels": {"engine": "postgres"}}}`)
	w := startPolicyWatcher(t, js)
	set := w.Current()
	if set.Revision() != last || w.Revision() != last {
		t.Fatalf("revision %d / %d after Start, want %d", set.Revision(), w.Revision(), last)
	}
	p := set.For("orders.query")
	if *p.Strategy != "least_load" || *p.Retries != -1 || time.Duration(*p.Breaker.Cooldown) != 10*time.Second ||
		*p.Breaker.Probes != 5 || p.Require.Labels["region"] != "eu-west" || p.Require.Labels["engine"] != "postgres" || p.AckTimeout != nil {
		t.Fatalf("orders.query resolved to %+v", p)
	}
	other := set.For("billing.pay")
	if *other.Retries != 3 || *other.Breaker.Probes != 2 || other.Require.Labels["engine"] != "" {
		t.Fatalf("a capability without its own key resolved to %+v", other)
	}
	if v, ok := set.Value("capability.orders.query"); !ok || v.Capability == nil {
		t.Fatalf("Value: %+v, %v", v, ok)
	}
}

func TestPolicyWatcherKeepsTheLastGoodValue(t *testing.T) {
	_, js := setup(t, 0)
	kv := policyBucket(t, js)
	logs := &logBuffer{}
	w := startPolicyWatcher(t, js, registry.WatchLogger(zerolog.New(logs)))
	if strategy(w, "echo") != "" || w.Current().Revision() != 0 {
		t.Fatalf("an empty bucket resolves to %q at revision %d", strategy(w, "echo"), w.Current().Revision())
	}

	// A put comes into force (in practice within milliseconds; the bound is
	// wide, as a loaded machine can stall the watcher).
	changed := w.Changed()
	start := time.Now()
	rev := putPolicy(t, kv, "capability.echo", "strategy: round_robin\n")
	natstest.WaitFor(t, 10*time.Second, func() error {
		if got := strategy(w, "echo"); got != "round_robin" {
			return fmt.Errorf("strategy %q", got)
		}
		return nil
	})
	t.Logf("a policy put was in force after %v", time.Since(start))
	select {
	case <-changed:
	default:
		t.Fatal("Changed not closed by the change")
	}
	if w.Current().Revision() != rev {
		t.Fatalf("set at revision %d, want %d", w.Current().Revision(), rev)
	}

	// Garbage put by hand: logged once, the last good value stays.
	bad, err := kv.Put(context.Background(), "capability.echo", []byte(`{"strategy": "fastest"}`))
	if err != nil {
		t.Fatal(err)
	}
	logs.waitCount(t, refused, 1)
	if !strings.Contains(logs.String(), `strategy: unknown strategy \"fastest\"`) {
		t.Fatalf("the log does not name the field:\n%s", logs)
	}
	if got := strategy(w, "echo"); got != "round_robin" || w.Current().Revision() != rev || w.Revision() != bad {
		t.Fatalf("after garbage: strategy %q at %d, watcher at %d; want round_robin at %d, watcher at %d",
			got, w.Current().Revision(), w.Revision(), rev, bad)
	}

	// Keys of later kinds do not upset it.
	putPolicy(t, kv, "acl", `{"rules": [{"caller": "billing-*", "may_call": ["payment.*"]}]}`)
	natstest.WaitFor(t, 5*time.Second, func() error {
		if _, ok := w.Current().Value("acl"); !ok {
			return errors.New("acl not kept")
		}
		return nil
	})

	// A delete removes the capability's policy.
	if err := kv.Delete(context.Background(), "capability.echo"); err != nil {
		t.Fatal(err)
	}
	waitStrategy(t, w, "echo", "")
	if n := logs.count(refused); n != 1 {
		t.Fatalf("%d refusals logged, want 1:\n%s", n, logs)
	}
}

func TestPolicyWatcherFollowsThroughServerRestart(t *testing.T) {
	js, restart := restartableServer(t)
	kv := policyBucket(t, js)
	w := startPolicyWatcher(t, js, registry.WatchReconcileInterval(time.Hour))
	putPolicy(t, kv, "capability.echo", `{"strategy": "hash"}`)
	waitStrategy(t, w, "echo", "hash")

	restart()
	putPolicy(t, kv, "capability.echo", `{"strategy": "round_robin"}`)
	waitStrategy(t, w, "echo", "round_robin")
}

func TestPolicyHelpers(t *testing.T) {
	_, js := setup(t, 0)
	ctx := context.Background()
	kv := policyBucket(t, js)
	if _, err := registry.PutPolicy(ctx, kv, "capabilities.echo", []byte(`{}`)); !errors.Is(err, policy.ErrInvalid) {
		t.Fatalf("PutPolicy under an unknown key: %v", err)
	}
	if _, err := registry.PutPolicy(ctx, kv, "defaults", []byte(`{"retries": -5}`)); !errors.Is(err, policy.ErrInvalid) {
		t.Fatalf("PutPolicy of an invalid value: %v", err)
	}
	if _, err := registry.GetPolicy(ctx, kv, "defaults"); !errors.Is(err, registry.ErrNoPolicy) {
		t.Fatalf("an invalid value was written, or Get says %v", err)
	}

	// UpdatePolicy writes only over the revision it was given.
	rev, err := registry.UpdatePolicy(ctx, kv, "defaults", []byte("retries: 1\n"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := registry.UpdatePolicy(ctx, kv, "defaults", []byte("retries: 2\n"), 0); err == nil {
		t.Fatal("UpdatePolicy at revision 0 overwrote an existing key")
	}
	if _, err := registry.UpdatePolicy(ctx, kv, "defaults", []byte("retries: 2\n"), rev+7); err == nil {
		t.Fatal("UpdatePolicy at a stale revision wrote")
	}
	if _, err := registry.UpdatePolicy(ctx, kv, "defaults", []byte("retries: 2\n"), rev); err != nil {
		t.Fatal(err)
	}
	e, err := registry.GetPolicy(ctx, kv, "defaults")
	if err != nil || e.Err != nil || string(e.Raw) != `{"retries":2}` || *e.Value.Capability.Retries != 2 {
		t.Fatalf("Get: %+v, %v", e, err)
	}
	if _, err := kv.Put(ctx, "capability.echo", []byte(`{"retries": "x"}`)); err != nil {
		t.Fatal(err)
	}
	list, err := registry.ListPolicy(ctx, kv)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Key != "capability.echo" || !errors.Is(list[0].Err, policy.ErrInvalid) ||
		list[1].Key != "defaults" || list[1].Err != nil {
		t.Fatalf("List: %+v", list)
	}
}
