package selection

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/registry/declare"
	"github.com/agent-reach/agentreach/streams"
)

// Requirement matching (docs/declarations.md). Before a strategy balances
// load, the instances offering a capability are filtered by what the task
// requires (Reach-Require merged over the capability policy's default
// requirement) against what each instance's type declares in REACH_CAPS,
// and by the dependencies the instance reports down. This static part
// depends only on the routes, the declarations and the requirement, so it
// is computed once per combination and cached (a View): a task pays a map
// lookup, not a scan of every instance. What changes from task to task —
// observed latency against max_latency_ms, breakers, free slots — is
// checked as the strategy picks.

// Declarations looks up what an agent type declares (registry.Catalog).
type Declarations interface {
	Lookup(agentType string) (*declare.CompiledDeclaration, bool)
}

// View is the static filter of one capability's routes for one
// requirement under one version of the declarations.
type View struct {
	Routes   *registry.Routes    // the instances that qualify
	Excluded []streams.Exclusion // the ones that do not, with why
	schemas  []typeSchema        // the qualifying types that check payloads
	// HedgeSafe: every qualifying instance's type declares the capability
	// idempotent or read-only, so a second delivery is harmless.
	HedgeSafe bool
}

// typeSchema is a qualifying type whose declaration has an input schema
// for the capability.
type typeSchema struct {
	agentType string
	decl      *declare.CompiledDeclaration
}

// BuildView filters rs, the routes of capability, by need and the
// declarations.
func BuildView(decls Declarations, capability string, need declare.Requirement, rs *registry.Routes) *View {
	v := &View{HedgeSafe: rs.Len() > 0}
	keep := make([]*registry.Instance, 0, rs.Len())
	seen := map[string]bool{}
	for i := 0; i < rs.Len(); i++ {
		inst := rs.Instances[i]
		e := inst.Entry()
		decl, _ := decls.Lookup(e.Type)
		var failed []string // every condition the instance fails
		for _, dep := range inst.DownDependencies() {
			failed = append(failed, "dependency "+dep+" is down")
		}
		if ok, why := decl.Match(capability, need); !ok {
			failed = append(failed, why)
		}
		if len(failed) > 0 {
			v.Excluded = append(v.Excluded, streams.Exclusion{Node: inst.ID, Reason: strings.Join(failed, declare.MatchSeparator)})
			continue
		}
		keep = append(keep, inst)
		if decl == nil {
			v.HedgeSafe = false
		} else if c, ok := decl.Capability(capability); !ok || !c.Idempotent && c.Mode != declare.ModeRead {
			v.HedgeSafe = false
		}
		if decl != nil && !seen[e.Type] {
			seen[e.Type] = true
			if c, ok := decl.Capability(capability); ok && len(c.InputSchema) > 0 {
				v.schemas = append(v.schemas, typeSchema{agentType: e.Type, decl: decl})
			}
		}
	}
	if len(v.Excluded) == 0 {
		v.Routes = rs // nothing filtered: the shared routes as they are
	} else {
		v.Routes = registry.NewRoutes(keep)
	}
	return v
}

// CheckInput checks a payload of capability against the input schemas of
// the qualifying types. It returns the types that refuse it, and an error
// when every type that could take it refuses it (naming what is wrong);
// when only some do, their instances are to be passed over.
func (v *View) CheckInput(capability, contentType string, data []byte) (badTypes []string, err error) {
	var first error
	for _, s := range v.schemas {
		if err := s.decl.ValidateInput(capability, contentType, data); err != nil {
			badTypes = append(badTypes, s.agentType)
			if first == nil {
				first = err
			}
		}
	}
	if first == nil {
		return badTypes, nil
	}
	for _, inst := range v.Routes.Instances {
		if !slices.Contains(badTypes, inst.Entry().Type) {
			return badTypes, nil // another type takes it as it is
		}
	}
	return badTypes, first
}

// Cache is a concurrent map that starts afresh once it holds Limit
// entries: a bound on what a stream of distinct keys can make it hold.
type Cache struct {
	Limit int64
	cur   atomic.Pointer[countedMap]
}

type countedMap struct {
	m sync.Map
	n atomic.Int64
}

// Load returns the value stored for k.
func (b *Cache) Load(k any) (any, bool) {
	if c := b.cur.Load(); c != nil {
		return c.m.Load(k)
	}
	return nil, false
}

// Store stores v for k, first starting afresh when the cache is full.
func (b *Cache) Store(k, v any) {
	c := b.cur.Load()
	if c == nil || c.n.Load() >= b.Limit {
		c = &countedMap{}
		b.cur.Store(c)
	}
	if _, loaded := c.m.LoadOrStore(k, v); !loaded {
		c.n.Add(1)
	}
}
