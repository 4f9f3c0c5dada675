// Package policy holds the values of REACH_POLICY and what they decide,
// with no connection of its own: how dispatchers treat each capability
// (CapabilityPolicy: strategy, retries, timeouts, breakers, hedging, default
// requirements), the ACL (who may call which capability), and the kinds
// other packages register for their own keys (RegisterKind: identities,
// workflows).
//
// Parse reads and validates one value, in JSON or YAML, strictly (every
// error names the key and the field); a Set is every value in force at one
// revision, resolved per capability (Set.For) for a dispatcher's hot path.
// The registry stores the values (registry.PutPolicy) and follows them
// (registry.PolicyWatcher). docs/declarations.md describes them.
package policy
