package kvwatch_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/internal/kvwatch"
	"github.com/agent-reach/agentreach/internal/natstest"
)

// ListDirect lists the live keys with their last values and revisions:
// a deleted key and a purged one are left out, an overwritten key has its
// newest value, as a watcher's listing has them.
func TestListDirectListsTheLiveKeys(t *testing.T) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "DIRECT"})
	if err != nil {
		t.Fatal(err)
	}
	// Empty: no key, no error.
	l, err := kvwatch.ListDirect(ctx, js, "DIRECT")
	if err != nil || len(l.Entries) != 0 {
		t.Fatalf("empty bucket: %v, %v", l.Entries, err)
	}
	for _, k := range []string{"a", "b", "c", "d"} {
		if _, err := kv.Put(ctx, k, []byte("v1-"+k)); err != nil {
			t.Fatal(err)
		}
	}
	rev, err := kv.Put(ctx, "a", []byte("v2-a"))
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := kv.Purge(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	l, err = kvwatch.ListDirect(ctx, js, "DIRECT")
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(maps.Keys(l.Entries)); !slices.Equal(got, []string{"a", "d"}) {
		t.Fatalf("keys %v, want [a d]", got)
	}
	a := l.Entries["a"]
	if string(a.Value()) != "v2-a" || a.Revision() != rev || a.Operation() != jetstream.KeyValuePut || a.Key() != "a" || a.Bucket() != "DIRECT" || a.Created().IsZero() {
		t.Fatalf("a: %q rev %d (want %d) op %v", a.Value(), a.Revision(), rev, a.Operation())
	}
	if l.LastSeq != 7 {
		t.Fatalf("last sequence %d, want 7", l.LastSeq)
	}
	// The control: a watcher lists the same keys and values.
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	watched := map[string]string{}
	for e := range w.Updates() {
		if e == nil {
			break
		}
		watched[e.Key()] = string(e.Value())
	}
	direct := map[string]string{}
	for k, e := range l.Entries {
		direct[k] = string(e.Value())
	}
	if !maps.Equal(watched, direct) {
		t.Fatalf("direct %v, watcher %v", direct, watched)
	}
}

// A bucket that does not exist has no replica to answer: ErrDirectUnsupported,
// at once, not a timeout.
func TestListDirectWithoutTheBucket(t *testing.T) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := kvwatch.ListDirect(ctx, js, "NONE"); !errors.Is(err, kvwatch.ErrDirectUnsupported) {
		t.Fatalf("err %v, want ErrDirectUnsupported", err)
	}
}

// With two of three nodes gone, the JetStream meta group and the bucket's
// stream have no leader (no watcher can be created), but the surviving
// replica still answers a direct listing with the bucket's last state.
func TestListDirectAnswersWithoutALeader(t *testing.T) {
	servers := natstest.RunCluster(t, 3)
	nc, err := nats.Connect(natstest.ClusterURL(servers))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "DIRECT", Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b"} {
		if _, err := kv.Put(ctx, k, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	// Every replica holds both keys before two of them go.
	natstest.WaitFor(t, 30*time.Second, func() error {
		for _, s := range servers {
			jsz, err := s.Jsz(&server.JSzOptions{Accounts: true, Streams: true})
			if err != nil {
				return err
			}
			n := uint64(0)
			for _, a := range jsz.AccountDetails {
				for _, st := range a.Streams {
					if st.Name == "KV_DIRECT" {
						n = st.State.Msgs
					}
				}
			}
			if n != 2 {
				return fmt.Errorf("%s holds %d of 2", s.Name(), n)
			}
		}
		return nil
	})
	var survivor *server.Server
	for i, s := range servers {
		if i == 0 {
			survivor = s
			continue
		}
		natstest.Stop(s)
	}
	snc := natstest.Connect(t, survivor)
	sjs, _ := jetstream.New(snc)
	natstest.WaitFor(t, 30*time.Second, func() error {
		dctx, dcancel := context.WithTimeout(ctx, 2*time.Second)
		defer dcancel()
		l, err := kvwatch.ListDirect(dctx, sjs, "DIRECT")
		if err != nil {
			return err
		}
		if got := slices.Sorted(maps.Keys(l.Entries)); !slices.Equal(got, []string{"a", "b"}) {
			return fmt.Errorf("keys %v", got)
		}
		return nil
	})
}
