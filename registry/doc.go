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
// Declarations and requirements: a Declaration says what an agent type can
// do and refuses (labels, limits, permissions, JSON Schemas of its inputs);
// a Requirement (Reach-Require, or a policy's require) says what a task
// needs. CompiledDeclaration.Match decides the hard filter without
// allocating, ValidateInput checks payloads, and a Catalog holds the last
// good declaration of every type, read without locks.
//
// Policy: ParsePolicy reads the values of REACH_POLICY, and a PolicyWatcher
// holds the last good value of every key, resolved per capability
// (PolicySet.For), so a change is in force within a second without a
// restart.
//
// Declarations and policy values are documents people write, in JSON or
// YAML; they are read strictly and every error names the field by its path.
// docs/declarations.md describes them.
package registry
