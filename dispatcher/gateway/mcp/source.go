package mcp

import (
	"context"
	"slices"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/registry/policy"
)

// Source is what a Server serves: the routable capabilities, the ACL, the
// changes of both, and calls. A dispatcher replica is one
// (DispatcherSource); `agentreach mcp` on stdio uses a registry follower
// and a NATS client (NATSSource).
type Source interface {
	// Offers returns the capabilities a task could be routed to now, each
	// with its declaration, sorted by capability.
	Offers() []Offer
	// ACL returns the access control list in force; nil with auth off
	// (every caller may call everything).
	ACL() *policy.ACL
	// Changed returns channels that are closed at the next change of what
	// Offers or ACL return (nil channels are never closed).
	Changed() []<-chan struct{}
	// Call routes task (its headers and JSON body) to capability as its
	// Reach-Source, and returns the reply a caller would receive: the
	// result, or an error reply (Reach-Error, body {"code","message"}).
	// When ctx ends first the task is cancelled.
	Call(ctx context.Context, capability string, task *nats.Msg) *nats.Msg
}

// offers lists the routable capabilities of table with their
// declarations from catalog. A capability that several types declare
// takes the declaration of the first type by name among its routable
// instances' types that declares it.
func offers(table *registry.Table, catalog *registry.Catalog) []Offer {
	if table == nil {
		return nil
	}
	var out []Offer
	for _, c := range table.Capabilities() {
		rs := table.Candidates(c)
		if rs.Len() == 0 {
			continue
		}
		var types []string
		for i := 0; i < rs.Len(); i++ {
			types = append(types, rs.Instances[i].Entry().Type)
		}
		slices.Sort(types)
		types = slices.Compact(types)
		o := Offer{Capability: c}
		for _, t := range types {
			if catalog == nil {
				break
			}
			if cd, ok := catalog.Lookup(t); ok {
				if spec, ok := cd.Capability(c); ok {
					o.Decl, o.TypeDescription = spec, cd.Declaration().Description
					break
				}
			}
		}
		out = append(out, o)
	}
	return out
}

// aclOf returns the ACL in set, nil when there is none.
func aclOf(set *policy.Set) *policy.ACL {
	if set == nil {
		return nil
	}
	v, ok := set.Value(policy.KeyACL)
	if !ok {
		return nil
	}
	acl, _ := v.Decoded.(*policy.ACL)
	return acl
}

// dispatcherSource serves a started dispatcher's routing table and
// declarations and routes calls in process (Dispatcher.Call).
type dispatcherSource struct {
	d       *dispatcher.Dispatcher
	checked bool // the ACL applies (auth on)
}

// DispatcherSource serves d's routing table, declarations and policy and
// routes calls through d in process. With acl set (auth on) the ACL in
// d's policy filters each caller's tools; without, every caller sees
// every tool.
func DispatcherSource(d *dispatcher.Dispatcher, acl bool) Source {
	return &dispatcherSource{d: d, checked: acl}
}

func (s *dispatcherSource) Offers() []Offer { return offers(s.d.Table(), s.d.Catalog()) }

func (s *dispatcherSource) ACL() *policy.ACL {
	if !s.checked {
		return nil
	}
	if acl := aclOf(s.policies()); acl != nil {
		return acl
	}
	return &policy.ACL{} // auth on and no ACL: nothing is granted
}

func (s *dispatcherSource) policies() *policy.Set {
	if p := s.d.Policies(); p != nil {
		return p.Current()
	}
	return nil
}

func (s *dispatcherSource) Changed() []<-chan struct{} {
	var out []<-chan struct{}
	if t := s.d.Table(); t != nil {
		out = append(out, t.Changed())
	}
	if c := s.d.Catalog(); c != nil {
		out = append(out, c.Changed())
	}
	if p := s.d.Policies(); p != nil && s.checked {
		out = append(out, p.Changed())
	}
	return out
}

func (s *dispatcherSource) Call(ctx context.Context, capability string, task *nats.Msg) *nats.Msg {
	return s.d.Call(ctx, capability, task)
}
