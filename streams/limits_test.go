package streams_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// TestEveryBucketAndStreamHasSizeLimits: no identity can fill the store, on
// file or in memory, whatever the knobs say.
func TestEveryBucketAndStreamHasSizeLimits(t *testing.T) {
	for _, topo := range []streams.Topology{{}, {Memory: true}, {MaxBytes: 1 << 20, MaxPayload: 8 << 20}} {
		for _, kv := range topo.KeyValueConfigs() {
			if kv.MaxBytes <= 0 || kv.MaxValueSize <= 0 {
				t.Errorf("%+v: bucket %s has max bytes %d, max value size %d", topo, kv.Bucket, kv.MaxBytes, kv.MaxValueSize)
			}
		}
		for _, s := range topo.StreamConfigs() {
			if s.MaxBytes <= 0 || s.MaxMsgSize <= 0 {
				t.Errorf("%+v: stream %s has max bytes %d, max message size %d", topo, s.Name, s.MaxBytes, s.MaxMsgSize)
			}
			if s.Name != streams.StreamEvents && s.Discard != jetstream.DiscardNew {
				t.Errorf("%+v: stream %s drops its oldest messages when full", topo, s.Name)
			}
		}
	}
	if err := (streams.Topology{MaxBytes: 1000}).Validate(); err == nil {
		t.Error("a topology of 1000 bytes per stream is valid")
	}
}

// limitsServer provisions topo on a new server and returns its JetStream.
func limitsServer(t *testing.T, topo streams.Topology) (jetstream.JetStream, context.Context) {
	t.Helper()
	nc := natstest.Connect(t, natstest.RunServer(t))
	natstest.Provision(t, nc, topo)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return js, ctx
}

// TestAValueOverItsBucketsLimitIsRefused: a record larger than
// RecordMaxValueSize is refused, stores nothing, and says why; one within
// it is stored.
func TestAValueOverItsBucketsLimitIsRefused(t *testing.T) {
	js, ctx := limitsServer(t, streams.Topology{Memory: true})
	kv, err := js.KeyValue(ctx, streams.BucketAgents)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "small", []byte(`{"id":"small"}`)); err != nil {
		t.Fatalf("a small record is refused: %v", err)
	}
	_, err = kv.Put(ctx, "huge", bytes.Repeat([]byte("x"), streams.RecordMaxValueSize+1))
	if !streams.IsTooLarge(err) {
		t.Fatalf("a record of %d bytes: got %v, want the server's size refusal", streams.RecordMaxValueSize+1, err)
	}
	if _, err := kv.Get(ctx, "huge"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("the refused record is stored: %v", err)
	}
}

// TestAFullStreamRefusesTheNextMessage: REACH_TASKS at its MaxBytes refuses
// the next submission with the buffer-full error (never a silent drop, the
// earlier tasks all stay), a bucket at its MaxBytes refuses the next new
// key; REACH_RESULTS refuses too, rather than drop old results.
func TestAFullStreamRefusesTheNextMessage(t *testing.T) {
	const maxBytes = 1 << 20
	js, ctx := limitsServer(t, streams.Topology{Memory: true, MaxBytes: maxBytes})
	body := bytes.Repeat([]byte("x"), 16<<10)
	fill := func(subject func(i int) string) (int, error) {
		for i := 0; ; i++ {
			if i > 2*maxBytes/len(body) {
				return i, fmt.Errorf("%d messages of %d bytes stored in %d bytes", i, len(body), maxBytes)
			}
			if _, err := js.Publish(ctx, subject(i), body); err != nil {
				return i, err
			}
		}
	}
	subjects := streams.Subjects{}
	for _, c := range []struct {
		stream  string
		subject func(i int) string
	}{
		{streams.StreamTasks, func(i int) string { return subjects.Submit(fmt.Sprintf("cap%d", i)) }},
		{streams.StreamResults, func(i int) string { return subjects.Result("alice", fmt.Sprintf("r%d", i)) }},
		{"KV_" + streams.BucketIdempotency, func(i int) string { return fmt.Sprintf("$KV.%s.k%d", streams.BucketIdempotency, i) }},
	} {
		stored, err := fill(c.subject)
		if stored == 0 || !streams.IsBufferFull(err) {
			t.Fatalf("%s: after %d messages: got %v, want the server's refusal at max bytes", c.stream, stored, err)
		}
		s, err := js.Stream(ctx, c.stream)
		if err != nil {
			t.Fatal(err)
		}
		if n := s.CachedInfo().State.Msgs; n != uint64(stored) {
			t.Fatalf("%s holds %d messages, %d were acknowledged: a full stream dropped some", c.stream, n, stored)
		}
	}
	// Small messages still fit elsewhere: the limit is per stream.
	if _, err := js.Publish(ctx, subjects.DeadLetter("echo"), []byte(`{}`)); err != nil {
		t.Fatalf("a dead letter is refused: %v", err)
	}
}

// TestProvisionGivesAnOldDeploymentSizeLimits: buckets and streams made
// before size limits existed get them at the next Provision; limits an
// operator set are kept, and so is what the streams hold.
func TestProvisionGivesAnOldDeploymentSizeLimits(t *testing.T) {
	nc := natstest.Connect(t, natstest.RunServer(t))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topo := streams.Topology{Memory: true}
	// The topology as it was: no size limits anywhere but the events'.
	for _, cfg := range topo.KeyValueConfigs() {
		cfg.MaxBytes, cfg.MaxValueSize = 0, 0
		if _, err := js.CreateKeyValue(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	const operatorsLimit = 3 << 20
	for _, cfg := range topo.StreamConfigs() {
		cfg.MaxBytes, cfg.MaxMsgSize = 0, 0
		switch cfg.Name {
		case streams.StreamEvents:
			cfg.MaxBytes = operatorsLimit
		case streams.StreamResults, streams.StreamDLQ, streams.StreamReview:
			cfg.Discard = jetstream.DiscardOld
		}
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := js.Publish(ctx, streams.Subjects{}.Submit("echo"), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := streams.Provision(ctx, js, topo); err != nil {
		t.Fatal(err)
	}
	want := nc.MaxPayload()
	for _, kv := range topo.KeyValueConfigs() {
		s, err := js.Stream(ctx, "KV_"+kv.Bucket)
		if err != nil {
			t.Fatal(err)
		}
		got := s.CachedInfo().Config
		if got.MaxBytes != kv.MaxBytes || got.MaxMsgSize <= 0 || int64(got.MaxMsgSize) > max(want, int64(kv.MaxValueSize)) ||
			got.Discard != jetstream.DiscardNew || got.AllowRollup != (kv.LimitMarkerTTL > 0) {
			t.Errorf("bucket %s after Provision: max bytes %d, max value size %d, discard %v, rollups %v",
				kv.Bucket, got.MaxBytes, got.MaxMsgSize, got.Discard, got.AllowRollup)
		}
	}
	for _, cfg := range topo.StreamConfigs() {
		s, err := js.Stream(ctx, cfg.Name)
		if err != nil {
			t.Fatal(err)
		}
		got := s.CachedInfo()
		wantBytes, wantDiscard := cfg.MaxBytes, jetstream.DiscardNew
		if cfg.Name == streams.StreamEvents {
			wantBytes, wantDiscard = operatorsLimit, jetstream.DiscardOld
		}
		if got.Config.MaxBytes != wantBytes || int64(got.Config.MaxMsgSize) != want || got.Config.Discard != wantDiscard {
			t.Errorf("stream %s after Provision: max bytes %d (want %d), max message size %d (want %d), discard %v (want %v)",
				cfg.Name, got.Config.MaxBytes, wantBytes, got.Config.MaxMsgSize, want, got.Config.Discard, wantDiscard)
		}
		if cfg.Name == streams.StreamTasks && got.State.Msgs != 1 {
			t.Errorf("REACH_TASKS holds %d tasks after Provision, want the 1 it held", got.State.Msgs)
		}
	}
	// A second Provision changes nothing: it is idempotent.
	before, _ := js.Stream(ctx, streams.StreamResults)
	if err := streams.Provision(ctx, js, topo); err != nil {
		t.Fatal(err)
	}
	after, _ := js.Stream(ctx, streams.StreamResults)
	if !after.CachedInfo().Created.Equal(before.CachedInfo().Created) || after.CachedInfo().Config.MaxBytes != before.CachedInfo().Config.MaxBytes {
		t.Error("a second Provision changed REACH_RESULTS")
	}
}

// TestAMessageOverMaxPayloadIsRefusedByTheStream: with a server whose
// max_payload is larger than a stream's MaxMsgSize (a topology provisioned
// with an explicit MaxPayload), the stream refuses what the server accepts.
func TestAMessageOverMaxPayloadIsRefusedByTheStream(t *testing.T) {
	opts := natstest.Options(t.TempDir())
	opts.MaxPayload = 4 << 20
	nc := natstest.Connect(t, natstest.RunServerWith(t, opts))
	natstest.Provision(t, nc, streams.Topology{Memory: true, MaxPayload: 1 << 20})
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := nats.NewMsg(streams.Subjects{}.Submit("echo"))
	m.Data = bytes.Repeat([]byte("x"), 2<<20)
	if _, err := js.PublishMsg(ctx, m); !streams.IsTooLarge(err) {
		t.Fatalf("a 2 MiB task on a 1 MiB stream: got %v, want the size refusal", err)
	}
	m.Data = m.Data[:1<<10]
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatalf("a 1 KiB task is refused: %v", err)
	}
}

// TestProvisionSaysWhenTheServerCannotReserveTheLimits: a server with too
// little store for the limits refuses, and the error says what to change.
func TestProvisionSaysWhenTheServerCannotReserveTheLimits(t *testing.T) {
	opts := natstest.Options(t.TempDir())
	opts.JetStreamMaxMemory = 32 << 20
	nc := natstest.Connect(t, natstest.RunServerWith(t, opts))
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := streams.Provision(ctx, js, streams.Topology{Memory: true})
	if err == nil || !strings.Contains(err.Error(), "max_memory_store") {
		t.Fatalf("provisioning about 210 MiB of limits on a 32 MiB server: got %v, want the reservation refused with a hint", err)
	}
}
