// Package registry keeps what dispatchers know about agents: the live
// instances in REACH_AGENTS, what each agent type declares in REACH_CAPS,
// and the routing policy in REACH_POLICY.
//
// Instances: the agent record, its validation, the heartbeat writer that
// keeps a record alive, and the routing table (Table) that watches the
// bucket. Liveness is decided by the NATS server alone: a record lives
// while its agent keeps putting it, and the bucket's TTL (3 × heartbeat)
// removes it otherwise. The server then writes a limit marker, which every
// watching routing table sees within milliseconds. No agent's clock is ever
// compared with another's.
//
// Declarations: what they say and how a requirement matches them is
// package registry/declare's, which needs no connection; a Catalog holds
// the last good compiled declaration of every type in REACH_CAPS, read
// without locks, and PutDeclaration, GetDeclaration, ListDeclarations and
// DeleteDeclaration store them.
//
// Policy: the values of REACH_POLICY are package registry/policy's
// (policy.Parse, the ACL); a PolicyWatcher holds the last good value of
// every key, resolved per capability (policy.Set.For), so a change is in
// force within a second without a restart, and PutPolicy, UpdatePolicy,
// GetPolicy and ListPolicy store them.
//
// Declarations and policy values are documents people write, in JSON or
// YAML; they are read strictly (registry/document) and every error names
// the field by its path. docs/declarations.md describes them.
package registry
