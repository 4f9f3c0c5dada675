package fanout

import (
	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/streams"
)

// WithAuthorizer makes the service pass every fan-out and broadcast request
// through a — the dispatcher's own (dispatcher.WithAuthorizer) — before it
// sends any branch: a broadcast with its capability, a fan-out with the
// capability "" (its caller is proven; each branch, a task of its own, is
// then authorized for its capability by the dispatcher, with the parent's
// Reach-Source). Without one every request is served.
func WithAuthorizer(a dispatcher.Authorizer) Option { return func(s *Service) { s.authorizer = a } }

// authorize returns the error the caller of m gets, or nil.
func (s *Service) authorize(capability string, m *nats.Msg) *streams.Error {
	if s.authorizer == nil {
		return nil
	}
	return s.authorizer.Authorize(capability, m, false)
}
