package workflow

import (
	"encoding/json"
	"maps"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/dispatcher/workflow/spec"
	"github.com/agent-reach/agentreach/registry/policy"
)

// Definitions are followed in REACH_POLICY by the engine itself (rather
// than through the dispatcher's PolicyWatcher) for two reasons: a run
// records the revision of the key its definition came from, and the
// dispatcher asks Serves for every task, which must cost one map read.

// version is a definition in force and the REACH_POLICY revision of its
// key.
type version struct {
	def      *spec.Definition
	revision uint64
	json     []byte // def marshalled, which every run records
}

// definitions is the feed of the definition watcher (kvwatch.Handler): it
// keeps the last good version of every workflow.<name> key. A value put
// by hand that does not validate is logged once per revision and ignored,
// and the previous version stays in force.
type definitions struct {
	log      zerolog.Logger
	publish  func(map[string]*version) // gets a map of its own
	values   map[string]*version
	rejected map[string]uint64 // name → revision of its refused value
}

// Replace implements kvwatch.Handler.
func (f *definitions) Replace(listing map[string]jetstream.KeyValueEntry) {
	next := make(map[string]*version)
	for key, kve := range listing {
		if name, ok := strings.CutPrefix(key, spec.PolicyPrefix); ok {
			if v := f.take(name, kve); v != nil {
				next[name] = v
			}
		}
	}
	for name := range f.rejected {
		if _, ok := listing[spec.PolicyPrefix+name]; !ok {
			delete(f.rejected, name)
		}
	}
	f.values = next
	f.publish(maps.Clone(next))
}

// Apply implements kvwatch.Handler.
func (f *definitions) Apply(kve jetstream.KeyValueEntry) {
	name, ok := strings.CutPrefix(kve.Key(), spec.PolicyPrefix)
	if !ok {
		return
	}
	if kve.Operation() != jetstream.KeyValuePut {
		if _, had := f.values[name]; had {
			delete(f.values, name)
			f.log.Info().Str("workflow", name).Msg("workflow definition removed")
			f.publish(maps.Clone(f.values))
		}
		delete(f.rejected, name)
		return
	}
	v := f.take(name, kve)
	if v == nil || v == f.values[name] {
		return
	}
	f.values[name] = v
	f.publish(maps.Clone(f.values))
}

// take returns the version kve holds, or the version in force when kve
// does not validate (nil if there is none).
func (f *definitions) take(name string, kve jetstream.KeyValueEntry) *version {
	cur := f.values[name]
	if cur != nil && cur.revision == kve.Revision() {
		return cur
	}
	pv, err := policy.Parse(kve.Key(), kve.Value())
	if err != nil {
		if f.rejected[name] != kve.Revision() {
			f.rejected[name] = kve.Revision()
			ev := f.log.Error().Err(err).Str("workflow", name).Uint64("revision", kve.Revision())
			if cur != nil {
				ev = ev.Uint64("in_force", cur.revision)
			}
			ev.Msg("workflow definition does not validate: ignored, the previous version stays in force")
		}
		return cur
	}
	delete(f.rejected, name)
	f.log.Info().Str("workflow", name).Uint64("revision", kve.Revision()).Msg("workflow definition in force")
	def := pv.Decoded.(*spec.Definition)
	b, _ := json.Marshal(def) // a definition always marshals
	return &version{def: def, revision: kve.Revision(), json: b}
}
