package a2a

import (
	"net/http"
	"slices"
	"time"

	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/registry/declare"
)

// The media types of the cards' input and output modes.
var (
	inputModes  = []string{"application/json", "text/plain"}
	outputModes = []string{"application/json"}
)

// bearerScheme is the name of the security scheme of a gateway with auth.
const bearerScheme = "bearer"

// typeView is what the routing table and the declarations say of one
// agent type.
type typeView struct {
	name      string
	decl      *declare.Declaration // nil: none stored
	live      []registry.Entry     // its instances
	caps      []string             // declared and live, sorted
	readiness map[string]any
}

// view returns what is known of agentType; false when it is neither
// declared nor has a live instance.
func (s *Server) view(agentType string, now time.Time) (typeView, bool) {
	v := typeView{name: agentType}
	if c := s.d.Catalog(); c != nil {
		if cd, ok := c.Lookup(agentType); ok {
			v.decl = cd.Declaration()
		}
	}
	for _, e := range s.d.Table().Entries() {
		if e.Type == agentType {
			v.live = append(v.live, e)
		}
	}
	if v.decl == nil && len(v.live) == 0 {
		return v, false
	}
	if v.decl != nil {
		for _, c := range v.decl.Capabilities {
			v.caps = append(v.caps, c.Name)
		}
	}
	for _, e := range v.live {
		v.caps = append(v.caps, e.Capabilities...)
	}
	slices.Sort(v.caps)
	v.caps = slices.Compact(v.caps)
	v.readiness = readiness(v.live, now)
	return v, true
}

// readiness is the ExtensionReadiness params of a type's live instances.
func readiness(live []registry.Entry, now time.Time) map[string]any {
	state, ready := ReadinessUnavailable, 0
	var age time.Duration = -1
	for _, e := range live {
		if a := now.Sub(e.Updated); age < 0 || a < age {
			age = a
		}
		if e.Status != registry.StatusReady {
			continue
		}
		ready++
		if e.Active < e.MaxConcurrent {
			state = ReadinessReady
		} else if state != ReadinessReady {
			state = ReadinessBusy
		}
	}
	if ready == 0 && len(live) > 0 {
		state = ReadinessDraining
	}
	p := map[string]any{"state": state, "instances": len(live), "ready": ready}
	if age >= 0 {
		p["heartbeat_age_ms"] = age.Milliseconds()
	}
	return p
}

// card returns the AgentCard of a type, its interface under base.
func (s *Server) card(v typeView, base string) AgentCard {
	c := AgentCard{
		Name:                v.name,
		Description:         "Agent-Reach agent type " + v.name,
		SupportedInterfaces: []AgentInterface{{URL: base + "/a2a/" + v.name, ProtocolBinding: BindingJSONRPC, ProtocolVersion: ProtocolVersion}},
		Version:             "0.0.0",
		DefaultInputModes:   inputModes,
		DefaultOutputModes:  outputModes,
		Skills:              []AgentSkill{},
	}
	if len(v.live) > 0 && v.live[0].Version != "" {
		c.Version = v.live[0].Version
	}
	schemas := map[string]any{}
	declared := map[string]declare.DeclaredCapability{}
	if v.decl != nil {
		if v.decl.Description != "" {
			c.Description = v.decl.Description
		}
		if v.decl.Version != "" {
			c.Version = v.decl.Version
		}
		for _, dc := range v.decl.Capabilities {
			declared[dc.Name] = dc
		}
	}
	for _, name := range v.caps {
		sk := AgentSkill{ID: name, Name: name, Description: "capability " + name + " of " + v.name, Tags: []string{v.name}}
		if dc, ok := declared[name]; ok {
			if dc.Description != "" {
				sk.Description = dc.Description
			}
			if dc.Mode != "" {
				sk.Tags = append(sk.Tags, dc.Mode)
			}
			sch := map[string]any{}
			if len(dc.InputSchema) > 0 {
				sch["input_schema"] = dc.InputSchema
			}
			if len(dc.OutputSchema) > 0 {
				sch["output_schema"] = dc.OutputSchema
			}
			if len(sch) > 0 {
				schemas[name] = sch
			}
		}
		c.Skills = append(c.Skills, sk)
	}
	c.Capabilities = AgentCapabilities{Streaming: true, Extensions: []AgentExtension{
		{URI: ExtensionSchemas, Description: "the JSON Schemas of each skill's input and output, from the type's declaration",
			Params: map[string]any{"skills": schemas}},
		{URI: ExtensionReadiness, Description: "readiness of the type's live instances, from the registry",
			Params: v.readiness},
	}}
	s.secure(&c)
	return c
}

// gatewayCard returns the gateway's own card: every routable capability a
// skill, the card of each live type in ExtensionAgents.
func (s *Server) gatewayCard(base string) AgentCard {
	c := AgentCard{
		Name:                "agentreach",
		Description:         "Agent-Reach gateway " + s.d.Name() + ": every routable capability; name the skill in the message's metadata.skill",
		SupportedInterfaces: []AgentInterface{{URL: base + "/a2a", ProtocolBinding: BindingJSONRPC, ProtocolVersion: ProtocolVersion}},
		Version:             ProtocolVersion,
		DefaultInputModes:   inputModes,
		DefaultOutputModes:  outputModes,
		Skills:              []AgentSkill{},
	}
	types := map[string]string{}
	for _, e := range s.d.Table().Entries() {
		types[e.Type] = base + "/a2a/" + e.Type + "/.well-known/agent-card.json"
	}
	for _, name := range s.d.Table().Capabilities() {
		c.Skills = append(c.Skills, AgentSkill{ID: name, Name: name, Description: "capability " + name, Tags: []string{}})
	}
	c.Capabilities = AgentCapabilities{Streaming: true, Extensions: []AgentExtension{
		{URI: ExtensionAgents, Description: "the card of each agent type with a live instance", Params: map[string]any{"cards": types}},
	}}
	s.secure(&c)
	return c
}

// secure adds the bearer scheme to a card of a gateway with auth.
func (s *Server) secure(c *AgentCard) {
	if s.cfg.Identify == nil {
		return
	}
	c.SecuritySchemes = map[string]SecurityScheme{bearerScheme: {HTTPAuth: &HTTPAuthSecurityScheme{Scheme: "Bearer",
		Description: "a token made by `agentreach auth token`; it names the identity the call runs as"}}}
	c.SecurityRequirements = []SecurityRequirement{{Schemes: map[string]StringList{bearerScheme: {List: []string{}}}}}
}

// baseURL is the scheme and host r was sent to.
func baseURL(r *http.Request) string {
	if r.TLS != nil {
		return "https://" + r.Host
	}
	return "http://" + r.Host
}
