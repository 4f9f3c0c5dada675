package names

import (
	"testing"

	"github.com/agent-reach/agentreach/streams"
)

// A NO_AGENT is for a name never registered only when no task of it was
// delivered and known says no; any other code never is.
func TestRecord(t *testing.T) {
	var s Served
	none := func(string) bool { return false }
	offered := func(c string) bool { return c == "echo" }
	for _, c := range []struct {
		capability string
		delivered  bool
		e          *streams.Error
		known      func(string) bool
		want       bool
	}{
		{"ech", false, streams.NewError(streams.CodeNoAgent, "x"), offered, true},
		{"echo", false, streams.NewError(streams.CodeNoAgent, "x"), offered, false}, // offered now (draining, say)
		{"gone", false, streams.NewError(streams.CodeTimeout, "x"), none, false},    // not NO_AGENT
		{"gone", true, nil, none, false},                                            // delivered once
		{"gone", false, streams.NewError(streams.CodeNoAgent, "x"), none, false},    // its instances left since
		{"never", false, streams.NewError(streams.CodeNoAgent, "x"), none, true},
	} {
		if got := s.Record(c.capability, c.delivered, c.e, c.known); got != c.want {
			t.Errorf("%s delivered %v %v: %v, want %v", c.capability, c.delivered, c.e, got, c.want)
		}
	}
}
