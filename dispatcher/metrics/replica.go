package metrics

import (
	"github.com/agent-reach/agentreach/dispatcher/selection"
	"github.com/prometheus/client_golang/prometheus"
)

// replica collects, at each scrape, what the dispatcher holds: its
// counters, in-flight tasks, breakers, registry and policy, and the stream
// counts.
type replica Metrics

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(namespace+"_"+name, help, labels, nil)
}

var (
	descDurable    = desc("durable_received_total", "Deliveries of durable tasks taken from REACH_TASKS by this replica.")
	descOverloaded = desc("overloaded_total", "Requests answered OVERLOADED at admission (MaxInFlight reached, or the caller above its fair share); not tasks.")
	descDropped    = desc("dropped_total", "Requests dropped because they had no reply subject; not tasks.")
	descRedirects  = desc("redirects_total", "Tasks sent on after a failed delivery or a wait for capacity.")
	descQueued     = desc("queued_total", "Tasks that waited in the replica for a free slot.")
	descBuffered   = desc("buffered_total", "Durable tasks put back into the stream to wait for capacity.")
	descReplayed   = desc("replayed_total", "Dead letters replayed by this replica.")
	descHedges     = desc("hedges_total", "Hedged second deliveries sent (at most one per task).")
	descHedgesOver = desc("hedges_refused_total", "Hedges the hedge budget refused.")
	descInFlight   = desc("in_flight", "Tasks this replica holds now (of its MaxInFlight).")
	descMaxFlight  = desc("max_in_flight", "The replica's MaxInFlight.")
	descAgents     = desc("registry_instances", "Agent instances in the replica's routing table.")
	descPolicy     = desc("policy_revision", "Revision of REACH_POLICY the replica follows.")
	descBreaker    = desc("breaker_state", "1 for the breaker state of each instance this replica routes to, 0 for the others.",
		"instance", "state")
	descStream = desc("stream_messages", "Messages in REACH_TASKS (durable tasks pending), REACH_DLQ and REACH_REVIEW.",
		"stream")
	descPending = desc("durable_pending", "Durable tasks waiting in REACH_TASKS, by capability.", "capability")
)

var breakerStates = []selection.BreakerState{selection.BreakerClosed, selection.BreakerHalfOpen, selection.BreakerOpen}

// Describe sends every metric's description (prometheus.Collector).
func (r *replica) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descDurable, descOverloaded, descDropped, descRedirects, descQueued,
		descBuffered, descReplayed, descHedges, descHedgesOver, descInFlight, descMaxFlight, descAgents, descPolicy,
		descBreaker, descStream, descPending} {
		ch <- d
	}
}

// Collect reads the dispatcher and sends its figures now
// (prometheus.Collector).
func (r *replica) Collect(ch chan<- prometheus.Metric) {
	m := (*Metrics)(r)
	d := m.d.Load()
	if d == nil {
		return
	}
	counts := m.streams.Load().Counts()
	s := d.Stats()
	for _, c := range []struct {
		d *prometheus.Desc
		v int64
	}{{descDurable, s.Durable}, {descOverloaded, s.Overloaded}, {descDropped, s.Dropped},
		{descRedirects, s.Redirected}, {descQueued, s.Queued}, {descBuffered, s.Buffered}, {descReplayed, s.Replayed},
		{descHedges, s.Hedged}, {descHedgesOver, s.HedgesOver}} {
		ch <- prometheus.MustNewConstMetric(c.d, prometheus.CounterValue, float64(c.v))
	}
	ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(s.InFlight))
	ch <- prometheus.MustNewConstMetric(descMaxFlight, prometheus.GaugeValue, float64(d.Config().MaxInFlight))
	ch <- prometheus.MustNewConstMetric(descAgents, prometheus.GaugeValue, float64(s.Agents))
	if p := d.Policies(); p != nil {
		ch <- prometheus.MustNewConstMetric(descPolicy, prometheus.GaugeValue, float64(p.Revision()))
	}
	table := d.Table()
	for _, b := range d.Breakers() {
		if _, live := table.Lookup(b.Instance); !live {
			continue
		}
		for _, st := range breakerStates {
			v := 0.0
			if b.State == st {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descBreaker, prometheus.GaugeValue, v, b.Instance, string(st))
		}
	}
	for name, n := range counts.Messages {
		ch <- prometheus.MustNewConstMetric(descStream, prometheus.GaugeValue, float64(n), name)
	}
	byLabel := make(map[string]float64)
	for capability, n := range counts.Pending {
		byLabel[m.capabilityLabel(capability)] += float64(n)
	}
	for label, n := range byLabel {
		ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, n, label)
	}
}
