// Package routing holds the scenarios that measure direct routed calls:
// overhead (the dispatcher against a queue group), skew (slow and stalling
// agents), hedge (hedged requests), fanout (a fan-out against one call)
// and security (auth, ACL, signatures and TLS on against off).
package routing
