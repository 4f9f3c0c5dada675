package gateway

import (
	"github.com/agent-reach/agentreach/dispatcher/selection"
	"net/http"
	"time"

	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/eventstats"
	"github.com/agent-reach/agentreach/streams"
)

// Agent is one instance as GET /v1/agents shows it: its record, how long
// ago its last heartbeat was, its load and this replica's breaker of it.
// LatencyMS is this replica's moving average of the instance's latencies
// (geometric, fading while it gets no task): null until it has enough
// samples (dispatcher.BreakerStatus.LatencyMS 0).
type Agent struct {
	ID             string            `json:"id"`
	Type           string            `json:"type"`
	Capabilities   []string          `json:"capabilities"`
	Status         string            `json:"status"`
	Version        string            `json:"version"`
	Active         int               `json:"active"`
	MaxConcurrent  int               `json:"max_concurrent"`
	Load           float64           `json:"load"` // active / max_concurrent, as the agent last reported
	HeartbeatAgeMS int64             `json:"heartbeat_age_ms"`
	Breaker        string            `json:"breaker"` // CLOSED until this replica has routed to it
	LatencyMS      *float64          `json:"latency_ms"`
	Deps           map[string]string `json:"deps,omitempty"`
}

// Agents returns every instance in the replica's routing table, sorted
// by id.
func (g *Gateway) Agents() []Agent {
	breakers := make(map[string]selection.BreakerStatus)
	for _, b := range g.d.Breakers() {
		breakers[b.Instance] = b
	}
	now := time.Now()
	out := []Agent{}
	for _, e := range g.d.Table().Entries() {
		a := Agent{ID: e.ID, Type: e.Type, Capabilities: e.Capabilities, Status: e.Status, Version: e.Version,
			Active: e.Active, MaxConcurrent: e.MaxConcurrent, HeartbeatAgeMS: now.Sub(e.Updated).Milliseconds(),
			Breaker: string(selection.BreakerClosed), Deps: e.Deps}
		if e.MaxConcurrent > 0 {
			a.Load = float64(e.Active) / float64(e.MaxConcurrent)
		}
		if b, ok := breakers[e.ID]; ok {
			a.Breaker = string(b.State)
			if b.LatencyMS > 0 {
				a.LatencyMS = &b.LatencyMS
			}
		}
		out = append(out, a)
	}
	return out
}

func (g *Gateway) agents(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, g.Agents())
}

// StatsPage is the answer of GET /v1/stats.
type StatsPage struct {
	// Dispatcher is this replica's counters (reach.api.stats).
	Dispatcher dispatcher.Stats `json:"dispatcher"`
	// Streams holds the messages in REACH_TASKS, REACH_DLQ and
	// REACH_REVIEW.
	Streams map[string]uint64 `json:"streams"`
	// Summary is the aggregate of REACH_EVENTS (?by=, ?since=); absent
	// when the gateway has none.
	Summary *eventstats.Summary `json:"summary,omitempty"`
	// Series is volume and latency over time per capability (?series=,
	// a duration).
	Series map[string][]eventstats.Point `json:"series,omitempty"`
}

// statsPage is GET /v1/stats?by=capability|agent|type&since=1h&series=10m.
func (g *Gateway) statsPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	page := StatsPage{Dispatcher: g.d.Stats(), Streams: g.counter.Counts().Messages}
	if g.stats != nil {
		s, e := g.stats.Answer(eventstats.Query{By: q.Get("by"), Since: q.Get("since")})
		if e != nil {
			writeError(w, r, e)
			return
		}
		page.Summary = s
		if v := q.Get("series"); v != "" {
			d, err := time.ParseDuration(v)
			if err == nil {
				page.Series, err = g.stats.Series(d)
			}
			if err != nil {
				writeError(w, r, streams.NewError(streams.CodeBadRequest, "series %q: %v", v, err))
				return
			}
		}
	}
	writeJSON(w, http.StatusOK, page)
}

// Health is the answer of GET /healthz.
type Health struct {
	Status           string `json:"status"` // "ok", or "draining" (503) once Shutdown began
	Dispatcher       string `json:"dispatcher"`
	RegisteredAgents int    `json:"registered_agents"`
	PendingQueue     uint64 `json:"pending_queue"` // durable tasks waiting in REACH_TASKS
}

func (g *Gateway) healthz(w http.ResponseWriter, _ *http.Request) {
	h := Health{Status: "ok", Dispatcher: g.d.Name(), RegisteredAgents: g.d.Table().Len(),
		PendingQueue: g.counter.Counts().Messages[streams.StreamTasks]}
	status := http.StatusOK
	if g.draining.Load() {
		h.Status, status = "draining", http.StatusServiceUnavailable
	}
	writeJSON(w, status, h)
}

func (g *Gateway) serveMetrics(w http.ResponseWriter, r *http.Request) {
	if g.metrics == nil {
		writeError(w, r, streams.NewError(CodeNotFound, "this gateway serves no metrics"))
		return
	}
	g.metrics.Handler().ServeHTTP(w, r)
}
