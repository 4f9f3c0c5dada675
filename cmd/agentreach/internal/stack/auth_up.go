package stack

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/auth"
	"github.com/agent-reach/agentreach/auth/authserver"
	"github.com/agent-reach/agentreach/auth/devtls"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/registry/policy"
	"github.com/agent-reach/agentreach/streams"
)

// upOpenACL is the ACL `up --auth` writes when REACH_POLICY has none: every
// identity may call every capability. Tighten it with
// `agentreach policy set acl FILE`.
const upOpenACL = `{"rules": [{"caller": "*", "may_call": [">"]}]}`

// security is what --auth and --tls add to `up`.
type security struct {
	auth    *authSetup       // nil without --auth
	tls     *devtls.TLSFiles // nil without --tls
	verify  bool             // --tls-verify
	dataDir string
}

// Security opens (or makes) what --auth and --tls need in dataDir.
func (f *UpFlags) Security(dataDir string, log zerolog.Logger) (*security, error) {
	sec := &security{verify: f.TLSVerify, dataDir: dataDir}
	if f.TLS {
		// The same names as the gateway's certificate (--http-tls), which
		// the same CA makes in the same directory.
		files, err := devtls.EnsureTLS(filepath.Join(dataDir, "tls"), devCertHosts(f.Listen, f.Dispatcher.HTTP.addr))
		if err != nil {
			return nil, fmt.Errorf("--tls: %w", err)
		}
		sec.tls = &files
	}
	if f.Auth {
		var demo map[string]string
		if f.Demo {
			demo = f.demoAgents.DemoIdentities()
		}
		a, err := openAuth(filepath.Join(dataDir, "auth"), demo, log)
		if err != nil {
			return nil, err
		}
		sec.auth = a
	}
	return sec, nil
}

// configure puts operator mode and TLS into the server's options.
func (s *security) configure(opts *server.Options, dataDir string, subjects streams.Subjects) error {
	if s.auth != nil {
		if err := authserver.Configure(opts, s.auth.store, filepath.Join(dataDir, "jwt"), nil, subjects); err != nil {
			return fmt.Errorf("--auth: %w", err)
		}
	}
	if s.tls != nil {
		if err := authserver.ConfigureTLS(opts, *s.tls, s.verify); err != nil {
			return fmt.Errorf("--tls: %w", err)
		}
	}
	return nil
}

// tlsOptions returns what a client of this process needs for --tls: the
// CA, and the client certificate (which --tls-verify requires). In-process
// connections too: nats.go does TLS on them when the server offers it.
func (s *security) tlsOptions() []nats.Option {
	if s.tls == nil {
		return nil
	}
	return []nats.Option{nats.RootCAs(s.tls.CA), nats.ClientCert(s.tls.ClientCert, s.tls.ClientKey)}
}

// start runs what --auth needs once the topology exists: an ACL when there
// is none, the syncer (which pushes the ACL in force before anything else
// connects) and the dispatcher's authorizer. Their stop steps go to st.
func (a *authSetup) start(ctx context.Context, st *cli.Stopper, nc *nats.Conn, srv *server.Server, tlsOpts []nats.Option,
	subjects streams.Subjects, log zerolog.Logger) (*auth.Authorizer, error) {
	if err := seedPolicy(ctx, nc, []byte(upOpenACL), log); err != nil {
		return nil, fmt.Errorf("--auth: %w", err)
	}
	sysOpts, err := auth.ConnectOptions(a.store.SystemCredsFile())
	if err != nil {
		return nil, err
	}
	sys, err := nats.Connect(srv.ClientURL(), append(append(sysOpts, tlsOpts...), nats.InProcessServer(srv), nats.Name("agentreach-auth-sync"),
		nats.MaxReconnects(-1), nats.ReconnectWait(cli.ReconnectWait))...)
	if err != nil {
		return nil, fmt.Errorf("--auth: system account connection: %w", err)
	}
	st.Add("system account connection", cli.CloseConn(sys))
	syncer, err := auth.NewSyncer(ctx, a.store, sys, nc, auth.SyncConfig{Subjects: subjects}, auth.WithSyncLogger(log))
	if err == nil {
		err = syncer.Start(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("--auth: %w", err)
	}
	st.Add("identity sync", func(context.Context) error { syncer.Close(); return nil })
	az, err := startAuthorizer(ctx, nc, a.store.VerifierFile(), log)
	if err != nil {
		return nil, fmt.Errorf("--auth: %w", err)
	}
	st.Add("authorizer", func(context.Context) error { az.Close(); return nil })
	return az, nil
}

// seedPolicy stores acl as the acl of REACH_POLICY when there is none.
func seedPolicy(ctx context.Context, nc *nats.Conn, acl []byte, log zerolog.Logger) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	kv, err := js.KeyValue(ctx, streams.BucketPolicy)
	if err != nil {
		return fmt.Errorf("open %s, provisioned a moment ago: %w", streams.BucketPolicy, err)
	}
	if _, err := registry.UpdatePolicy(ctx, kv, policy.KeyACL, acl, 0); err == nil {
		log.Warn().Str("acl", string(acl)).Msg("REACH_POLICY had no acl: wrote this one; change it with `agentreach policy set acl FILE`")
	} else if !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("write the acl: %w", err)
	}
	return nil
}

// startAuthorizer starts the access control of a dispatcher on nc with the
// verifier key in file.
func startAuthorizer(ctx context.Context, nc *nats.Conn, file string, log zerolog.Logger) (*auth.Authorizer, error) {
	verifier, err := auth.LoadVerifier(file)
	if err != nil {
		return nil, fmt.Errorf("--verifier: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	az, err := auth.NewAuthorizer(ctx, js, verifier, auth.AuthorizerConfig{}, auth.WithAuthorizerLogger(log))
	if err == nil {
		err = az.Start(ctx)
	}
	if err != nil {
		return nil, err
	}
	return az, nil
}

// securityBanner is what --auth and --tls add to the banner.
type securityBanner struct {
	lines []string
	// caller: the flags of a caller (agentreach call); admin: of the
	// admin commands (agentreach agents); natsAdmin: of the nats CLI.
	caller, admin, natsAdmin string
}

// banner returns what --auth and --tls add to the banner; self runs this
// binary, cliArgs are the flags that reach the server.
func (s *security) banner(self, cliArgs string) securityBanner {
	var b securityBanner
	var tlsCLI, tlsNATS string
	if s.tls != nil {
		tlsCLI, tlsNATS = " --tls-ca "+s.tls.CA, " --tlsca "+s.tls.CA
		mode := "TLS"
		if s.verify {
			tlsCLI += " --tls-cert " + s.tls.ClientCert + " --tls-key " + s.tls.ClientKey
			tlsNATS += " --tlscert " + s.tls.ClientCert + " --tlskey " + s.tls.ClientKey
			mode = "mutual TLS (client certificates required)"
		}
		b.lines = append(b.lines, fmt.Sprintf("tls         %s, CA %s", mode, s.tls.CA))
		b.caller, b.admin, b.natsAdmin = tlsCLI, tlsCLI, tlsNATS
	}
	if s.auth != nil {
		dir := s.auth.store.Dir()
		b.lines = append(b.lines, fmt.Sprintf("auth        identities in %s (%s auth ls --dir %s)", dir, self, dir),
			"            who may call what: "+self+" policy get acl"+cliArgs+b.admin+" --creds "+s.auth.store.CredsFile(s.auth.dispatcher))
		b.caller += " --creds " + s.auth.store.CredsFile(s.auth.cli)
		b.admin += " --creds " + s.auth.store.CredsFile(s.auth.dispatcher)
		b.natsAdmin += " --creds " + s.auth.store.CredsFile(s.auth.dispatcher) + " --inbox-prefix " + auth.InboxPrefix(s.auth.dispatcher)
	}
	return b
}
