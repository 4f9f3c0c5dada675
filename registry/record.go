package registry

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/agent-reach/agentreach/streams"
)

// Instance statuses.
const (
	StatusReady    = "ready"
	StatusDraining = "draining"
)

// Dependency states an agent reports in its record's deps.
const (
	DepUp       = "up"
	DepDegraded = "degraded"
	DepDown     = "down"
)

// DefaultWeight is the weight of a record that does not set one.
const DefaultWeight = 100

// Record is one agent instance as stored (JSON) under its id in REACH_AGENTS.
// An agent in any language joins by putting this record every HeartbeatMS.
// Unknown fields are ignored.
type Record struct {
	ID            string   `json:"id"`
	Type          string   `json:"type"`
	Capabilities  []string `json:"capabilities"`
	MaxConcurrent int      `json:"max_concurrent"`
	Weight        int      `json:"weight"`
	Active        int      `json:"active"`
	// LoadIndex is an optional agent-reported load in [0,1] beyond slot use.
	LoadIndex     float64 `json:"load_index,omitempty"`
	Status        string  `json:"status"`
	TimeoutHintMS int64   `json:"timeout_hint_ms"`
	HeartbeatMS   int64   `json:"heartbeat_ms"`
	Version       string  `json:"version"`
	// Deps is the agent's report on each dependency its type declares
	// (depends_on): DepUp, DepDegraded or DepDown. An instance with a
	// dependency down takes no tasks that need it.
	Deps map[string]string `json:"deps,omitempty"`
	// Incarnation names this run of the instance: a new value each time
	// a process starts under the id. An idempotency claim carries the
	// incarnation that made it, so a claim of an earlier run of a
	// restarted instance is not taken for one it is still executing.
	Incarnation string `json:"incarnation,omitempty"`
}

// Normalize fills defaults: weight 100, status "ready".
func (r *Record) Normalize() {
	if r.Weight == 0 {
		r.Weight = DefaultWeight
	}
	if r.Status == "" {
		r.Status = StatusReady
	}
	if len(r.Deps) == 0 {
		r.Deps = nil // "deps":{} and no deps at all are the same record
	}
}

// Validate reports the first thing wrong with r, wrapping ErrInvalidRecord.
func (r *Record) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w %q: %s", ErrInvalidRecord, r.ID, fmt.Sprintf(format, args...))
	}
	if err := streams.ValidateInstanceID(r.ID); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRecord, err)
	}
	if err := streams.ValidateCapability(r.Type); err != nil {
		return bad("type: %v", err)
	}
	if len(r.Capabilities) == 0 {
		return bad("capabilities: at least one is required")
	}
	seen := make(map[string]bool, len(r.Capabilities))
	for _, c := range r.Capabilities {
		if err := streams.ValidateCapability(c); err != nil {
			return bad("capabilities: %v", err)
		}
		if seen[c] {
			return bad("capabilities: %q is listed twice", c)
		}
		seen[c] = true
	}
	switch {
	case r.MaxConcurrent < 1:
		return bad("max_concurrent must be at least 1, got %d", r.MaxConcurrent)
	case r.Weight < 1 || r.Weight > 10000:
		return bad("weight must be between 1 and 10000, got %d", r.Weight)
	case r.Active < 0:
		return bad("active must not be negative, got %d", r.Active)
	case r.LoadIndex < 0 || r.LoadIndex > 1:
		return bad("load_index must be in [0,1], got %v", r.LoadIndex)
	case r.Status != StatusReady && r.Status != StatusDraining:
		return bad("status must be %q or %q, got %q", StatusReady, StatusDraining, r.Status)
	case r.TimeoutHintMS < 0:
		return bad("timeout_hint_ms must not be negative, got %d", r.TimeoutHintMS)
	case r.HeartbeatMS < 100:
		return bad("heartbeat_ms must be at least 100, got %d", r.HeartbeatMS)
	}
	if r.Incarnation != "" {
		if err := streams.ValidateInstanceID(r.Incarnation); err != nil {
			return bad("incarnation: %v", err)
		}
	}
	for _, dep := range slices.Sorted(maps.Keys(r.Deps)) {
		state := r.Deps[dep]
		if err := streams.ValidateCapability(dep); err != nil {
			return bad("deps: %v", err)
		}
		if state != DepUp && state != DepDegraded && state != DepDown {
			return bad("deps.%s must be %q, %q or %q, got %q", dep, DepUp, DepDegraded, DepDown, state)
		}
	}
	return nil
}

// Has reports whether r offers capability c.
func (r *Record) Has(c string) bool {
	for _, x := range r.Capabilities {
		if x == c {
			return true
		}
	}
	return false
}

// Routable reports whether r takes new tasks.
func (r *Record) Routable() bool { return r.Status == StatusReady }

// TimeoutHint returns the agent's declared timeout hint, 0 when none.
func (r *Record) TimeoutHint() time.Duration {
	return time.Duration(r.TimeoutHintMS) * time.Millisecond
}

// Entry is a record as the bucket holds it, with the server's metadata.
type Entry struct {
	Record
	// Revision is the bucket revision of this version of the record.
	Revision uint64
	// Updated is the server's timestamp of the last heartbeat.
	Updated time.Time
}

// DecodeRecord parses and validates a stored record.
func DecodeRecord(data []byte) (Record, error) {
	var r Record
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("%w: not JSON: %v", ErrInvalidRecord, err)
	}
	r.Normalize()
	return r, r.Validate()
}
