package console

import (
	"net/http"
	"time"

	"github.com/agent-reach/agentreach/dispatcher/eventstats"
	"github.com/agent-reach/agentreach/streams"
)

// Instance is an agent instance as the topology draws it: from the
// registry and this replica's breakers.
type Instance struct {
	ID           string   `json:"id"`
	Type         string   `json:"type"`
	Capabilities []string `json:"capabilities"`
	Status       string   `json:"status"`  // ready, draining, …
	Breaker      string   `json:"breaker"` // CLOSED, HALF_OPEN, OPEN
	Load         float64  `json:"load"`    // active / max_concurrent
}

// TopologyPage is the answer of GET /v1/console/topology?since=15m: the
// edges of the window from REACH_EVENTS, the instances in the registry
// now, and the recent failures (for a node's panel).
type TopologyPage struct {
	*eventstats.Topology
	Instances []Instance           `json:"instances"`
	Failures  []eventstats.Failure `json:"failures"`
}

// windows are the time windows the page offers; others are refused.
var windows = map[string]time.Duration{"5m": 5 * time.Minute, "15m": 15 * time.Minute, "1h": time.Hour}

func (c *Console) topology(w http.ResponseWriter, r *http.Request) {
	if _, e := c.who(r); e != nil {
		writeError(w, r, e)
		return
	}
	since := r.URL.Query().Get("since")
	if since == "" {
		since = "15m"
	}
	d, ok := windows[since]
	if !ok {
		writeError(w, r, streams.NewError(streams.CodeBadRequest, "since %q: want 5m, 15m or 1h", clip(since)))
		return
	}
	if c.cfg.Stats == nil {
		writeError(w, r, streams.NewError(CodeNotFound, "this gateway aggregates no REACH_EVENTS: no topology"))
		return
	}
	d = min(d, c.cfg.Stats.Window())
	top, err := c.cfg.Stats.Topology(d)
	if err != nil {
		writeError(w, r, streams.NewError(streams.CodeBadRequest, "%v", err))
		return
	}
	page := TopologyPage{Topology: top, Instances: []Instance{}, Failures: []eventstats.Failure{}}
	if c.cfg.Instances != nil {
		page.Instances = c.cfg.Instances()
	}
	if s, err := c.cfg.Stats.Summary(eventstats.ByCapability, d); err == nil {
		page.Failures = s.Failures
	}
	writeJSON(w, http.StatusOK, page)
}
