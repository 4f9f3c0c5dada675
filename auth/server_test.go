package auth_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/auth"
	"github.com/agent-reach/agentreach/auth/authserver"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/registry/policy"
	"github.com/agent-reach/agentreach/streams"
)

// secureServer is an embedded server in operator mode on a fresh store
// holding a dispatcher, with the topology provisioned and a syncer running.
type secureServer struct {
	t      *testing.T
	store  *auth.Store
	srv    *server.Server
	disp   *nats.Conn
	syncer *auth.Syncer
}

func newSecureServer(t *testing.T) *secureServer {
	t.Helper()
	store, err := auth.Init(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Add(auth.Identity{Name: "disp", Role: auth.RoleDispatcher}); err != nil {
		t.Fatal(err)
	}
	opts := natstest.Options(t.TempDir())
	if err := authserver.Configure(opts, store, t.TempDir(), nil, streams.Subjects{}); err != nil {
		t.Fatal(err)
	}
	s := &secureServer{t: t, store: store, srv: natstest.RunServerWith(t, opts)}
	s.disp = s.connect("disp")
	natstest.Provision(t, s.disp, streams.Topology{Heartbeat: time.Second, Memory: true})
	sys := s.connectFile(store.SystemCredsFile())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if s.syncer, err = auth.NewSyncer(ctx, store, sys, s.disp, auth.SyncConfig{Interval: 20 * time.Millisecond},
		auth.WithSyncLogger(zerolog.New(zerolog.NewTestWriter(t)))); err != nil {
		t.Fatal(err)
	}
	if err := s.syncer.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.syncer.Close)
	return s
}

// add makes an identity and waits until the servers know it.
func (s *secureServer) add(id auth.Identity) auth.Identity {
	s.t.Helper()
	id, err := s.store.Add(id)
	if err != nil {
		s.t.Fatal(err)
	}
	s.waitSynced()
	return id
}

func (s *secureServer) waitSynced() {
	s.t.Helper()
	natstest.WaitFor(s.t, 10*time.Second, func() error {
		if got, _ := s.syncer.Synced(); got < s.store.Revision() {
			return errors.New("not synced yet")
		}
		return nil
	})
}

func (s *secureServer) connect(name string, opts ...nats.Option) *nats.Conn {
	s.t.Helper()
	return s.connectFile(s.store.CredsFile(name), opts...)
}

func (s *secureServer) connectFile(creds string, opts ...nats.Option) *nats.Conn {
	s.t.Helper()
	o, err := auth.ConnectOptions(creds)
	if err != nil {
		s.t.Fatal(err)
	}
	return natstest.Connect(s.t, s.srv, append(o, opts...)...)
}

func (s *secureServer) putACL(src string) {
	s.t.Helper()
	js, _ := jetstream.New(s.disp)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, streams.BucketPolicy)
	if err != nil {
		s.t.Fatal(err)
	}
	if _, err := registry.PutPolicy(ctx, kv, policy.KeyACL, []byte(src)); err != nil {
		s.t.Fatal(err)
	}
}

// probe checks which operations the server refuses on one connection.
// A refusal arrives as an asynchronous error, in order: after each
// operation probe does one that is always refused (publishing to a subject
// nobody may use) and waits for that one's error, so whatever the
// operation caused has arrived by then.
type probe struct {
	t    *testing.T
	nc   *nats.Conn
	errs chan error
	n    int
}

// connectProbed connects as name with a probe on the connection.
func (s *secureServer) connectProbed(name string, opts ...nats.Option) *probe {
	s.t.Helper()
	p := &probe{t: s.t, errs: make(chan error, 256)}
	p.nc = s.connect(name, append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { p.errs <- err }))...)
	return p
}

// refused reports whether the server refused do, which uses subject; ok
// is false when the sentinel's refusal did not come back within wait (the
// connection was moved meanwhile: the server closed it for new
// permissions).
func (p *probe) refused(subject string, wait time.Duration, do func(nc *nats.Conn) error) (refused, ok bool) {
	p.t.Helper()
	if err := do(p.nc); err != nil {
		p.t.Fatal(err)
	}
	p.n++
	sentinel := fmt.Sprintf("nobody.may.%d", p.n)
	if err := p.nc.Publish(sentinel, nil); err != nil {
		p.t.Fatal(err)
	}
	timeout := time.After(wait)
	for {
		select {
		case err := <-p.errs:
			switch {
			case strings.Contains(err.Error(), `"`+sentinel+`"`):
				return refused, true
			case strings.Contains(err.Error(), `"`+subject+`"`):
				refused = true
			}
		case <-timeout:
			return false, false
		}
	}
}

// must is refused for a connection that stays as it is.
func (p *probe) must(subject string, do func(nc *nats.Conn) error) bool {
	p.t.Helper()
	refused, ok := p.refused(subject, 10*time.Second, do)
	if !ok {
		p.t.Fatalf("no permissions violation for the sentinel after %s: is it allowed?", subject)
	}
	return refused
}

func (p *probe) pub(subject string) bool {
	return p.must(subject, func(nc *nats.Conn) error { return nc.Publish(subject, nil) })
}

func (p *probe) sub(subject string) bool {
	return p.must(subject, func(nc *nats.Conn) error {
		sub, err := nc.SubscribeSync(subject)
		if err == nil {
			p.t.Cleanup(func() { _ = sub.Unsubscribe() })
		}
		return err
	})
}

func TestPermissionsEnforcedAndFollowTheACL(t *testing.T) {
	s := newSecureServer(t)
	s.add(auth.Identity{Name: "echo-1", Role: auth.RoleAgent, Type: "echo"})
	s.add(auth.Identity{Name: "billing-1", Role: auth.RoleCaller})
	agent := s.connectProbed("echo-1")
	caller := s.connectProbed("billing-1")
	for _, c := range []struct {
		p       *probe
		sub     bool
		subject string
		refused bool
	}{
		{agent, true, "reach.agent.echo-1", false},
		{agent, true, "reach.agent.echo-2", true},
		{agent, true, "reach.task.>", true},
		{agent, true, "_INBOX.echo-1.x", false},
		{agent, true, "_INBOX.billing-1.>", true},
		{agent, false, "$KV.REACH_AGENTS.echo-1", false},
		{agent, false, "$KV.REACH_AGENTS.echo-2", true},
		{agent, false, "$KV.REACH_CAPS.echo", false},
		{agent, false, "$KV.REACH_CAPS.other", true},
		{agent, false, "$KV.REACH_POLICY.acl", true},
		{agent, false, "reach.task.payment.execute", true}, // no ACL yet
		{caller, false, "reach.task.payment.execute", true},
		{caller, true, "reach.agent.echo-1", true},
		{caller, true, "_INBOX.billing-1.abc", false},
	} {
		refused := c.p.pub
		if c.sub {
			refused = c.p.sub
		}
		if got := refused(c.subject); got != c.refused {
			t.Errorf("sub=%v %s: refused %v, want %v", c.sub, c.subject, got, c.refused)
		}
	}

	// A new ACL changes the permissions at run time: the connections whose
	// permissions changed reconnect with the new ones.
	s.putACL(`{"rules": [{"caller": "billing-*", "may_call": ["payment.*"]}]}`)
	natstest.WaitFor(t, 20*time.Second, func() error {
		refused, ok := caller.refused("reach.task.payment.execute", time.Second,
			func(nc *nats.Conn) error { return nc.Publish("reach.task.payment.execute", nil) })
		if refused || !ok {
			return errors.New("still refused, or the connection is being moved")
		}
		return nil
	})
	if !caller.pub("reach.task.payment.refund.partial") {
		t.Error("payment.* granted more than one token")
	}
	if !agent.pub("reach.task.payment.execute") {
		t.Error("the agent got billing-*'s grant")
	}
}

func TestRevocationCutsConnections(t *testing.T) {
	s := newSecureServer(t)
	s.add(auth.Identity{Name: "billing-1", Role: auth.RoleCaller})
	s.add(auth.Identity{Name: "billing-2", Role: auth.RoleCaller})
	closed := make(chan struct{})
	victim := s.connect("billing-1", nats.ClosedHandler(func(*nats.Conn) { close(closed) }), nats.ReconnectWait(10*time.Millisecond), nats.MaxReconnects(-1))
	other := s.connect("billing-2")
	if _, err := s.store.Revoke("billing-1"); err != nil {
		t.Fatal(err)
	}
	s.waitSynced()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatalf("revoked connection still %v", victim.Status())
	}
	if err := other.Flush(); err != nil {
		t.Errorf("another identity lost its connection: %v", err)
	}
	// Its credentials no longer connect.
	o, err := auth.ConnectOptions(s.store.CredsFile("billing-1"))
	if err != nil {
		t.Fatal(err)
	}
	if nc, err := nats.Connect(s.srv.ClientURL(), o...); err == nil {
		nc.Close()
		t.Error("the revoked identity connected again")
	}
}
