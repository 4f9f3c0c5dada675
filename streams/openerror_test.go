package streams_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// TestOpenErrorNamesTheCause opens a bucket that cannot be opened for three
// different reasons on real servers and checks that only a missing bucket
// sends the reader to provisioning.
func TestOpenErrorNamesTheCause(t *testing.T) {
	withJS := natstest.Connect(t, natstest.RunServer(t))
	opts := natstest.Options(t.TempDir())
	opts.JetStream = false
	withoutJS := natstest.Connect(t, natstest.RunServerWith(t, opts))

	open := func(ctx context.Context, js jetstream.JetStream) error {
		_, err := js.KeyValue(ctx, streams.BucketAgents)
		return streams.OpenError("registry", streams.BucketAgents, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	expired, cancelExpired := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancelExpired()

	jsWith, _ := jetstream.New(withJS)
	jsWithout, _ := jetstream.New(withoutJS)
	cases := []struct {
		name string
		err  error
		want string
		is   error
	}{
		{"missing", open(ctx, jsWith), "run provisioning first", jetstream.ErrBucketNotFound},
		{"no JetStream", open(ctx, jsWithout), "JetStream is not enabled", nil},
		{"no answer in time", open(expired, jsWith), "did not answer in time", context.DeadlineExceeded},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			msg := c.err.Error()
			if !strings.HasPrefix(msg, "registry: open REACH_AGENTS") || !strings.Contains(msg, c.want) {
				t.Fatalf("got %q, want it to name %q", msg, c.want)
			}
			if c.want != "run provisioning first" && strings.Contains(msg, "provisioning") {
				t.Errorf("got %q: a %s sends the reader to provisioning", msg, c.name)
			}
			if c.is != nil && !errors.Is(c.err, c.is) {
				t.Errorf("errors.Is(%v, %v) is false", c.err, c.is)
			}
		})
	}
	if got := streams.OpenError("x", "B", errors.New("nats: permissions violation")).Error(); got != "x: open B: nats: permissions violation" {
		t.Errorf("a refusal got a hint: %q", got)
	}
}
