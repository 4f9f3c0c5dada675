package auth

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/agent-reach/agentreach/registry/policy"
	"github.com/agent-reach/agentreach/streams"
)

// ResolverSync is how often the servers of a cluster compare the account
// JWTs their full resolvers hold; a push reaches every server at once
// anyway.
const ResolverSync = 2 * time.Minute

// OperatorJWT returns the operator's JWT, naming the system account.
func (s *Store) OperatorJWT() (string, error) {
	kp, err := s.seed(filepath.Join(keysDir, "operator.nk"))
	if err != nil {
		return "", err
	}
	st := s.snapshot()
	oc := jwt.NewOperatorClaims(st.Operator)
	oc.Name = "agentreach"
	oc.SystemAccount = st.SystemAccount
	return encode(oc, kp)
}

// SystemAccountJWT returns the system account's JWT.
func (s *Store) SystemAccountJWT() (string, error) {
	kp, err := s.seed(filepath.Join(keysDir, "operator.nk"))
	if err != nil {
		return "", err
	}
	ac := jwt.NewAccountClaims(s.snapshot().SystemAccount)
	ac.Name = SystemAccountName
	return encode(ac, kp)
}

// AccountJWT returns the AGENTREACH account's JWT, signed by the operator,
// and a digest of what it says (equal for equal content, whenever it was
// issued). It holds one scoped signing key per identity that is not
// revoked, whose template is Permissions(identity, acl, subjects), and the
// user keys of revoked identities in its revocation list. Users issued
// directly by the account key may do nothing.
func (s *Store) AccountJWT(acl *policy.ACL, subjects streams.Subjects) (token, digest string, err error) {
	kp, err := s.seed(filepath.Join(keysDir, "operator.nk"))
	if err != nil {
		return "", "", err
	}
	st := s.snapshot()
	ac := jwt.NewAccountClaims(st.Account)
	ac.Name = AccountName
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: jwt.NoLimit, DiskStorage: jwt.NoLimit,
		Streams: jwt.NoLimit, Consumer: jwt.NoLimit, MaxAckPending: jwt.NoLimit}
	ac.DefaultPermissions.Pub.Deny.Add(">")
	ac.DefaultPermissions.Sub.Deny.Add(">")
	for _, id := range st.Identities {
		if !id.Active() {
			ac.RevokeAt(id.PublicKey, id.Revoked)
			continue
		}
		scope := jwt.NewUserScope()
		scope.Key = id.SigningKey
		scope.Role = string(id.Role) + ":" + id.Name
		scope.Description = fmt.Sprintf("Agent-Reach %s %s", id.Role, id.Name)
		scope.Template.Permissions = Permissions(id, acl, subjects)
		if id.Role == RoleLeaf {
			scope.Template.Permissions = LeafPermissions(id, st.Identities, acl, subjects)
		}
		ac.SigningKeys.AddScopedSigner(scope)
	}
	b, err := json.Marshal(ac)
	if err != nil {
		return "", "", fmt.Errorf("auth: %w", err)
	}
	sum := sha256.Sum256(b)
	token, err = encode(ac, kp)
	return token, hex.EncodeToString(sum[:]), err
}

// encode signs claims with kp, validating them first.
func encode(c jwt.Claims, kp nkeys.KeyPair) (string, error) {
	var vr jwt.ValidationResults
	c.Validate(&vr)
	if errs := vr.Errors(); len(errs) > 0 {
		return "", fmt.Errorf("auth: invalid claims: %v", errs[0])
	}
	return c.Encode(kp)
}

// Trust returns what a server in operator mode needs: the operator's
// claims, the system account's public key, and the JWTs of both accounts
// by public key, to preload into its resolver (package authserver does it
// for an embedded server).
func (s *Store) Trust(acl *policy.ACL, subjects streams.Subjects) (operator *jwt.OperatorClaims, systemAccount string, preload map[string]string, err error) {
	op, err := s.OperatorJWT()
	if err != nil {
		return nil, "", nil, err
	}
	if operator, err = jwt.DecodeOperatorClaims(op); err != nil {
		return nil, "", nil, fmt.Errorf("auth: %w", err)
	}
	if preload, err = s.preload(acl, subjects); err != nil {
		return nil, "", nil, err
	}
	return operator, s.snapshot().SystemAccount, preload, nil
}

// ServerConfig returns the nats-server configuration of operator mode, to
// include in a server's config (deploy/nats/common.conf includes it): the
// operator, the system account, a full resolver in resolverDir (as the
// server sees the path) and the account JWTs to preload.
func (s *Store) ServerConfig(resolverDir string, acl *policy.ACL, subjects streams.Subjects) (string, error) {
	op, err := s.OperatorJWT()
	if err != nil {
		return "", err
	}
	preload, err := s.preload(acl, subjects)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Operator mode for Agent-Reach, written by `agentreach auth server-config`.\n"+
		"# Regenerate it after `agentreach auth init`; identities and the ACL change at\n"+
		"# run time (`agentreach auth sync` pushes them), not through this file.\n")
	fmt.Fprintf(&b, "operator: %s\n", strconv.Quote(op))
	st := s.snapshot()
	fmt.Fprintf(&b, "system_account: %s\n", st.SystemAccount)
	fmt.Fprintf(&b, "resolver: {\n  type: full\n  dir: %s\n  allow_delete: false\n  interval: %s\n}\n",
		strconv.Quote(resolverDir), strconv.Quote(ResolverSync.String()))
	fmt.Fprintf(&b, "resolver_preload: {\n")
	for _, pub := range []string{st.SystemAccount, st.Account} {
		fmt.Fprintf(&b, "  %s: %s\n", pub, strconv.Quote(preload[pub]))
	}
	fmt.Fprintf(&b, "}\n")
	return b.String(), nil
}

// LeafServerConfig returns ServerConfig for a leaf node server, followed by
// the AGENTREACH account's public key as the variable AGENTREACH_ACCOUNT:
// a leaf's remote must name the account it links (deploy/nats/leaf.conf:
// account: $AGENTREACH_ACCOUNT). Only a config that uses the variable may
// include it (nats-server refuses an unused one).
func (s *Store) LeafServerConfig(resolverDir string, acl *policy.ACL, subjects streams.Subjects) (string, error) {
	text, err := s.ServerConfig(resolverDir, acl, subjects)
	if err != nil {
		return "", err
	}
	return text + fmt.Sprintf("# The AGENTREACH account, which a leaf node's remote links.\nAGENTREACH_ACCOUNT: %s\n",
		strconv.Quote(s.snapshot().Account)), nil
}

// preload returns the JWTs of both accounts by public key.
func (s *Store) preload(acl *policy.ACL, subjects streams.Subjects) (map[string]string, error) {
	sys, err := s.SystemAccountJWT()
	if err != nil {
		return nil, err
	}
	app, _, err := s.AccountJWT(acl, subjects)
	if err != nil {
		return nil, err
	}
	st := s.snapshot()
	return map[string]string{st.SystemAccount: sys, st.Account: app}, nil
}
