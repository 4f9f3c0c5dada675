package gateway

import (
	"net/http"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/streams"
)

// Identifier turns an HTTP request into the caller the dispatcher sees.
// The gateway calls Identify once per request that reaches the NATS side
// (call, route, submit, broadcast, fan-out, results), after the task's
// headers are read from the request into task and before anything is
// routed. It may set or overwrite headers of task — Reach-Source, or a
// credential the dispatcher's Authorizer checks — and it returns nil, or
// the error the caller gets: UNAUTHORIZED (HTTP 401 when the request had
// no Authorization header, else 403) or BAD_REQUEST for a credential that
// does not parse. It runs on the request's goroutine and must be safe for
// concurrent use.
//
// Without one (the default) the request's own Reach-Source passes through
// and nothing is checked: bearer tokens are for an Identifier to map to
// identities (DESIGN §13).
type Identifier interface {
	Identify(r *http.Request, task nats.Header) *streams.Error
}

// IdentifierFunc is a function as an Identifier.
type IdentifierFunc func(r *http.Request, task nats.Header) *streams.Error

// Identify calls f.
func (f IdentifierFunc) Identify(r *http.Request, task nats.Header) *streams.Error { return f(r, task) }
