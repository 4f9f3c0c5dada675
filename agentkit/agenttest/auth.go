package agenttest

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/auth"
	"github.com/agent-reach/agentreach/auth/authserver"
	"github.com/agent-reach/agentreach/auth/signature"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/registry/policy"
	"github.com/agent-reach/agentreach/streams"
)

// The identities of a run with auth (WithAuth) besides the agent's own,
// whose name is its instance id.
const (
	// authDispatcher is the dispatcher identity of the suite's dispatcher
	// and of its own connection, which delivers directly as a dispatcher
	// does and reads the buckets.
	authDispatcher = "agenttest"
	// authCaller is the caller identity the suite calls through the
	// dispatcher as: every task it sends is signed (Reach-Signature).
	authCaller = "conformance-caller"
)

// authACL is the ACL of a run with auth: every caller may call the
// conformance capabilities, nothing else.
const authACL = `{"rules": [{"caller": "*", "may_call": ["` + agentType + `", "` + agentType + `.>"]}]}`

// authSetup is what a run with auth has beyond a plain one: the identity
// store, the syncer that pushes it and the ACL to the server and the
// directory, the dispatcher's authorizer, the caller's signer and
// connection.
type authSetup struct {
	store  *auth.Store
	sys    *nats.Conn
	syncer *auth.Syncer
	az     *auth.Authorizer
	signer *signature.Signer // authCaller's
	caller *nats.Conn        // authCaller's
}

// newAuthStore makes the identity store of a run with auth in dir: the
// suite's dispatcher, its caller, the two callers of the idempotency rule
// (callerAlice, callerBob: the Reach-Source of its deliveries names real
// identities) and the agent under test, an agent of type "conformance"
// whose grant is the default, conformance and conformance.>.
func newAuthStore(dir, agentID string) (*auth.Store, error) {
	store, err := auth.Init(dir)
	if err != nil {
		return nil, fmt.Errorf("agenttest: identity store: %w", err)
	}
	for _, id := range []auth.Identity{
		{Name: authDispatcher, Role: auth.RoleDispatcher},
		{Name: authCaller, Role: auth.RoleCaller},
		{Name: callerAlice, Role: auth.RoleCaller},
		{Name: callerBob, Role: auth.RoleCaller},
		{Name: agentID, Role: auth.RoleAgent, Type: agentType},
	} {
		if _, err := store.Add(id); err != nil {
			return nil, fmt.Errorf("agenttest: identity %s: %w", id.Name, err)
		}
	}
	return store, nil
}

// configureAuth makes the identity store in s.dir/auth and puts operator
// mode into opts, the account resolver in s.dir/jwt.
func (s *suite) configureAuth(opts *server.Options) error {
	store, err := newAuthStore(filepath.Join(s.dir, "auth"), s.env.AgentID)
	if err != nil {
		return err
	}
	if err := authserver.Configure(opts, store, filepath.Join(s.dir, "jwt"), nil, streams.Subjects{}); err != nil {
		return fmt.Errorf("agenttest: operator mode: %w", err)
	}
	s.auth = &authSetup{store: store}
	s.env.CredsFile = store.CredsFile(s.env.AgentID)
	return nil
}

// connectAs returns the options of a connection as identity name: its
// credentials and inbox prefix, and quick reconnects (the server moves an
// identity whose permissions changed to a new connection).
func (a *authSetup) connectAs(name string) ([]nats.Option, error) {
	return a.connectFile(a.store.CredsFile(name))
}

func (a *authSetup) connectFile(file string) ([]nats.Option, error) {
	opts, err := auth.ConnectOptions(file)
	if err != nil {
		return nil, err
	}
	return append(opts, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond)), nil
}

// start runs what auth needs once the topology exists, before the agent
// starts: the ACL, the syncer (its first sync pushes the identities and
// the ACL before it returns), the authorizer of the suite's dispatchers,
// and the caller's connection and signer.
func (a *authSetup) start(ctx context.Context, s *suite) error {
	pol, err := s.js.KeyValue(ctx, streams.BucketPolicy)
	if err != nil {
		return streams.OpenError("agenttest", streams.BucketPolicy, err)
	}
	if _, err := registry.UpdatePolicy(ctx, pol, policy.KeyACL, []byte(authACL), 0); err != nil {
		return fmt.Errorf("agenttest: write the acl: %w", err)
	}
	sysOpts, err := a.connectFile(a.store.SystemCredsFile())
	if err != nil {
		return err
	}
	if a.sys, err = nats.Connect(s.env.ServerURL, append(sysOpts, nats.Name("agenttest auth sync"))...); err != nil {
		return fmt.Errorf("agenttest: system account connection: %w", err)
	}
	if a.syncer, err = auth.NewSyncer(ctx, a.store, a.sys, s.nc, auth.SyncConfig{}, auth.WithSyncLogger(s.log)); err == nil {
		err = a.syncer.Start(ctx)
	}
	if err != nil {
		a.syncer = nil
		return fmt.Errorf("agenttest: identity sync: %w", err)
	}
	verifier, err := auth.LoadVerifier(a.store.VerifierFile())
	if err != nil {
		return err
	}
	js, err := jetstream.New(s.dnc)
	if err != nil {
		return err
	}
	if a.az, err = auth.NewAuthorizer(ctx, js, verifier, auth.AuthorizerConfig{}, auth.WithAuthorizerLogger(s.log)); err == nil {
		err = a.az.Start(ctx)
	}
	if err != nil {
		a.az = nil
		return fmt.Errorf("agenttest: authorizer: %w", err)
	}
	if a.signer, err = auth.LoadSigner(a.store.CredsFile(authCaller)); err != nil {
		return err
	}
	opts, err := a.connectAs(authCaller)
	if err != nil {
		return err
	}
	if a.caller, err = nats.Connect(s.env.ServerURL, append(opts, nats.Name("agenttest caller"))...); err != nil {
		return fmt.Errorf("agenttest: connect as %s: %w", authCaller, err)
	}
	return a.synced(ctx, s)
}

// synced waits until the syncer has pushed the store and the ACL and the
// authorizer enforces that ACL: then the agent's identity can connect,
// the caller may call, and the dispatcher knows them both.
func (a *authSetup) synced(ctx context.Context, s *suite) error {
	js := s.js
	for {
		st, err := js.Stream(ctx, "KV_"+streams.BucketPolicy)
		if err != nil {
			return err
		}
		last := st.CachedInfo().State.LastSeq
		store, policy := a.syncer.Synced()
		if store >= a.store.Revision() && policy >= last && a.az.Revision() >= last {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("agenttest: identities and acl not in force: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// close stops what start started; safe on a partly started setup.
func (a *authSetup) close() {
	if a.az != nil {
		a.az.Close()
	}
	if a.syncer != nil {
		a.syncer.Close()
	}
	for _, nc := range []*nats.Conn{a.caller, a.sys} {
		if nc != nil {
			nc.Close()
		}
	}
}
