package engine

import (
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/dispatcher/selection"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

// Stage 3 of a task's path, resolve: what may take the task. Its
// capability's policy (policy.go) came with decode; here a workflow's name
// goes to the Resolver, a unicast task (Reach-Agent) to its one instance,
// and any other to the instances of the routing table that offer the
// capability, filtered by the task's requirements against the declarations
// (a cached selection.View). Before the first pick the payload is checked
// against the input schemas and the capability's in-flight cap is taken
// (start). When nothing qualifies, NO_AGENT lists what was passed over.

// Requirement matching (docs/declarations.md). Before a strategy balances load, the
// instances offering a capability are filtered by what the task requires
// (Reach-Require merged over the capability policy's default requirement)
// against what each instance's type declares in REACH_CAPS, and by the
// dependencies the instance reports down. This static part depends only on
// the routes, the declarations and the requirement, so it is computed once
// per combination and cached (a view): a task pays a map lookup, not a scan
// of every instance. What changes from task to task — observed latency
// against max_latency_ms, breakers, free slots — is checked as the strategy
// picks. A JSON or msgpack payload is checked against the input schema of
// the candidates' types before anything is delivered.

// maxViews bounds the cached views; beyond it the cache starts afresh.
const maxViews = 4096

type viewKey struct {
	routes  *registry.Routes
	version uint64
	need    string
}

// start checks and admits a task before its first pick: the payload
// against the input schemas of the types that could take it, and the
// capability's in-flight cap of its policy.
func (en *Engine) start(t *Task) *streams.Error {
	if rs := en.table.Candidates(t.capability); rs.Len() > 0 {
		v := en.viewOf(t, rs)
		if e := en.checkInput(t, v); e != nil {
			return e
		}
		if p := t.pol; p.Hedge != nil && t.unicast == "" && t.seq == 0 && (p.HedgeFromConfig || p.Idempotent || v.HedgeSafe) {
			t.hedge = en.hedges.Of(t.capability, p.Hedge)
		}
	}
	if !t.pol.Admit() {
		return streams.NewError(streams.CodeOverloaded, "%s has %d tasks in flight at dispatcher %s, its policy's max_in_flight",
			t.capability, t.pol.MaxInFlight, en.cfg.Name)
	}
	t.admitted = true
	return nil
}

// StartShared readies t, a broadcast's shared delivery
// (dispatcher.OpenShared), as Run readies a task before its first pick;
// it is asked of every instance, so it names none.
func (en *Engine) StartShared(t *Task) *streams.Error {
	t.unicast = ""
	t.started = true
	return en.start(t)
}

// Finish gives back what start took; a task's done calls it once.
func (t *Task) Finish() {
	if t.admitted {
		t.admitted = false
		t.pol.Release()
	}
}

// checkInput checks t's payload against the input schemas of the
// qualifying types. When every type that could take it refuses it, the task
// is BAD_REQUEST, naming what is wrong; when only some do, their instances
// are passed over.
func (en *Engine) checkInput(t *Task, v *selection.View) *streams.Error {
	bad, err := v.CheckInput(t.capability, t.contentType, t.req.Data)
	t.badTypes = append(t.badTypes, bad...)
	if err != nil {
		return streams.NewError(streams.CodeBadRequest, "%s: %v", t.capability, err)
	}
	return nil
}

// candidates returns the instances that may take t: the routable ones
// offering its capability that meet its requirements (matching), or its
// one instance when it names one. When none may, it says why.
func (en *Engine) candidates(t *Task) (*registry.Routes, NoRoute) {
	rs := en.Matching(t, en.table.Candidates(t.capability))
	if t.unicast != "" {
		u, ok := en.table.Lookup(t.unicast)
		switch {
		case !ok || !u.Entry().Routable() || !u.Entry().Has(t.capability):
			return nil, RouteGone
		case !rs.Has(u.ID):
			return nil, RouteNoAgent // it does not meet the task's requirements (see t.view)
		}
		rs = registry.NewRoutes([]*registry.Instance{u})
	}
	if rs.Len() == 0 {
		return nil, RouteNoAgent
	}
	return rs, 0
}

// NoRoute says why route found no instance; its error is built only
// when a task ends with it (pump asks again and again while all are full).
type NoRoute int

const (
	RouteNoAgent NoRoute = iota + 1 // none routable offers the capability
	RouteGone                       // the unicast instance is not routable
	RouteFull                       // every instance has all its slots in use
	RouteOpen                       // every breaker refuses
	RouteLooped                     // the chain reached every instance MaxVisits times
)

func (why NoRoute) Error(en *Engine, t *Task) *streams.Error {
	switch why {
	case RouteGone:
		return streams.NewError(streams.CodeNoAgent, "instance %q is not routable for %s", t.unicast, t.capability)
	case RouteFull:
		return streams.NewError(streams.CodeTargetBusy, "every instance of %s has all its slots in use", t.capability)
	case RouteOpen:
		e := streams.NewError(streams.CodeCircuitOpen, "the breakers of every instance of %s are open", t.capability)
		e.Excluded, _ = en.exclusions(t, false, excludedInErrors)
		return e
	case RouteLooped:
		return streams.NewError(streams.CodeLoopDetected, "this chain reached every instance of %s %d times", t.capability, en.cfg.MaxVisits)
	}
	if t.view != nil && (len(t.view.Excluded) > 0 || len(t.passed) > 0) {
		return en.noAgent(t, "no routable instance of %s meets the task's requirements", t.capability)
	}
	if near := en.Suggest(t.capability); near != "" { // no instance at all: perhaps a typo
		return en.noAgent(t, "no routable instance offers %s; did you mean %s?", t.capability, near)
	}
	return en.noAgent(t, "no routable instance offers %s", t.capability)
}

// Bounds of the exclusion lists: a capability with thousands of instances
// would otherwise put thousands of entries into every task's record.
const excludedInErrors = 64 // entries a NO_AGENT or CIRCUIT_OPEN answer lists

// ExcludedNotGranted is the NO_AGENT exclusion reason of an instance whose
// record the authorizer does not let this dispatcher route (RecordChecker:
// it offers a capability outside its identity's grant, or names no agent
// identity); the dispatcher's log says which.
const ExcludedNotGranted = "not routed: its record is not within its identity's grant (see the dispatcher's log)"

// exclusions lists, up to limit, why instances of t's capability were
// passed over — the view's static reasons, what the picks found, and with
// all the instances that are not routable at all (draining, or refused by
// the authorizer) — and how many
// there are in all.
func (en *Engine) exclusions(t *Task, all bool, limit int) (list []streams.Exclusion, total int) {
	add := func(x streams.Exclusion) {
		if total++; len(list) < limit {
			list = append(list, x)
		}
	}
	if t.view != nil { // thousands at 10k agents: counted, not walked
		ex := t.view.Excluded
		list = append(list, ex[:min(len(ex), limit)]...)
		total = len(ex)
	}
	for _, x := range t.passed {
		add(x)
	}
	if all {
		routes := en.table.Candidates(t.capability)
		for _, inst := range en.table.Offering(t.capability) {
			switch {
			case !inst.Entry().Routable():
				add(streams.Exclusion{Node: inst.ID, Reason: "draining"})
			case !routes.Has(inst.ID): // refused by the authorizer (RecordChecker), which logged why
				add(streams.Exclusion{Node: inst.ID, Reason: ExcludedNotGranted})
			}
		}
	}
	return list, total
}

// noAgent is the NO_AGENT error of t, listing what was passed over and why.
func (en *Engine) noAgent(t *Task, format string, args ...any) *streams.Error {
	e := streams.NewError(streams.CodeNoAgent, format, args...)
	var total int
	e.Excluded, total = en.exclusions(t, true, excludedInErrors)
	switch {
	case total > len(e.Excluded):
		e.Message += fmt.Sprintf(" (%d excluded; the first %d are listed)", total, len(e.Excluded))
	case total > 0:
		e.Message += fmt.Sprintf(" (%d excluded: see excluded)", total)
	}
	return e
}

// Resolves reports whether the tasks addressed to name go to the resolver
// (name is a workflow's) rather than to the instances of a capability.
func (en *Engine) Resolves(name string) bool {
	return en.hooks.Resolver != nil && en.hooks.Resolver.Serves(name)
}

// Direct runs a direct-tier task of a name the resolver serves, once the
// authorizer lets its caller call that name, and returns its reply. Every
// way in (the Dispatcher's receive and Call) comes here; the caller holds
// an in-flight slot.
func (en *Engine) Direct(m *nats.Msg, name string) *nats.Msg {
	if en.hooks.Authorizer != nil {
		if e := en.hooks.Authorizer.Authorize(name, m, false); e != nil {
			return Refusal(m, e)
		}
	}
	return en.hooks.Resolver.Direct(m, name)
}

// knownNames is every name a task can address: the capabilities offered
// and the names the resolver serves, for a "did you mean" suggestion.
// Suggest returns, for a name no instance offers at all (likely a typo),
// the nearest capability or workflow name this dispatcher knows, for a
// "did you mean" hint (registry.NearestName); "" when an instance offers
// name or nothing known is close.
func (en *Engine) Suggest(name string) string {
	if len(en.table.Offering(name)) > 0 {
		return ""
	}
	return registry.NearestName(name, en.knownNames())
}

func (en *Engine) knownNames() []string {
	names := en.table.Capabilities()
	if en.hooks.Resolver != nil {
		names = append(names, en.hooks.Resolver.Names()...)
	}
	return names
}
