// Package auth gives every agent, caller and dispatcher an identity of its
// own and enforces who may call whom (docs/security.md).
//
// Identities are NATS users in the decentralised JWT model: an operator
// signs the account AGENTREACH, and the account holds one scoped signing key
// per identity whose permission template is generated from the identity's
// role and the ACL in REACH_POLICY (policy.ACL). The server checks those
// permissions on every message. A change — a new identity, a revocation, a
// new ACL — is a new account JWT pushed to the servers' resolver at run
// time ($SYS.REQ.CLAIMS.UPDATE): no restart, and no user credential is
// reissued.
//
// What the server cannot see the dispatcher checks (Authorizer): the
// Reach-Source of a task must be its caller's verified identity — each task
// carries an HMAC (Reach-Signature) keyed by an X25519 agreement between
// the caller's nkey and the dispatchers' verifier key — and the caller must
// be granted the capability by the ACL, which matters for callers the
// server cannot restrict (a fan-out's branches, the HTTP gateway).
//
// The pieces: Store (the operator, accounts, keys and identities on disk,
// `agentreach auth`), Permissions (a role's subjects), Syncer (pushes the
// account JWT and the identity directory when the store or the ACL
// changes), LoadSigner and LoadVerifier (Reach-Signature's keys from their
// files; signing and checking are auth/signature's), Authorizer (the
// dispatcher hook) and ConnectOptions (a client's connection options from
// its credentials). The development CA and certificates are auth/devtls's.
package auth
