package auth_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/auth"
	"github.com/agent-reach/agentreach/auth/authserver"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// TestALeafServerFollowsTheStore: a server the syncer pushes to as a leaf
// (AddLeaf; no link needed for that) lets in an identity made after it
// started; restarted from an older configuration on a fresh resolver
// directory (which does not know that identity), it is pushed the account
// JWT again once the syncer's connection to it reconnects, with no change
// to the store.
func TestALeafServerFollowsTheStore(t *testing.T) {
	s := newSecureServer(t)
	old := t.TempDir() // the store as the leaf server's configuration was written
	if err := os.CopyFS(old, os.DirFS(s.store.Dir())); err != nil {
		t.Fatal(err)
	}
	oldStore, err := auth.Open(old)
	if err != nil {
		t.Fatal(err)
	}
	port := natstest.FreePort(t)
	start := func() *server.Server {
		opts := natstest.Options(t.TempDir())
		opts.JetStream, opts.Port = false, port
		if err := authserver.Configure(opts, oldStore, t.TempDir(), nil, streams.Subjects{}); err != nil {
			t.Fatal(err)
		}
		return natstest.RunServerWith(t, opts)
	}
	leaf := start()
	dial := func(name string) error {
		o, err := auth.ConnectOptions(s.store.CredsFile(name))
		if err != nil {
			t.Fatal(err)
		}
		nc, err := nats.Connect(leaf.ClientURL(), append(o, nats.MaxReconnects(0), nats.Timeout(2*time.Second))...)
		if err == nil {
			nc.Close()
		}
		return err
	}
	o, err := auth.ConnectOptions(s.store.SystemCredsFile())
	if err != nil {
		t.Fatal(err)
	}
	sys := natstest.Connect(t, leaf, append(o, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.syncer.AddLeaf(ctx, sys); err != nil {
		t.Fatal(err)
	}

	s.add(auth.Identity{Name: "edge-a", Role: auth.RoleCaller})
	natstest.WaitFor(t, 10*time.Second, func() error { return dial("edge-a") })

	leaf.Shutdown()
	leaf.WaitForShutdown()
	leaf = start()
	natstest.WaitFor(t, 10*time.Second, func() error { return dial("edge-a") })
}
