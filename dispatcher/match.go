package dispatcher

import (
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/dispatcher/selection"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

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

// maxRequirements bounds the distinct Reach-Require values whose parse is
// cached; beyond it the cache starts afresh.
const maxRequirements = 1024

// maxViews bounds the cached views; beyond it the cache starts afresh.
const maxViews = 4096

type viewKey struct {
	routes  *registry.Routes
	version uint64
	need    string
}

// parsedRequirement is a cached parse of a Reach-Require value.
type parsedRequirement struct {
	req registry.Requirement
	err *streams.Error
}

// readRequirements sets t's requirement — the caller's Reach-Require over
// its capability's default — and its preference, or says what is wrong.
func (d *Dispatcher) readRequirements(t *task, h nats.Header) *streams.Error {
	need := t.pol.require
	if v := h.Get(streams.HeaderRequire); v != "" {
		p, ok := d.requirements.Load(v)
		if !ok {
			r, err := registry.ParseRequirement([]byte(v))
			pr := &parsedRequirement{req: r}
			if err != nil {
				pr.err = streams.NewError(streams.CodeBadRequest, "header %s: %v", streams.HeaderRequire, err)
			}
			d.requirements.Store(v, pr)
			p = pr
		}
		pr := p.(*parsedRequirement)
		if pr.err != nil {
			return pr.err
		}
		need = registry.Merge(need, pr.req)
	}
	if !need.Empty() {
		t.need, t.needKey = need, need.Key()
	}
	switch v := h.Get(streams.HeaderPrefer); v {
	case "", PreferLatency, PreferCost, PreferQuality:
		t.prefer = v
	default:
		return streams.NewError(streams.CodeBadRequest, "header %s %q: want %s, %s or %s", streams.HeaderPrefer, v, PreferLatency, PreferCost, PreferQuality)
	}
	return nil
}

// matching returns the instances of rs (a capability's candidates) that
// qualify for t, from the cached view, and notes the view on t (for
// NO_AGENT's excluded list and the event record).
func (d *Dispatcher) matching(t *task, rs *registry.Routes) *registry.Routes {
	v := d.viewOf(t, rs)
	t.view = v
	return v.Routes
}

func (d *Dispatcher) viewOf(t *task, rs *registry.Routes) *selection.View {
	key := viewKey{routes: rs, version: d.catalog.Version(), need: t.needKey}
	if v, ok := d.views.Load(key); ok {
		return v.(*selection.View)
	}
	v := selection.BuildView(d.catalog, t.capability, t.need, rs)
	d.views.Store(key, v)
	return v
}

// checkInput checks t's payload against the input schemas of the
// qualifying types. When every type that could take it refuses it, the task
// is BAD_REQUEST, naming what is wrong; when only some do, their instances
// are passed over.
func (d *Dispatcher) checkInput(t *task, v *selection.View) *streams.Error {
	bad, err := v.CheckInput(t.capability, t.contentType, t.req.Data)
	t.badTypes = append(t.badTypes, bad...)
	if err != nil {
		return streams.NewError(streams.CodeBadRequest, "%s: %v", t.capability, err)
	}
	return nil
}

// tooSlow reports, for a task with max_latency_ms, whether an instance's
// observed latency is over it (unknown latency passes).
func (t *task) tooSlow(l *selection.Load, now time.Time) (bool, float64) {
	if t.need.MaxLatencyMS == nil {
		return false, 0
	}
	ms := l.CurrentLatency(now) / float64(time.Millisecond)
	return ms > *t.need.MaxLatencyMS, ms
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
func (d *Dispatcher) exclusions(t *task, all bool, limit int) (list []streams.Exclusion, total int) {
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
		routes := d.table.Candidates(t.capability)
		for _, inst := range d.table.Offering(t.capability) {
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

// declaredCost is what inst's type declares one call of capability
// costs, if it declares it.
func (d *Dispatcher) declaredCost(inst *registry.Instance, capability string) (float64, bool) {
	decl, ok := d.catalog.Lookup(inst.Entry().Type)
	if !ok {
		return 0, false
	}
	if c, ok := decl.Capability(capability); ok && c.Cost != nil {
		return *c.Cost, true
	}
	return 0, false
}

// noAgent is the NO_AGENT error of t, listing what was passed over and why.
func (d *Dispatcher) noAgent(t *task, format string, args ...any) *streams.Error {
	e := streams.NewError(streams.CodeNoAgent, format, args...)
	var total int
	e.Excluded, total = d.exclusions(t, true, excludedInErrors)
	switch {
	case total > len(e.Excluded):
		e.Message += fmt.Sprintf(" (%d excluded; the first %d are listed)", total, len(e.Excluded))
	case total > 0:
		e.Message += fmt.Sprintf(" (%d excluded: see excluded)", total)
	}
	return e
}

// start checks and admits a task before its first pick: the payload
// against the input schemas of the types that could take it, and the
// capability's in-flight cap of its policy.
func (d *Dispatcher) start(t *task) *streams.Error {
	if rs := d.table.Candidates(t.capability); rs.Len() > 0 {
		v := d.viewOf(t, rs)
		if e := d.checkInput(t, v); e != nil {
			return e
		}
		if p := t.pol; p.hedge != nil && t.unicast == "" && t.seq == 0 && (p.hedgeFromConfig || p.idempotent || v.HedgeSafe) {
			t.hedge = d.hedges.Of(t.capability, p.hedge)
		}
	}
	if !t.pol.admitCapability() {
		return streams.NewError(streams.CodeOverloaded, "%s has %d tasks in flight at dispatcher %s, its policy's max_in_flight",
			t.capability, t.pol.maxInFlight, d.cfg.Name)
	}
	t.admitted = true
	return nil
}

// finish gives back what start took; a task's done calls it once.
func (t *task) finish() {
	if t.admitted {
		t.admitted = false
		t.pol.releaseCapability()
	}
}
