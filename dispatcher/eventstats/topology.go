package eventstats

import (
	"fmt"
	"github.com/agent-reach/agentreach/dispatcher/events"
	"sort"
	"time"
)

// The topology: who calls which capability and which instance serves it,
// counted over time like the rows but lighter (counts only, in
// edgeSlots slices of the window), for the dashboard's graph.

// edgeSlots is how many time slices an edge keeps over the window (one
// minute each over the default hour).
const edgeSlots = 60

// AnonymousCaller is the caller of a task that names none.
const AnonymousCaller = "anonymous"

// Edge is one link of the topology over a time window: From calls To (a
// caller a capability), or From is served by To (a capability an
// instance, "none" when nothing was delivered), with its tasks by class
// and their mean latency.
type Edge struct {
	From      string  `json:"from"`
	To        string  `json:"to"`
	Tasks     int64   `json:"tasks"`
	Finished  int64   `json:"finished"`
	Rejected  int64   `json:"rejected"`
	Failed    int64   `json:"failed"`
	LatencyMS float64 `json:"latency_mean_ms"`
}

// Topology is the graph of a window: caller → capability edges and
// capability → instance edges.
type Topology struct {
	Since      string    `json:"since"`
	From       time.Time `json:"from"`
	To         time.Time `json:"to"`
	Calls      []Edge    `json:"calls"`      // caller → capability
	Deliveries []Edge    `json:"deliveries"` // capability → instance
}

type edgeKey struct{ from, to string }

type edgeBucket struct {
	epoch                     int64
	tasks, finished, rejected int64
	failed                    int64
	latencySumMS              float64
}

type edgeRing struct{ slots [edgeSlots]edgeBucket }

// edges holds the two kinds of edges; the aggregator's lock guards them.
type edges struct {
	calls, deliveries map[edgeKey]*edgeRing
}

func (a *Aggregator) edgeWidth() time.Duration { return max(a.cfg.Window/edgeSlots, time.Nanosecond) }

// addEdges counts a task's record on its two edges; the lock is held.
func (a *Aggregator) addEdges(ev *events.Event, at time.Time) {
	if a.edges.calls == nil {
		a.edges = edges{calls: make(map[edgeKey]*edgeRing), deliveries: make(map[edgeKey]*edgeRing)}
	}
	caller, node := ev.Source, ev.Node
	if caller == "" {
		caller = AnonymousCaller
	}
	if node == "" {
		node = NoneKey
	}
	epoch := at.UnixNano() / int64(a.edgeWidth())
	for _, e := range [...]struct {
		m   map[edgeKey]*edgeRing
		key edgeKey
	}{{a.edges.calls, edgeKey{caller, ev.Capability}}, {a.edges.deliveries, edgeKey{ev.Capability, node}}} {
		r := e.m[e.key]
		if r == nil {
			if len(e.m) >= a.cfg.MaxKeys {
				e.key = edgeKey{e.key.from, OtherKey}
				if r = e.m[e.key]; r == nil && len(e.m) >= a.cfg.MaxKeys+a.cfg.MaxKeys/10 {
					continue // beyond even the "other" edges' room: counted in the rows only
				}
			}
			if r == nil {
				r = new(edgeRing)
				e.m[e.key] = r
			}
		}
		b := &r.slots[epoch%edgeSlots]
		if b.epoch != epoch {
			*b = edgeBucket{epoch: epoch}
		}
		b.tasks++
		switch ev.Class() {
		case events.ClassFinished:
			b.finished++
		case events.ClassRejected:
			b.rejected++
		default:
			b.failed++
		}
		b.latencySumMS += ev.LatencyMS
	}
}

// Topology returns the edges of the last since (default and at most the
// window), each kind sorted by tasks, most first.
func (a *Aggregator) Topology(since time.Duration) (*Topology, error) {
	if since == 0 {
		since = a.cfg.Window
	}
	if since < 0 || since > a.cfg.Window {
		return nil, fmt.Errorf("%w: since %v: want up to the window of %v", ErrInvalidQuery, since, a.cfg.Window)
	}
	now := a.cfg.Now()
	w := int64(a.edgeWidth())
	// The slice holding the window's start counts whole: the window is
	// up to one slice longer than since.
	first := max((now.UnixNano()-int64(since))/w, now.UnixNano()/w-edgeSlots+1)
	t := &Topology{Since: since.String(), From: now.Add(-since), To: now, Calls: []Edge{}, Deliveries: []Edge{}}
	sum := func(m map[edgeKey]*edgeRing) []Edge {
		out := []Edge{}
		for k, r := range m {
			e := Edge{From: k.from, To: k.to}
			var lat float64
			for i := range r.slots {
				if b := &r.slots[i]; b.epoch >= first && b.epoch != 0 {
					e.Tasks += b.tasks
					e.Finished += b.finished
					e.Rejected += b.rejected
					e.Failed += b.failed
					lat += b.latencySumMS
				}
			}
			if e.Tasks > 0 {
				e.LatencyMS = lat / float64(e.Tasks)
				out = append(out, e)
			}
		}
		sort.Slice(out, func(i, j int) bool {
			if out[i].Tasks != out[j].Tasks {
				return out[i].Tasks > out[j].Tasks
			}
			return out[i].From+"\x00"+out[i].To < out[j].From+"\x00"+out[j].To
		})
		return out
	}
	a.mu.Lock()
	t.Calls, t.Deliveries = sum(a.edges.calls), sum(a.edges.deliveries)
	a.mu.Unlock()
	return t, nil
}
