package agentkit

import (
	"slices"

	"github.com/agent-reach/agentreach/agentkit/internal/micro"
)

// WithoutServiceDiscovery stops the agent from answering the NATS micro
// protocol's $SRV.PING, $SRV.INFO and $SRV.STATS, which it answers by
// default so that `nats micro ls` lists it (docs/protocol.md, NATS micro).
func WithoutServiceDiscovery() Option { return func(a *Agent) { a.noMicro = true } }

// startService starts answering the micro protocol for the agent's
// capabilities (a.mu held, at Start); nil when WithoutServiceDiscovery.
func (a *Agent) startService() (*micro.Service, error) {
	if a.noMicro {
		return nil, nil
	}
	cfg := micro.Config{Type: a.cfg.Type, ID: a.id, Version: a.cfg.Version, Subject: a.cfg.Subjects.Agent(a.id),
		Description: "Agent-Reach agent type " + a.cfg.Type}
	if a.decl != nil && a.decl.Description != "" {
		cfg.Description = a.decl.Description
	}
	for c := range a.handlers {
		cfg.Capabilities = append(cfg.Capabilities, c)
	}
	slices.Sort(cfg.Capabilities)
	svc := micro.New(cfg)
	if err := svc.Start(a.nc); err != nil {
		return nil, err
	}
	return svc, nil
}
