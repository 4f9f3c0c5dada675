package registry

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/registry/policy"
	"github.com/agent-reach/agentreach/streams"
)

// A refused value is logged once per revision, however often a reconcile's
// listing or a re-created watcher hands it over again; a new revision of
// it is logged again. Driven through the handler directly, so the count
// does not depend on how many reconciles a test happens to wait for.
func TestFollowerLogsARefusedRevisionOnce(t *testing.T) {
	nc := natstest.Connect(t, natstest.RunServer(t))
	natstest.Provision(t, nc, streams.Topology{Memory: true})
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	kv, err := js.KeyValue(ctx, streams.BucketPolicy)
	if err != nil {
		t.Fatal(err)
	}
	entry := func(key, value string) jetstream.KeyValueEntry {
		t.Helper()
		if _, err := kv.Put(ctx, key, []byte(value)); err != nil {
			t.Fatal(err)
		}
		e, err := kv.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	var logs bytes.Buffer
	published := 0
	f := newFollower(js, kv, []WatchOption{WatchLogger(zerolog.New(&logs))},
		func(kve jetstream.KeyValueEntry) (policy.Value, error) { return policy.Parse(kve.Key(), kve.Value()) },
		func(map[string]policy.Value, uint64) { published++ })
	logged := func() int { return strings.Count(logs.String(), "ignoring an invalid value") }

	good := entry("defaults", `{"retries": 1}`)
	f.Replace(map[string]jetstream.KeyValueEntry{"defaults": good})
	bad := entry("defaults", `{"retries": "one"}`)
	f.Apply(bad)
	for range 3 {
		f.Replace(map[string]jetstream.KeyValueEntry{"defaults": bad})
	}
	if logged() != 1 || published != 1 || *f.values["defaults"].Capability.Retries != 1 {
		t.Fatalf("after one bad revision seen 4 times: %d logged, %d published, value %s", logged(), published, f.values["defaults"].JSON)
	}
	worse := entry("defaults", `{"retries": -9}`)
	f.Replace(map[string]jetstream.KeyValueEntry{"defaults": worse})
	f.Replace(map[string]jetstream.KeyValueEntry{"defaults": worse})
	if logged() != 2 || published != 1 {
		t.Fatalf("after a second bad revision: %d logged, %d published", logged(), published)
	}
	if f.revision.Load() != worse.Revision() {
		t.Fatalf("revision %d, want %d", f.revision.Load(), worse.Revision())
	}
	// Gone from a listing: removed.
	f.Replace(map[string]jetstream.KeyValueEntry{})
	if _, ok := f.values["defaults"]; ok || published != 2 {
		t.Fatalf("a key missing from the listing is still there (published %d)", published)
	}
}
