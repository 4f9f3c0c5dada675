package authserver

import (
	"fmt"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/agent-reach/agentreach/auth"
	"github.com/agent-reach/agentreach/auth/devtls"
	"github.com/agent-reach/agentreach/registry/policy"
	"github.com/agent-reach/agentreach/streams"
)

// Configure turns operator mode on in opts: store's operator as the only
// trusted one, its system account, and a full account resolver in
// resolverDir (kept across restarts) preloaded with the current account
// JWTs, generated with acl (nil grants nothing until the Syncer pushes the
// ACL in force).
func Configure(opts *server.Options, store *auth.Store, resolverDir string, acl *policy.ACL, subjects streams.Subjects) error {
	operator, sys, preload, err := store.Trust(acl, subjects)
	if err != nil {
		return err
	}
	res, err := server.NewDirAccResolver(resolverDir, 0, auth.ResolverSync, server.NoDelete)
	if err != nil {
		return fmt.Errorf("authserver: account resolver in %s: %w", resolverDir, err)
	}
	for pub, token := range preload {
		if err := res.Store(pub, token); err != nil {
			res.Close()
			return fmt.Errorf("authserver: account resolver in %s: %w", resolverDir, err)
		}
	}
	opts.TrustedOperators = append(opts.TrustedOperators[:0], operator)
	opts.SystemAccount = sys
	opts.AccountResolver = res
	return nil
}

// ConfigureTLS serves TLS in opts with the certificates of files; with
// verify, clients must present a certificate the CA signed (mutual TLS).
func ConfigureTLS(opts *server.Options, files devtls.TLSFiles, verify bool) error {
	cfg, err := devtls.ServerTLSConfig(files, verify)
	if err != nil {
		return err
	}
	opts.TLSConfig = cfg
	opts.TLS, opts.TLSVerify = true, verify
	opts.TLSCert, opts.TLSKey, opts.TLSCaCert = files.ServerCert, files.ServerKey, files.CA
	return nil
}
