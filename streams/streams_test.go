package streams_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

func TestValidateCapability(t *testing.T) {
	for _, ok := range []string{"echo", "inventory.query", "risk.score-v2", "a_b.c1"} {
		if err := streams.ValidateCapability(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "Echo", "a..b", ".a", "a.", "a.*", "a.>", "a b", "-a"} {
		if err := streams.ValidateCapability(bad); !errors.Is(err, streams.ErrInvalidName) {
			t.Errorf("%q: want ErrInvalidName, got %v", bad, err)
		}
	}
}

func TestContentTypeDetection(t *testing.T) {
	cases := []struct {
		header string
		body   string
		want   string
	}{
		{"", `{"text":"hi"}`, streams.ContentTypeJSON},
		{"", ``, streams.ContentTypeJSON},
		{"", "\x81\xa1a\x01", streams.ContentTypeMsgpack},
		{"application/json; charset=utf-8", "\x81", streams.ContentTypeJSON},
		{"Application/MsgPack", `{}`, streams.ContentTypeMsgpack},
	}
	for _, tc := range cases {
		h := nats.Header{}
		if tc.header != "" {
			h.Set(streams.HeaderContentType, tc.header)
		}
		if got := streams.ContentType(h, []byte(tc.body)); got != tc.want {
			t.Errorf("header %q body %q: got %s, want %s", tc.header, tc.body, got, tc.want)
		}
	}
}

type sample struct {
	Name  string         `json:"name"`
	Count int            `json:"count"`
	Tags  []string       `json:"tags"`
	Extra map[string]any `json:"extra"`
}

func TestCodecRoundTripBothFormats(t *testing.T) {
	in := sample{Name: "x", Count: 3, Tags: []string{"a"}, Extra: map[string]any{"k": "v"}}
	for _, ct := range []string{streams.ContentTypeJSON, streams.ContentTypeMsgpack} {
		b, err := streams.Encode(ct, in)
		if err != nil {
			t.Fatal(err)
		}
		var out sample
		if err := streams.Decode(ct, b, &out); err != nil {
			t.Fatal(err)
		}
		if out.Name != "x" || out.Count != 3 || out.Tags[0] != "a" || out.Extra["k"] != "v" {
			t.Fatalf("%s round trip: %+v", ct, out)
		}
		// msgpack uses the json names, so a generic map sees the same keys.
		var generic map[string]any
		if err := streams.Decode(ct, b, &generic); err != nil || generic["name"] != "x" {
			t.Fatalf("%s generic decode: %v %v", ct, generic, err)
		}
	}
}

func TestCodecErrorsAreBadRequest(t *testing.T) {
	var v sample
	for _, tc := range []struct{ ct, body string }{
		{streams.ContentTypeJSON, `{"count":"x"}`},
		{streams.ContentTypeMsgpack, "\xc1"},
		{"text/plain", "hi"},
	} {
		err := streams.Decode(tc.ct, []byte(tc.body), &v)
		if !errors.Is(err, streams.ErrBadRequest) {
			t.Errorf("%s %q: want BAD_REQUEST, got %v", tc.ct, tc.body, err)
		}
	}
	if _, err := streams.Encode("text/plain", v); !errors.Is(err, streams.ErrBadRequest) {
		t.Errorf("encode unsupported: %v", err)
	}
}

func TestErrorCodesMapOneToOne(t *testing.T) {
	seen := map[error]streams.Code{}
	for _, c := range streams.Codes() {
		s := c.Sentinel()
		if prev, dup := seen[s]; dup {
			t.Fatalf("%s and %s share a sentinel", prev, c)
		}
		seen[s] = c
		e := streams.NewError(c, "m")
		if !errors.Is(e, s) || streams.CodeOf(fmt.Errorf("wrapped: %w", e)) != c || streams.CodeOf(fmt.Errorf("w: %w", s)) != c {
			t.Fatalf("%s does not round-trip", c)
		}
	}
	if !streams.CodeTimeout.Retryable() || !streams.CodeTargetBusy.Retryable() ||
		streams.CodeBizReject.Retryable() || streams.CodeBadRequest.Retryable() {
		t.Fatal("retryable set is wrong")
	}
	if streams.CodeOf(errors.New("plain")) != streams.CodeInternal {
		t.Fatal("plain errors must be INTERNAL")
	}
}

func TestErrorReplyRoundTrip(t *testing.T) {
	for _, ct := range []string{streams.ContentTypeJSON, streams.ContentTypeMsgpack} {
		m := streams.ErrorReply("x", ct, "rid", streams.NewError(streams.CodeBizReject, "no stock"))
		e := streams.ErrorFromMessage(m)
		if e == nil || e.Code != streams.CodeBizReject || e.Message != "no stock" || m.Header.Get(streams.HeaderStatus) != "FAILED" {
			t.Fatalf("%s: %+v %v", ct, e, m.Header)
		}
	}
}

func TestProvisionIsIdempotentAndConcurrent(t *testing.T) {
	s := natstest.RunServer(t)
	topo := streams.Topology{Heartbeat: time.Second, Memory: true}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		nc := natstest.Connect(t, s)
		js, _ := jetstream.New(nc)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			errs <- streams.Provision(ctx, js, topo)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent provision: %v", err)
		}
	}
	nc := natstest.Connect(t, s)
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	if err := streams.Provision(ctx, js, topo); err != nil {
		t.Fatalf("second provision: %v", err)
	}
	kv, err := js.KeyValue(ctx, streams.BucketAgents)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := kv.Status(ctx)
	if st.TTL() != 3*time.Second || st.LimitMarkerTTL() == 0 {
		t.Fatalf("REACH_AGENTS TTL %v markers %v", st.TTL(), st.LimitMarkerTTL())
	}
	// Another heartbeat would change the TTL: refused, not silently changed.
	err = streams.Provision(ctx, js, streams.Topology{Heartbeat: 2 * time.Second, Memory: true})
	if !errors.Is(err, streams.ErrIncompatible) {
		t.Fatalf("want ErrIncompatible, got %v", err)
	}
	for _, name := range []string{streams.StreamTasks, streams.StreamResults, streams.StreamDLQ, streams.StreamReview, streams.StreamEvents} {
		if _, err := js.Stream(ctx, name); err != nil {
			t.Errorf("stream %s: %v", name, err)
		}
	}
}

func TestSubjects(t *testing.T) {
	var s streams.Subjects
	if s.Task("echo") != "reach.task.echo" || s.Agent("a-1") != "reach.agent.a-1" || s.CapabilityFromTask("reach.task.inventory.query") != "inventory.query" {
		t.Fatal("default subjects")
	}
	p := streams.Subjects{Prefix: "acme.reach"}
	if p.Submit("x") != "acme.reach.submit.x" || p.CapabilityFromTask("reach.task.x") != "" {
		t.Fatal("prefixed subjects")
	}
}

func TestNewRequestIDIsAUniqueUUIDv4(t *testing.T) {
	seen := map[string]bool{}
	for range 10000 {
		id := streams.NewRequestID()
		u, err := uuid.Parse(id)
		if err != nil || u.Version() != 4 || u.Variant() != uuid.RFC4122 || seen[id] {
			t.Fatalf("%q: %v (version %v, variant %v, seen %v)", id, err, u.Version(), u.Variant(), seen[id])
		}
		if err := streams.ValidateInstanceID(id); err != nil {
			t.Fatalf("request ids must be valid subject tokens: %v", err)
		}
		seen[id] = true
	}
}

// The bucket key of an idempotency key is scoped by its caller: the same
// key from two callers is two keys; no caller is "="; a caller or key that
// is no KV token is hashed, as every SDK does it (Python's test_wire checks
// the same keys).
func TestIdempotencyKey(t *testing.T) {
	for _, c := range []struct{ capability, caller, key, want string }{
		{"math.add", "alice", "order-42", "math.add.alice.order-42"},
		{"math.add", "bob", "order-42", "math.add.bob.order-42"},
		{"math.add", "", "order-42", "math.add.=.order-42"},
		{"pay", "alice", "a key/with spaces", "pay.alice.sha256-72d91f078b92fc1b995051897d7a61c5"},
		{"pay", "not.a.token", "k", "pay.sha256-7d9e2832322bd04ea956768d2068aa87.k"},
		{"pay", "alice", "", "pay.alice.sha256-e3b0c44298fc1c149afbf4c8996fb924"},
	} {
		if got := streams.IdempotencyKey(c.capability, c.caller, c.key); got != c.want {
			t.Errorf("IdempotencyKey(%q, %q, %q) = %q, want %q", c.capability, c.caller, c.key, got, c.want)
		}
	}
}
