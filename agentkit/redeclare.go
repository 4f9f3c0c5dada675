package agentkit

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/registry/declare"
	"github.com/agent-reach/agentreach/streams"
)

// Redeclare replaces what a started agent serves (a connector following an
// upstream's tool list): handlers become all its capabilities and decl its
// declaration (nil writes none), checked as at Start. The declaration is
// written first, then the handlers swapped and the record put at once; a
// delivery for a capability just dropped is answered NO_AGENT. A refused
// change changes nothing. Calls must not overlap.
func (a *Agent) Redeclare(ctx context.Context, handlers map[string]Handler, decl *declare.Declaration) error {
	for c, h := range handlers {
		if err := streams.ValidateCapability(c); err != nil || h == nil {
			return fmt.Errorf("agentkit: handler of %q: %v", c, err)
		}
	}
	cfg := a.cfg
	cfg.Declaration, cfg.DeclarationFile = decl, ""
	d, err := readDeclaration(cfg)
	if err != nil {
		return err
	}
	a.mu.Lock()
	hb, running := a.hb, a.started && !a.drained
	a.mu.Unlock()
	switch {
	case !running:
		return ErrNotStarted
	case len(handlers) == 0:
		return ErrNoHandlers
	}
	js, err := a.jetStream(a.hbConn)
	if err == nil {
		err = a.declare(ctx, js, d, handlers)
	}
	if err != nil {
		return err
	}
	caps := slices.Sorted(maps.Keys(handlers))
	a.mu.Lock()
	a.handlers, a.decl = maps.Clone(handlers), d
	a.mu.Unlock()
	hb.Update(func(r *registry.Record) { r.Capabilities = caps })
	a.log.Info().Strs("capabilities", caps).Msg("capabilities redeclared")
	return nil
}
