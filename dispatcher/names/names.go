// Package names tells a capability name never registered — most likely a
// caller's typo, whose NO_AGENT is the caller's doing — from one whose
// instances are gone, whose NO_AGENT is a failure of the service.
package names

import (
	"sync"
	"sync/atomic"

	"github.com/agent-reach/agentreach/streams"
)

// maxServed bounds the names Served remembers; past it, a name not
// remembered counts as known (never wrongly called a typo).
const maxServed = 100_000

// Served remembers the capabilities a replica has delivered tasks of.
// The zero value is ready; it is safe for concurrent use.
type Served struct {
	m sync.Map
	n atomic.Int64
}

// Record notes a task's end: its capability, whether it was delivered to
// an instance, and its error (nil: it finished). It reports whether the task ended
// NO_AGENT for a name never registered: no instance delivered a task of
// it since the replica started, and known (asked only then: whether an
// instance offers it now, draining too, or a workflow is so named) says
// no.
func (s *Served) Record(capability string, delivered bool, e *streams.Error, known func(string) bool) bool {
	if delivered {
		if _, ok := s.m.Load(capability); !ok && s.n.Load() < maxServed {
			if _, dup := s.m.LoadOrStore(capability, struct{}{}); !dup {
				s.n.Add(1)
			}
		}
		return false
	}
	if e == nil || e.Code != streams.CodeNoAgent || s.n.Load() >= maxServed {
		return false
	}
	if _, ok := s.m.Load(capability); ok {
		return false
	}
	return !known(capability)
}
