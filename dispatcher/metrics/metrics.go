// Package metrics exposes one dispatcher replica's figures to Prometheus,
// so that the dispatcher core does not import Prometheus.
//
// A Metrics is the dispatcher's Observer (dispatcher.WithObserver): every
// record the replica writes counts its task by capability and outcome,
// its latency, retries and hedges. At each scrape it reads the rest from
// the dispatcher (Stats, Breakers, the routing table, the policy) and the
// counts of REACH_TASKS, REACH_DLQ and REACH_REVIEW, which it asks the
// server for at most once a second.
//
// Labels are bounded: a capability is named when an instance in the
// registry offered it when its first task ended here (at most
// MaxCapabilities of them, default 256), else it counts as "other"; an
// outcome is "finished" or an error code (a fixed set); a record's kind
// one of a fixed set or "other"; an instance id is one the registry holds
// now.
package metrics

import (
	"github.com/agent-reach/agentreach/dispatcher/events"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/agent-reach/agentreach/dispatcher"
)

// Defaults of Config.
const (
	DefaultMaxCapabilities = 256
	// DefaultStreamsEvery is how long the stream counts are reused.
	DefaultStreamsEvery = time.Second
	// OtherCapability labels a capability past the bound, or one no
	// instance in the registry offers.
	OtherCapability = "other"
	namespace       = "agentreach"
)

// Config configures a Metrics. The zero value means all defaults.
type Config struct {
	// MaxCapabilities bounds the capability label's values; default 256.
	MaxCapabilities int
	// StreamsEvery is how long the counts of REACH_TASKS, REACH_DLQ and
	// REACH_REVIEW are reused between scrapes; default 1 s.
	StreamsEvery time.Duration
}

// Metrics is a replica's Prometheus registry. Create it with New, hand it
// to the dispatcher with dispatcher.WithObserver, then Attach the started
// dispatcher. Its methods are safe for concurrent use.
type Metrics struct {
	cfg Config
	reg *prometheus.Registry

	tasks     *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	retries   *prometheus.CounterVec
	hedgeWins *prometheus.CounterVec
	// Streaming (docs/protocol.md, Streaming results).
	streamed   *prometheus.CounterVec
	chunks     *prometheus.CounterVec
	firstChunk *prometheus.HistogramVec
	durable    *prometheus.CounterVec
	records    *prometheus.CounterVec
	branches   *prometheus.CounterVec

	d     atomic.Pointer[dispatcher.Dispatcher]
	named sync.Map // capability → true: those with a label of their own
	// mu serialises giving capabilities a label of their own (nNamed).
	mu      sync.Mutex
	nNamed  int
	streams atomic.Pointer[StreamCounter]
}

// New returns a Metrics with its collectors registered, the Go runtime's
// and the process's among them.
func New(cfg Config) (*Metrics, error) {
	if cfg.MaxCapabilities == 0 {
		cfg.MaxCapabilities = DefaultMaxCapabilities
	}
	if cfg.StreamsEvery == 0 {
		cfg.StreamsEvery = DefaultStreamsEvery
	}
	switch {
	case cfg.MaxCapabilities < 1:
		return nil, errorf("MaxCapabilities must be at least 1, got %d", cfg.MaxCapabilities)
	case cfg.StreamsEvery < 0:
		return nil, errorf("StreamsEvery must not be negative, got %v", cfg.StreamsEvery)
	}
	m := &Metrics{cfg: cfg, reg: prometheus.NewRegistry()}
	m.tasks = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "tasks_total",
		Help: "Tasks ended by this replica (calls, durable tasks, branches of broadcasts and fan-outs), by capability " +
			"and outcome (finished, or the error code in lower case)."},
		[]string{"capability", "outcome"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: "task_duration_seconds",
		Help:    "Time from a task's receipt (durable: its submission) to its outcome, by capability.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}},
		[]string{"capability"})
	m.retries = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "retries_total",
		Help: "Attempts of tasks after their first, hedges not counted, by capability."}, []string{"capability"})
	m.hedgeWins = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "hedge_wins_total",
		Help: "Tasks whose answer came from their hedged second delivery, by capability."}, []string{"capability"})
	m.streamed = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "streams_total",
		Help: "Streamed tasks (the caller asked for chunks) ended by this replica, by capability and outcome."},
		[]string{"capability", "outcome"})
	m.chunks = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "stream_chunks_total",
		Help: "Chunks relayed to streaming callers, by capability."}, []string{"capability"})
	m.firstChunk = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: "stream_first_chunk_seconds",
		Help:    "Time from a streamed task's receipt to its first chunk relayed, by capability.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}},
		[]string{"capability"})
	m.durable = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "durable_outcomes_total",
		Help: "Durable tasks recorded by this replica, by capability and where they ended (result, dead_letter, review)."},
		[]string{"capability", "outcome"})
	m.records = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "records_total",
		Help: "Records this replica wrote that are not a task's own, by kind (fanout, broadcast, feedback, workflow, " +
			"workflow_step, workflow_decision, other) and outcome (finished, or the error code)."},
		[]string{"kind", "outcome"})
	m.branches = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "branches_total",
		Help: "Branches the broadcasts and fan-outs answered by this replica expected, by kind (broadcast, fanout); " +
			"each is also a task of its own capability."}, []string{"kind"})
	for _, c := range []prometheus.Collector{m.tasks, m.latency, m.retries, m.hedgeWins, m.durable, m.records, m.branches,
		m.streamed, m.chunks, m.firstChunk,
		(*replica)(m), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := m.reg.Register(c); err != nil {
			return nil, errorf("register: %v", err)
		}
	}
	return m, nil
}

// Attach makes the scrapes read d (started) and the streams through js.
// Until then only the records' counters are exported.
func (m *Metrics) Attach(d *dispatcher.Dispatcher, js jetstream.JetStream) {
	m.streams.Store(NewStreamCounter(js, d.Config().Subjects, m.cfg.StreamsEvery))
	m.d.Store(d)
}

// Handler serves the metrics in the Prometheus text format (or
// OpenMetrics, when the scraper asks for it).
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{EnableOpenMetrics: true})
}

// Registry returns the registry the metrics are in, to add collectors or
// gather in tests.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Observed counts one record (dispatcher.Observer) by the counting model
// (dispatcher.Event.Count), as the replica's Stats count it.
func (m *Metrics) Observed(ev *events.Event) {
	c := ev.Count()
	if !ev.IsTask() {
		if ev.Kind != "" {
			m.records.WithLabelValues(kindLabel(ev.Kind), outcomeOf(ev)).Inc()
		}
		if c.Branches > 0 {
			m.branches.WithLabelValues(ev.Kind).Add(float64(c.Branches))
		}
		return // else a person's decision on a review entry, not a task's end
	}
	capability := m.capabilityLabel(ev.Capability)
	m.tasks.WithLabelValues(capability, outcomeOf(ev)).Inc()
	m.latency.WithLabelValues(capability).Observe(ev.LatencyMS / 1000)
	if c.Retries > 0 {
		m.retries.WithLabelValues(capability).Add(float64(c.Retries))
	}
	if ev.HedgeWon {
		m.hedgeWins.WithLabelValues(capability).Inc()
	}
	if ev.Streamed {
		m.streamed.WithLabelValues(capability, outcomeOf(ev)).Inc()
		m.chunks.WithLabelValues(capability).Add(float64(ev.Chunks))
		if ev.FirstChunkMS > 0 {
			m.firstChunk.WithLabelValues(capability).Observe(ev.FirstChunkMS / 1000)
		}
	}
	if ev.Tier == "durable" {
		m.durable.WithLabelValues(capability, ev.Outcome).Inc()
	}
}

// kinds are the record kinds with a label of their own.
var kinds = map[string]bool{"fanout": true, "broadcast": true, "feedback": true, "workflow": true,
	"workflow_step": true, "workflow_decision": true}

// kindLabel is a record kind's label: one of kinds, or "other".
func kindLabel(kind string) string {
	if kinds[kind] {
		return kind
	}
	return "other"
}

// outcomeOf is a record's outcome label.
func outcomeOf(ev *events.Event) string {
	switch {
	case ev.Code == "":
		return "finished"
	case ev.Unknown && ev.Class() == events.ClassRejected:
		return OutcomeUnknownName
	}
	return strings.ToLower(ev.Code)
}

// OutcomeUnknownName is the outcome label of a NO_AGENT for a name never
// registered (dispatcher.Event.Unknown): the caller's doing, apart from
// no_agent, the service's.
const OutcomeUnknownName = "no_agent_unknown"

// capabilityLabel returns capability when it has, or may get, a label of
// its own: one the registry offers now, within MaxCapabilities.
func (m *Metrics) capabilityLabel(capability string) string {
	if _, ok := m.named.Load(capability); ok {
		return capability
	}
	d := m.d.Load()
	if d == nil || len(d.Table().Offering(capability)) == 0 {
		return OtherCapability
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.named.Load(capability); ok {
		return capability
	}
	if m.nNamed >= m.cfg.MaxCapabilities {
		return OtherCapability
	}
	m.nNamed++
	m.named.Store(capability, true)
	return capability
}

// Streams returns the counter of the durable streams the metrics read (nil
// before Attach), to share with others who show the same counts.
func (m *Metrics) Streams() *StreamCounter { return m.streams.Load() }
