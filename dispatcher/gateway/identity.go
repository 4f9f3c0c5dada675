package gateway

import (
	"net/http"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/streams"
)

// Identifier turns an HTTP request into the caller the dispatcher sees.
// The gateway calls Identify once per request that reaches the NATS side
// (call, route, submit, broadcast, fan-out, results), with the task as it
// will be sent — its headers read from the request, its body, and its
// Subject when the gateway publishes it over NATS (submit, broadcast,
// fan-out; empty for a call, which the gateway routes in process, and for
// a results read) — after which the task is not changed. It may set or
// overwrite task's headers — Reach-Source, a Reach-Signature the
// dispatcher's Authorizer checks — and it returns nil, or the error the
// caller gets: UNAUTHORIZED (HTTP 401 when the request had no
// Authorization header, else 403) or BAD_REQUEST for a credential that
// does not parse. It runs on the request's goroutine and must be safe for
// concurrent use.
//
// Without one (the default) the request's own Reach-Source passes through
// and nothing is checked. With auth on, cmd/agentreach installs
// auth.Authorizer.Vouch: bearer tokens map to identities under the ACL
// (docs/security.md).
type Identifier interface {
	Identify(r *http.Request, task *nats.Msg) *streams.Error
}

// IdentifierFunc is a function as an Identifier.
type IdentifierFunc func(r *http.Request, task *nats.Msg) *streams.Error

// Identify calls f.
func (f IdentifierFunc) Identify(r *http.Request, task *nats.Msg) *streams.Error { return f(r, task) }
