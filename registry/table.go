package registry

import (
	"context"
	"maps"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/internal/kvwatch"
)

// DefaultReconcileInterval is how often a Table re-reads the whole bucket.
const DefaultReconcileInterval = 30 * time.Second

// Instance is one live agent instance in a Table. Its record is replaced
// atomically on every heartbeat, so holders always read a consistent one.
type Instance struct {
	ID    string
	entry atomic.Pointer[Entry]
	// stale: the record expired while the store could not take
	// heartbeats (see Table); the instance routes as before until it
	// puts again or the grace ends.
	stale atomic.Bool
}

// Entry returns the latest record of the instance.
func (i *Instance) Entry() *Entry { return i.entry.Load() }

// Stale reports whether the instance's record expired while the store
// was unavailable and the table is keeping it until it heartbeats again.
func (i *Instance) Stale() bool { return i.stale.Load() }

// TTL is how long the instance's record lives without a heartbeat: 3
// heartbeat intervals.
func (i *Instance) TTL() time.Duration {
	return 3 * time.Duration(i.Entry().HeartbeatMS) * time.Millisecond
}

// DownDependencies returns the dependencies the instance's latest record
// reports down, sorted by name; nil when none is.
func (i *Instance) DownDependencies() []string { return i.Entry().DownDependencies() }

// DownDependencies returns the dependencies the record reports down,
// sorted by name; nil, without allocating, when none is.
func (e *Entry) DownDependencies() []string {
	var down []string
	for dep, state := range e.Deps {
		if state == DepDown {
			down = append(down, dep)
		}
	}
	slices.Sort(down)
	return down
}

// Table is a routing table fed by a watch on REACH_AGENTS: puts, deletes and
// TTL expiry (limit markers) apply within milliseconds. Its watcher is
// re-created on every reconnect (after a server restart the old one goes
// silent), whenever the client library closes it, when it stalls, when the
// store answers again after being unavailable, and every reconcile
// interval, each time reconciling against the full listing the new watcher
// delivers.
//
// An expiry the store itself caused does not remove a live agent. The
// table probes the bucket's stream every second (internal/kvwatch); while
// the probes fail or the connection is down, and for one record TTL (3
// heartbeats) after the store answers again, a record that expires (a
// purge, or a key missing from a listing) leaves its instance in the
// table, Stale and routed as before: its heartbeats could not be stored,
// which says nothing of the agent. A put makes it fresh again; an instance
// still stale one TTL after the store came back is removed as Lost, so a
// dead agent leaves routing one TTL later than it would have without the
// outage. A delete (an agent leaving) always removes at once.
//
// All methods are safe for concurrent use. Close is idempotent.
type Table struct {
	reg       *Registry
	log       zerolog.Logger
	reconcile time.Duration
	probe     time.Duration
	onRemove  func(id string, how Removal)
	filter    RecordFilter

	mu sync.RWMutex
	// Store health, from kvwatch's probes: down while they fail; lastDown
	// is when it was last seen down (or came back).
	storeDown bool
	lastDown  time.Time
	byID      map[string]*Instance
	byCap     map[string]*capSet
	changed   chan struct{}

	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

type capSet struct {
	members map[string]*Instance
	routes  *Routes // routable members; nil when stale
	// filtered is the filter's revision routes were built at.
	filtered uint64
}

// Routes is the set of routable instances of one capability, sorted by id,
// with their weights summed for weighted sampling. It is immutable: a change
// in the table builds a new one.
type Routes struct {
	// Instances are the routable instances sorted by id. Do not modify.
	Instances []*Instance
	cum       []int64 // cum[i] = sum of weights of Instances[:i+1]
}

// NewInstance returns an instance holding e, for building Routes by hand
// (tests, simulations); tables make their own.
func NewInstance(e Entry) *Instance {
	inst := &Instance{ID: e.ID}
	inst.entry.Store(&e)
	return inst
}

// NewRoutes sorts insts by id and indexes their weights.
func NewRoutes(insts []*Instance) *Routes {
	sort.Slice(insts, func(i, j int) bool { return insts[i].ID < insts[j].ID })
	r := &Routes{Instances: insts, cum: make([]int64, len(insts))}
	var sum int64
	for i, inst := range insts {
		sum += int64(inst.Entry().Weight)
		r.cum[i] = sum
	}
	return r
}

// Has reports whether instance id is among the routes.
func (r *Routes) Has(id string) bool {
	if r.Len() == 0 {
		return false
	}
	i := sort.Search(len(r.Instances), func(i int) bool { return r.Instances[i].ID >= id })
	return i < len(r.Instances) && r.Instances[i].ID == id
}

// Len returns the number of routable instances.
func (r *Routes) Len() int {
	if r == nil {
		return 0
	}
	return len(r.Instances)
}

// TotalWeight is the sum of the instances' weights.
func (r *Routes) TotalWeight() int64 {
	if r.Len() == 0 {
		return 0
	}
	return r.cum[len(r.cum)-1]
}

// Span returns the range [start, end) of instance i in the summed weights.
func (r *Routes) Span(i int) (start, end int64) {
	if i > 0 {
		start = r.cum[i-1]
	}
	return start, r.cum[i]
}

// AtWeight returns the index of the instance owning point w of the summed
// weights, for w in [0, TotalWeight()): sampling w uniformly picks instances
// in proportion to their weights.
func (r *Routes) AtWeight(w int64) int {
	return sort.Search(len(r.cum), func(i int) bool { return r.cum[i] > w })
}

// TableOption configures a Table.
type TableOption func(*Table)

// WithLogger sets the table's logger; the default discards.
func WithLogger(l zerolog.Logger) TableOption { return func(t *Table) { t.log = l } }

// WithReconcileInterval sets how often the whole bucket is re-read; default
// DefaultReconcileInterval (30 s).
func WithReconcileInterval(d time.Duration) TableOption {
	return func(t *Table) {
		if d > 0 {
			t.reconcile = d
		}
	}
}

// WithProbeInterval sets how often the table probes the bucket's stream to
// tell whether the store is available; default 1 s. It should be well
// under a heartbeat interval.
func WithProbeInterval(d time.Duration) TableOption {
	return func(t *Table) {
		if d > 0 {
			t.probe = d
		}
	}
}

// Removal says how an instance left a table.
type Removal int

const (
	// Lost: the record expired (the agent stopped heartbeating: a crash),
	// was purged, became unreadable, or was deleted while the instance was
	// still "ready". Its deliveries will not be answered.
	Lost Removal = iota
	// Left: the instance had put "draining" and then deleted its record,
	// as the protocol asks of an agent that leaves. It promised to finish
	// its work, so answers to its deliveries may still arrive.
	Left
)

func (r Removal) String() string {
	if r == Left {
		return "left"
	}
	return "lost"
}

// WithRemoveHook calls fn (from the table's goroutine) whenever an instance
// leaves the table, saying how.
func WithRemoveHook(fn func(id string, how Removal)) TableOption {
	return func(t *Table) { t.onRemove = fn }
}

// RecordFilter decides, beside its status, whether a table routes an
// instance (auth.Authorizer: only one whose record its identity may
// write, within that identity's grant). CheckRecord returns nil or why
// the record is not routable; it is asked when a capability's routes are
// built, must be fast, and must not call the table. FilterRevision
// changes whenever CheckRecord's answers may have changed: the routes are
// built again at the next Candidates.
type RecordFilter interface {
	CheckRecord(e *Entry) error
	FilterRevision() uint64
}

// WithRecordFilter makes Candidates offer only the ready instances f
// admits. Everything else (Offering, Lookup, Entries) still lists them.
func WithRecordFilter(f RecordFilter) TableOption { return func(t *Table) { t.filter = f } }

// filterRevision is the filter's revision, 0 without one.
func (t *Table) filterRevision() uint64 {
	if t.filter == nil {
		return 0
	}
	return t.filter.FilterRevision()
}

// NewTable returns a table over reg; call Start to fill it.
func NewTable(reg *Registry, opts ...TableOption) *Table {
	t := &Table{
		reg:       reg,
		log:       zerolog.Nop(),
		reconcile: DefaultReconcileInterval,
		byID:      make(map[string]*Instance),
		byCap:     make(map[string]*capSet),
		changed:   make(chan struct{}),
		done:      make(chan struct{}),
	}
	for _, o := range opts {
		o(t)
	}
	return t
}

// Start loads the full listing, returning once the table holds it (or ctx
// ends), and keeps the table current until Close.
func (t *Table) Start(ctx context.Context) error {
	loopCtx, cancel := context.WithCancel(context.Background())
	t.cancel = cancel
	ready := make(chan struct{})
	go t.run(loopCtx, ready)
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		t.Close()
		return ctx.Err()
	}
}

// Close stops watching and waits for the table's goroutine.
func (t *Table) Close() {
	t.once.Do(func() {
		if t.cancel != nil {
			t.cancel()
			<-t.done
		}
	})
}

func (t *Table) run(ctx context.Context, ready chan struct{}) {
	defer close(t.done)
	kvwatch.RunWith(ctx, t.reg.nc, t.reg.kv, kvwatch.Options{Reconcile: t.reconcile, Probe: t.probe}, tableHandler{t}, t.log, ready)
}

// tableHandler feeds kvwatch updates into the table.
type tableHandler struct{ t *Table }

func (h tableHandler) Replace(listing map[string]jetstream.KeyValueEntry) { h.t.replace(listing) }
func (h tableHandler) Apply(e jetstream.KeyValueEntry)                    { h.t.apply(e) }
func (h tableHandler) Health(err error)                                   { h.t.health(err, time.Now()) }

// health takes a probe's answer (nil: the store answered) and removes the
// stale instances whose grace is over.
func (t *Table) health(err error, now time.Time) {
	var gone []string
	t.mu.Lock()
	switch {
	case err != nil:
		t.storeDown, t.lastDown = true, now
	case t.storeDown:
		t.storeDown, t.lastDown = false, now
		t.log.Info().Msg("agent registry store answers again; stale instances stay routed until they heartbeat or one TTL passes")
	}
	down, since := t.storeDown, t.lastDown
	t.mu.Unlock()
	if down {
		return
	}
	// Instances turn stale and fresh only on this goroutine: a read lock
	// sees them as they are.
	t.mu.RLock()
	for id, inst := range t.byID {
		if inst.Stale() && now.Sub(since) >= inst.TTL() {
			gone = append(gone, id)
		}
	}
	t.mu.RUnlock()
	for _, id := range gone {
		t.log.Warn().Str("agent", id).Msg("stale instance did not heartbeat within a TTL of the store coming back; removed")
		t.remove(id, removeGraceOver, now)
	}
}

// troubled reports whether the store was unavailable within ttl of now;
// t.mu is held.
func (t *Table) troubled(now time.Time, ttl time.Duration) bool {
	return t.storeDown || (!t.lastDown.IsZero() && now.Sub(t.lastDown) < ttl)
}

func (t *Table) replace(listing map[string]jetstream.KeyValueEntry) {
	var gone []string
	t.mu.Lock()
	for id := range t.byID {
		if _, ok := listing[id]; !ok {
			gone = append(gone, id)
		}
	}
	t.mu.Unlock()
	now := time.Now()
	for _, id := range gone {
		// Missed while the watcher was down: a draining instance counts as
		// having left (its deliveries still time out if it crashed); a
		// ready one may have expired while the store was down.
		t.remove(id, removeMissing, now)
	}
	for _, kve := range listing {
		t.apply(kve)
	}
}

func (t *Table) apply(kve jetstream.KeyValueEntry) {
	if kve.Operation() != jetstream.KeyValuePut {
		// A delete is how a draining agent leaves; a purge is an expiry
		// (the limit marker of a record past its TTL) or an operator.
		cause := removeExpired
		if kve.Operation() == jetstream.KeyValueDelete {
			cause = removeDeleted
		}
		t.remove(kve.Key(), cause, time.Now())
		return
	}
	e, err := toEntry(kve)
	if err != nil {
		t.log.Warn().Err(err).Str("agent", kve.Key()).Msg("ignoring unreadable agent record")
		t.remove(kve.Key(), removeUnreadable, time.Now())
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	inst, ok := t.byID[e.ID]
	if ok {
		old := inst.Entry()
		inst.entry.Store(&e)
		if inst.stale.Swap(false) {
			t.log.Info().Str("agent", e.ID).Msg("stale instance heartbeats again")
		}
		if old.Status == e.Status && old.Weight == e.Weight && old.Type == e.Type && slices.Equal(old.Capabilities, e.Capabilities) &&
			maps.Equal(old.Deps, e.Deps) {
			return // a heartbeat: same routes
		}
		t.unindex(inst, old)
	} else {
		inst = NewInstance(e)
		t.byID[e.ID] = inst
	}
	for _, c := range e.Capabilities {
		cs := t.byCap[c]
		if cs == nil {
			cs = &capSet{members: make(map[string]*Instance)}
			t.byCap[c] = cs
		}
		cs.members[e.ID] = inst
		cs.routes = nil
	}
	t.signal()
}

// Why a record left the bucket.
type removeCause int

const (
	removeDeleted    removeCause = iota // a delete: the agent left
	removeExpired                       // a purge: TTL expiry (or an operator)
	removeMissing                       // absent from a listing: deleted or expired
	removeUnreadable                    // a put that does not decode
	removeGraceOver                     // stale for a TTL after the store came back
)

// remove drops instance id. A deleted record (or one missing from a
// listing) counts as leaving when the instance was draining. A ready
// instance whose record expired or is missing while the store was
// troubled (within its TTL) is kept, stale, instead.
func (t *Table) remove(id string, cause removeCause, now time.Time) {
	t.mu.Lock()
	inst, ok := t.byID[id]
	how := Lost
	if ok && cause == removeGraceOver && !inst.Stale() {
		ok = false // it heartbeat meanwhile
	}
	if ok {
		e := inst.Entry()
		if (cause == removeExpired || cause == removeMissing) && e.Status == StatusReady && (inst.Stale() || t.troubled(now, inst.TTL())) {
			// Already stale: health removes it when its grace is over.
			if !inst.stale.Swap(true) {
				t.log.Warn().Str("agent", id).Msg("record expired while the store was unavailable; still routed, stale, until it heartbeats again")
			}
			t.mu.Unlock()
			return
		}
		if (cause == removeDeleted || cause == removeMissing) && e.Status == StatusDraining {
			how = Left
		}
		delete(t.byID, id)
		t.unindex(inst, inst.Entry())
		t.signal()
	}
	t.mu.Unlock()
	if ok && t.onRemove != nil {
		t.onRemove(id, how)
	}
}

// unindex drops inst from the capability sets of e; t.mu is held.
func (t *Table) unindex(inst *Instance, e *Entry) {
	for _, c := range e.Capabilities {
		if cs := t.byCap[c]; cs != nil {
			delete(cs.members, inst.ID)
			cs.routes = nil
			if len(cs.members) == 0 {
				delete(t.byCap, c)
			}
		}
	}
}

// signal wakes everyone waiting on Changed; t.mu is held.
func (t *Table) signal() {
	close(t.changed)
	t.changed = make(chan struct{})
}

// Changed returns a channel closed at the next change of routes (an instance
// joining, leaving, or changing status, weight, capabilities or the states
// of its dependencies).
func (t *Table) Changed() <-chan struct{} {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.changed
}

// Candidates returns the routable (status "ready", and admitted by the
// RecordFilter if there is one) instances offering capability c; nil when
// there are none. The Routes value is shared and immutable.
func (t *Table) Candidates(c string) *Routes {
	rev := t.filterRevision()
	t.mu.RLock()
	cs := t.byCap[c]
	var routes *Routes
	if cs != nil && cs.filtered == rev {
		routes = cs.routes
	}
	t.mu.RUnlock()
	if cs == nil || routes != nil {
		return routes
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	cs = t.byCap[c]
	if cs == nil {
		return nil
	}
	if cs.routes == nil || cs.filtered != rev {
		insts := make([]*Instance, 0, len(cs.members))
		for _, inst := range cs.members {
			if e := inst.Entry(); e.Routable() && (t.filter == nil || t.filter.CheckRecord(e) == nil) {
				insts = append(insts, inst)
			}
		}
		cs.routes, cs.filtered = NewRoutes(insts), rev
	}
	return cs.routes
}

// Offering returns every instance whose record lists capability c,
// routable or not (draining), sorted by id.
func (t *Table) Offering(c string) []*Instance {
	t.mu.RLock()
	var out []*Instance
	if cs := t.byCap[c]; cs != nil {
		out = make([]*Instance, 0, len(cs.members))
		for _, inst := range cs.members {
			out = append(out, inst)
		}
	}
	t.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Capabilities returns every capability some instance in the table
// offers, routable or not, sorted.
func (t *Table) Capabilities() []string {
	t.mu.RLock()
	out := slices.Collect(maps.Keys(t.byCap))
	t.mu.RUnlock()
	slices.Sort(out)
	return out
}

// Lookup returns instance id, if it is in the table.
func (t *Table) Lookup(id string) (*Instance, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	inst, ok := t.byID[id]
	return inst, ok
}

// Len returns the number of instances in the table.
func (t *Table) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.byID)
}

// Entries returns a copy of every record, sorted by id.
func (t *Table) Entries() []Entry {
	t.mu.RLock()
	out := make([]Entry, 0, len(t.byID))
	for _, inst := range t.byID {
		out = append(out, *inst.Entry())
	}
	t.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
