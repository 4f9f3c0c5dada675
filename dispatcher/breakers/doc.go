// Package breakers shares the instances' circuit breakers between a
// dispatcher's replicas through the REACH_BREAKERS bucket: each replica
// writes the transitions its own breakers make (Sharing.Changed), and
// adopts the other replicas' (Sharing.Run), so an instance that fails is
// avoided by every replica, not only by the one that saw it fail. The
// breakers themselves are selection.Breaker.
package breakers
