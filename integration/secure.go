package integration

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/auth"
	"github.com/agent-reach/agentreach/auth/authserver"
	"github.com/agent-reach/agentreach/auth/devtls"
	"github.com/agent-reach/agentreach/auth/signature"
	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/fanout"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/registry/policy"
	"github.com/agent-reach/agentreach/streams"
)

// Identities every SecureStack has from the start.
const (
	// SecureAdmin is the dispatcher identity of the stack's dispatchers and
	// of Conn.
	SecureAdmin = "dispatcher"
	// SecureCaller is the caller identity of Client.
	SecureCaller = "caller"
)

// SecureStack is a Stack with security on, as docs/security.md runs
// production: the server in operator mode on an identity store in a
// temporary directory, mutual TLS on the client port, a syncer pushing
// identities and the ACL to the server, and dispatchers (with their
// fan-out services) that authorize every task. Every connection is one
// identity's, with a client certificate of the stack's CA.
//
// Its Conn, Dispatcher, Agent, Client and FanOut work like a Stack's, as
// identities: Conn and the dispatchers as SecureAdmin, Client as
// SecureCaller, an agent as the identity its Config.ID names (made, of
// role agent and its Config.Type, granted its handlers' capabilities, when
// missing). So a flow written for a
// Stack runs on a SecureStack unchanged.
type SecureStack struct {
	*Stack
	Store *auth.Store
	TLS   devtls.TLSFiles

	syncer   *auth.Syncer
	verifier *signature.Verifier
	admin    *nats.Conn

	mu          sync.Mutex
	authorizers map[*dispatcher.Dispatcher]*auth.Authorizer
}

// NewSecureStack starts a secure stack with heartbeat hb and acl (JSON or
// YAML; "" writes none, which grants nothing); tune adjusts the server's
// options first.
func NewSecureStack(tb testing.TB, hb time.Duration, acl string, tune ...func(*server.Options)) *SecureStack {
	tb.Helper()
	store, err := auth.Init(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	for _, id := range []auth.Identity{{Name: SecureAdmin, Role: auth.RoleDispatcher}, {Name: SecureCaller, Role: auth.RoleCaller}} {
		if _, err := store.Add(id); err != nil {
			tb.Fatal(err)
		}
	}
	files, err := devtls.EnsureTLS(tb.TempDir(), []string{"localhost", "127.0.0.1"})
	if err != nil {
		tb.Fatal(err)
	}
	opts := natstest.Options(tb.TempDir())
	for _, f := range tune {
		f(opts)
	}
	if err := authserver.Configure(opts, store, tb.TempDir(), nil, streams.Subjects{}); err != nil {
		tb.Fatal(err)
	}
	if err := authserver.ConfigureTLS(opts, files, true); err != nil {
		tb.Fatal(err)
	}
	st := &SecureStack{Stack: runStack(tb, hb, opts), Store: store, TLS: files, authorizers: map[*dispatcher.Dispatcher]*auth.Authorizer{}}
	if st.verifier, err = auth.LoadVerifier(store.VerifierFile()); err != nil {
		tb.Fatal(err)
	}
	st.admin = st.ConnAs(SecureAdmin)
	natstest.Provision(tb, st.admin, streams.Topology{Heartbeat: hb, Memory: true})
	if acl != "" {
		st.putACL(acl)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sys := st.ConnFile(store.SystemCredsFile())
	if st.syncer, err = auth.NewSyncer(ctx, store, sys, st.admin, auth.SyncConfig{Interval: 20 * time.Millisecond},
		auth.WithSyncLogger(st.log)); err != nil {
		tb.Fatal(err)
	}
	if err := st.syncer.Start(ctx); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(st.syncer.Close)
	return st
}

// ClientTLS returns the TLS options of a client of the stack: its CA and a
// client certificate.
func (st *SecureStack) ClientTLS() []nats.Option {
	return []nats.Option{nats.RootCAs(st.TLS.CA), nats.ClientCert(st.TLS.ClientCert, st.TLS.ClientKey)}
}

// ConnAs opens a connection as identity name (with TLS), closed at the end
// of the test. It reconnects quickly: the server moves an identity whose
// permissions changed to a new connection.
func (st *SecureStack) ConnAs(name string, opts ...nats.Option) *nats.Conn {
	st.T.Helper()
	return st.ConnFile(st.Store.CredsFile(name), opts...)
}

// ForgeCancels sends three cancels of request id that must stop nothing,
// as identity other (a caller that did not send it): one unsigned from the
// admin connection claiming SecureCaller as its source, one signed by
// other, and one signed by other claiming SecureCaller. Each is flushed, so
// the server has passed it on before whatever the test sends next.
func (st *SecureStack) ForgeCancels(id, other string) {
	st.T.Helper()
	signer, err := auth.LoadSigner(st.Store.CredsFile(other))
	if err != nil {
		st.T.Fatal(err)
	}
	cancelOf := func() *nats.Msg {
		m := nats.NewMsg(streams.Subjects{}.Cancel())
		m.Header.Set(streams.HeaderRequestID, id)
		return m
	}
	unsigned := cancelOf()
	unsigned.Header.Set(streams.HeaderSource, SecureCaller)
	another := cancelOf()
	signer.Sign(another, time.Now())
	claiming := cancelOf()
	signer.Sign(claiming, time.Now())
	claiming.Header.Set(streams.HeaderSource, SecureCaller)
	admin, as := st.Conn(), st.ConnAs(other)
	for _, c := range []struct {
		nc *nats.Conn
		m  *nats.Msg
	}{{admin, unsigned}, {as, another}, {as, claiming}} {
		if err := c.nc.PublishMsg(c.m); err != nil {
			st.T.Fatal(err)
		}
		if err := c.nc.Flush(); err != nil {
			st.T.Fatal(err)
		}
	}
}

// ConnFile opens a connection with the credentials in file.
func (st *SecureStack) ConnFile(file string, opts ...nats.Option) *nats.Conn {
	st.T.Helper()
	o, err := auth.ConnectOptions(file)
	if err != nil {
		st.T.Fatal(err)
	}
	base := append(st.ClientTLS(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	return natstest.Connect(st.T, st.Server, append(append(base, o...), opts...)...)
}

// Conn opens a connection as SecureAdmin.
func (st *SecureStack) Conn() *nats.Conn { return st.ConnAs(SecureAdmin) }

// Identity makes id and waits until the server and the directory have it.
func (st *SecureStack) Identity(id auth.Identity) auth.Identity {
	st.T.Helper()
	id, err := st.Store.Add(id)
	if err != nil {
		st.T.Fatal(err)
	}
	st.WaitSynced()
	return id
}

// Revoke revokes identity name and returns once the syncer has pushed the
// revocation.
func (st *SecureStack) Revoke(name string) {
	st.T.Helper()
	if _, err := st.Store.Revoke(name); err != nil {
		st.T.Fatal(err)
	}
	st.WaitSynced()
}

// WaitSynced waits until the syncer has pushed the store's latest state
// and the ACL in force.
func (st *SecureStack) WaitSynced() {
	st.T.Helper()
	natstest.WaitFor(st.T, 10*time.Second, func() error {
		if store, policy := st.syncer.Synced(); store < st.Store.Revision() || policy < st.policyRevision() {
			return fmt.Errorf("synced store revision %d and policy revision %d, want %d and %d",
				store, policy, st.Store.Revision(), st.policyRevision())
		}
		return nil
	})
}

// policyRevision is REACH_POLICY's latest revision.
func (st *SecureStack) policyRevision() uint64 {
	js, err := jetstream.New(st.admin)
	if err != nil {
		st.T.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, "KV_"+streams.BucketPolicy)
	if err != nil {
		st.T.Fatal(err)
	}
	return s.CachedInfo().State.LastSeq
}

// SetACL stores acl and returns once the server and every dispatcher of
// the stack enforce it.
func (st *SecureStack) SetACL(acl string) {
	st.T.Helper()
	rev := st.putACL(acl)
	st.WaitSynced()
	natstest.WaitFor(st.T, 10*time.Second, func() error {
		st.mu.Lock()
		defer st.mu.Unlock()
		for _, az := range st.authorizers {
			if az.Revision() < rev {
				return errors.New("a dispatcher does not see the ACL yet")
			}
		}
		return nil
	})
}

func (st *SecureStack) putACL(acl string) uint64 {
	st.T.Helper()
	js, err := jetstream.New(st.admin)
	if err != nil {
		st.T.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, streams.BucketPolicy)
	if err != nil {
		st.T.Fatal(err)
	}
	rev, err := registry.PutPolicy(ctx, kv, policy.KeyACL, []byte(acl))
	if err != nil {
		st.T.Fatal(err)
	}
	return rev
}

// Dispatcher starts a dispatcher as SecureAdmin whose every task passes an
// authorizer of its own.
func (st *SecureStack) Dispatcher(cfg config.Config) *dispatcher.Dispatcher {
	st.T.Helper()
	nc := st.ConnAs(SecureAdmin)
	js, err := jetstream.New(nc)
	if err != nil {
		st.T.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	az, err := auth.NewAuthorizer(ctx, js, st.verifier, auth.AuthorizerConfig{}, auth.WithAuthorizerLogger(st.log))
	if err == nil {
		err = az.Start(ctx)
	}
	if err != nil {
		st.T.Fatal(err)
	}
	st.T.Cleanup(az.Close) // after the dispatcher's Close, which is registered later
	d := st.dispatcherOn(nc, cfg, dispatcher.WithAuthorizer(az))
	st.mu.Lock()
	st.authorizers[d] = az
	st.mu.Unlock()
	return d
}

// FanOut starts the fan-out and broadcast service beside d, with d's
// authorizer.
func (st *SecureStack) FanOut(d *dispatcher.Dispatcher) *fanout.Service {
	st.T.Helper()
	st.mu.Lock()
	az := st.authorizers[d]
	st.mu.Unlock()
	if az == nil {
		st.T.Fatal("integration: FanOut wants a dispatcher of this SecureStack")
	}
	return st.fanOutOn(st.ConnAs(SecureAdmin), d, fanout.WithAuthorizer(az))
}

// Agent starts an agent as the identity cfg.ID names, made when missing:
// an agent of cfg.Type granted exactly the capabilities of handlers, so
// that the dispatchers route it what it serves.
func (st *SecureStack) Agent(cfg agentkit.Config, handlers map[string]agentkit.Handler) *agentkit.Agent {
	st.T.Helper()
	if cfg.ID == "" {
		st.T.Fatal("integration: a SecureStack's agent needs Config.ID: it is its identity")
	}
	if _, ok := st.Store.Identity(cfg.ID); !ok {
		st.Identity(auth.Identity{Name: cfg.ID, Role: auth.RoleAgent, Type: cfg.Type, Serves: slices.Sorted(maps.Keys(handlers))})
	}
	return st.agentOn(st.ConnAs(cfg.ID), cfg, handlers)
}

// Client returns a client of SecureCaller that signs its tasks.
func (st *SecureStack) Client(opts ...agentkit.ClientOption) *agentkit.Client {
	st.T.Helper()
	return st.ClientAs(SecureCaller, opts...)
}

// ClientAs returns a client of identity name that signs its tasks, on a
// connection of its own.
func (st *SecureStack) ClientAs(name string, opts ...agentkit.ClientOption) *agentkit.Client {
	st.T.Helper()
	c, err := agentkit.NewClient(st.ConnAs(name), append(opts, agentkit.WithCredentials(st.Store.CredsFile(name)))...)
	if err != nil {
		st.T.Fatal(err)
	}
	return c
}

// ClientAs returns a client whose tasks name identity name as their
// Reach-Source; on a Stack nothing proves it (SecureStack.ClientAs signs).
func (st *Stack) ClientAs(name string, opts ...agentkit.ClientOption) *agentkit.Client {
	st.T.Helper()
	return st.Client(append(opts, agentkit.WithSource(name))...)
}
