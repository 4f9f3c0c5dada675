package agentkit

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

// ErrDrained is returned by Redeclare once the agent has drained.
var ErrDrained = errors.New("agentkit: agent has drained")

// Redeclare replaces, on a started agent, what it serves: handlers becomes
// its whole set of capabilities and decl its declaration (nil writes none,
// leaving REACH_CAPS as it is), for an
// agent whose capabilities follow something outside it (a connector following
// an upstream's tool list). The declaration is checked as at Start (its type
// the agent's, every capability it names handled) and written to REACH_CAPS
// first; then the handlers are swapped and the record rewritten at once, so
// dispatchers route the new set from the next record they read. A delivery
// for a capability just removed is answered NO_AGENT and retried elsewhere.
// An invalid set changes nothing. Calls must not overlap.
func (a *Agent) Redeclare(ctx context.Context, handlers map[string]Handler, decl *registry.Declaration) error {
	if len(handlers) == 0 {
		return ErrNoHandlers
	}
	for c, h := range handlers {
		if err := streams.ValidateCapability(c); err != nil {
			return fmt.Errorf("agentkit: %w", err)
		}
		if h == nil {
			return fmt.Errorf("agentkit: nil handler for %q", c)
		}
	}
	cfg := a.cfg
	cfg.Declaration, cfg.DeclarationFile = decl, ""
	d, err := readDeclaration(cfg)
	if err != nil {
		return err
	}
	if d != nil {
		for i, c := range d.Capabilities {
			if _, ok := handlers[c.Name]; !ok {
				return fmt.Errorf("agentkit: declaration: %w: capabilities[%d].name: %q has no handler (have %v)",
					registry.ErrInvalidDeclaration, i, c.Name, slices.Sorted(maps.Keys(handlers)))
			}
		}
	}
	a.mu.Lock()
	started, drained, hb := a.started, a.drained, a.hb
	a.mu.Unlock()
	switch {
	case !started:
		return ErrNotStarted
	case drained:
		return ErrDrained
	}
	if d != nil {
		js, err := jetstream.New(a.hbConn)
		if err != nil {
			return err
		}
		if err := a.putDeclaration(ctx, js, d); err != nil {
			return err
		}
	}
	hs := maps.Clone(handlers)
	caps := slices.Sorted(maps.Keys(hs))
	a.mu.Lock()
	a.handlers, a.decl = hs, d
	a.mu.Unlock()
	hb.Update(func(r *registry.Record) { r.Capabilities = caps })
	a.log.Info().Strs("capabilities", caps).Msg("capabilities redeclared")
	return nil
}
