package agentkit_test

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// smallMaxPayload is the max_payload of the servers of the size tests.
const smallMaxPayload = 8192

// A payload a few bytes under max_payload that grows past it with the
// task's headers is refused before anything is sent, as PAYLOAD_TOO_LARGE
// naming the limit, the header bytes and the body bytes: by Call (nothing
// listens, so a sent task would be NO_AGENT), and by Submit, whose
// deduplication header counts too.
func TestClientRefusesWhatHeadersPushPastMaxPayload(t *testing.T) {
	_, nc := smallServer(t, streams.Topology{Memory: true})
	c, err := agentkit.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	body := bytes.Repeat([]byte{'x'}, smallMaxPayload-8)
	for _, tc := range []struct {
		name string
		send func() error
	}{
		{"call", func() error { _, err := c.Call(ctx, "echo", body); return err }},
		{"submit", func() error { _, err := c.Submit(ctx, "echo", body); return err }},
		{"submit and wait", func() error { _, err := c.SubmitAndWait(ctx, "echo", body); return err }},
		{"broadcast", func() error { _, err := c.Broadcast(ctx, "echo", body); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.send()
			if !errors.Is(err, streams.ErrPayloadTooLarge) {
				t.Fatalf("want PAYLOAD_TOO_LARGE, got %v", err)
			}
			for _, part := range []string{"of headers", strconv.Itoa(len(body)) + " of body", "max_payload of " + strconv.Itoa(smallMaxPayload)} {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("%q does not say %q", err, part)
				}
			}
		})
	}
	// What fits with its headers is stored.
	if _, err := c.Submit(ctx, "echo", body[:smallMaxPayload/2]); err != nil {
		t.Fatalf("a task that fits: %v", err)
	}
}

// A result that fits with the reply's headers but not with the load report
// (Reach-Active) the agent adds as it sends is refused as
// PAYLOAD_TOO_LARGE, not lost in a publish the client library refuses.
func TestResultCountsTheLoadReport(t *testing.T) {
	s, nc := smallServer(t, streams.Topology{Heartbeat: 200 * time.Millisecond, Memory: true})
	// The reply's headers but Reach-Active, as the agent sets them.
	reply := nats.NewMsg("x")
	for k, v := range map[string]string{streams.HeaderStatus: string(streams.StatusFinished), streams.HeaderRequestID: "req-1",
		streams.HeaderNode: "w9", streams.HeaderContentType: streams.ContentTypeJSON} {
		reply.Header.Set(k, v)
	}
	result := append(append([]byte(`"`), bytes.Repeat([]byte{'x'}, smallMaxPayload-streams.HeaderSize(reply)-2-4)...), '"')
	startAgent(t, natstest.Connect(t, s), agentkit.Config{Type: "work", ID: "w9"}, map[string]agentkit.Handler{
		"big": func(context.Context, *agentkit.Request) (any, error) { return result, nil },
	})
	replies := deliverer{t: t, nc: nc}.deliver("w9", "big", []byte(`1`))
	e := streams.ErrorFromMessage(replies[len(replies)-1])
	if e == nil || e.Code != streams.CodePayloadTooLarge || !strings.Contains(e.Message, "max_payload of "+strconv.Itoa(smallMaxPayload)) {
		t.Fatalf("want PAYLOAD_TOO_LARGE naming the limit, got %+v", e)
	}
}

// A rejection whose message alone outgrows max_payload reaches its caller
// as PAYLOAD_TOO_LARGE: the reply is checked as it is sent, after the
// check of results, since no result was built for it.
func TestALongRejectionIsPayloadTooLarge(t *testing.T) {
	s, nc := smallServer(t, streams.Topology{Heartbeat: 200 * time.Millisecond, Memory: true})
	long := strings.Repeat("no ", smallMaxPayload)
	startAgent(t, natstest.Connect(t, s), agentkit.Config{Type: "work", ID: "w8"}, map[string]agentkit.Handler{
		"refuse": func(context.Context, *agentkit.Request) (any, error) { return nil, agentkit.Reject(long) },
	})
	replies := deliverer{t: t, nc: nc}.deliver("w8", "refuse", []byte(`1`))
	e := streams.ErrorFromMessage(replies[len(replies)-1])
	if e == nil || e.Code != streams.CodePayloadTooLarge || !strings.Contains(e.Message, "max_payload of "+strconv.Itoa(smallMaxPayload)) {
		t.Fatalf("want PAYLOAD_TOO_LARGE for the reply, got %+v", e)
	}
}

// smallServer starts a server whose max_payload is smallMaxPayload, with
// topo provisioned, and connects to it.
func smallServer(t *testing.T, topo streams.Topology) (*server.Server, *nats.Conn) {
	opts := natstest.Options(t.TempDir())
	opts.MaxPayload = smallMaxPayload
	s := natstest.RunServerWith(t, opts)
	nc := natstest.Connect(t, s)
	natstest.Provision(t, nc, topo)
	return s, nc
}
