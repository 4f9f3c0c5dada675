package dispatcher

import (
	"github.com/agent-reach/agentreach/dispatcher/events"
	"strings"
	"testing"
	"time"

	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

// NO_AGENT's excluded list gives every condition an instance fails, not
// only the first: its dependencies down and each requirement it cannot
// meet, joined by declare.MatchSeparator.
func TestNoAgentListsEveryFailedCondition(t *testing.T) {
	h := newHarness(t, natstest.Options(t.TempDir()))
	h.declare(`{"type":"orders-reader","capabilities":[{"name":"orders.query"}],
		"labels":{"engine":["postgres"]},"permissions":["read"],"refuses":["write"]}`)
	h.instance(registry.Record{ID: "reader-1", Type: "orders-reader", Capabilities: []string{"orders.query"},
		Deps: map[string]string{"ext.db": registry.DepDown, "ext.cache": registry.DepDown, "ext.queue": registry.DepUp}})
	e := h.call("orders.query", []byte(`{}`), streams.HeaderRequire, `{"labels":{"engine":"mysql"},"permissions":["write"]}`)
	if e == nil || e.Code != streams.CodeNoAgent || len(e.Excluded) != 1 {
		t.Fatalf("want NO_AGENT excluding reader-1, got %+v", e)
	}
	want := "dependency ext.cache is down; dependency ext.db is down; label engine: wants mysql, declares postgres; refuses permission write"
	if x := e.Excluded[0]; x.Node != "reader-1" || x.Reason != want {
		t.Fatalf("excluded %+v, want reason %q", x, want)
	}
}

// A capability no instance offers gets the nearest registered one
// suggested, when it is close; a far one gets no suggestion, and neither
// does a capability whose instances are all draining.
func TestNoAgentSuggestsTheNearestCapability(t *testing.T) {
	h := newHarness(t, natstest.Options(t.TempDir()))
	h.instance(registry.Record{ID: "echo-1", Type: "echo", Capabilities: []string{"echo", "summarize"}})
	h.instance(registry.Record{ID: "old-1", Type: "old", Capabilities: []string{"echos"}, Status: registry.StatusDraining})
	for _, c := range []struct{ capability, message string }{
		{"ech", "no routable instance offers ech; did you mean echo?"},
		{"sumarize", "no routable instance offers sumarize; did you mean summarize?"},
		{"weather", "no routable instance offers weather"},
		{"echos", "no routable instance offers echos (1 excluded: see excluded)"},
	} {
		e := h.call(c.capability, []byte(`{}`))
		if e == nil || e.Code != streams.CodeNoAgent || e.Message != c.message {
			t.Errorf("%s: got %+v, want NO_AGENT %q", c.capability, e, c.message)
		}
	}
}

// records sends every task record it observes to a channel.
type records chan events.Event

func (r records) Observed(ev *events.Event) {
	if ev.IsTask() {
		r <- *ev
	}
}

// A NO_AGENT for a name no instance offers (draining ones too) and none
// has served since the replica started is recorded Unknown, with its
// message, and counts as the caller's doing; NO_AGENT for a name an
// instance offers (draining) stays the service's failure.
func TestNoAgentForANameNeverRegisteredIsTheCallers(t *testing.T) {
	seen := make(records, 16)
	h := newHarness(t, natstest.Options(t.TempDir()), WithObserver(seen))
	h.instance(registry.Record{ID: "old-1", Type: "old", Capabilities: []string{"echos"}, Status: registry.StatusDraining})
	for _, c := range []struct {
		capability string
		unknown    bool
		class      events.Class
	}{
		{"ech", true, events.ClassRejected},
		{"echos", false, events.ClassFailed},
	} {
		if e := h.call(c.capability, []byte(`{}`)); e == nil || e.Code != streams.CodeNoAgent {
			t.Fatalf("%s: %+v, want NO_AGENT", c.capability, e)
		}
		var ev events.Event
		select {
		case ev = <-seen:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no record within 10s", c.capability)
		}
		if ev.Capability != c.capability || ev.Unknown != c.unknown || ev.Class() != c.class ||
			!strings.HasPrefix(ev.Error, "no routable instance offers "+c.capability) {
			t.Errorf("%s: record %+v (class %s), want unknown %v, class %s and the message", c.capability, ev, ev.Class(), c.unknown, c.class)
		}
	}
}
