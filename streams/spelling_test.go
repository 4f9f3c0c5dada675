package streams_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/streams"
)

func TestSecurityHeaderSpellings(t *testing.T) {
	const name = streams.HeaderSource
	for _, c := range []struct {
		what    string
		h       nats.Header
		refused string // in CheckOnce's error, "" when accepted
		kept    []string
	}{
		{"absent", nats.Header{"Other": {"x"}}, "", nil},
		{"once", nats.Header{name: {"alice"}}, "", []string{"alice"}},
		{"twice", nats.Header{name: {"alice", "mallory"}}, "appears 2 times", []string{"alice"}},
		{"lower case beside", nats.Header{name: {"alice"}, "reach-source": {"mallory"}}, `"reach-source"`, []string{"alice"}},
		{"upper case alone", nats.Header{"REACH-SOURCE": {"mallory"}}, `"REACH-SOURCE"`, nil},
		{"two other cases", nats.Header{"reach-source": {"m1"}, "Reach-source": {"m2"}}, "another case", nil},
	} {
		err := streams.CheckOnce(c.h, name)
		switch {
		case c.refused == "" && err != nil:
			t.Errorf("%s: CheckOnce: %v, want nil", c.what, err)
		case c.refused != "" && (err == nil || !strings.Contains(err.Error(), c.refused)):
			t.Errorf("%s: CheckOnce: %v, want an error naming %s", c.what, err, c.refused)
		}
		streams.KeepOne(c.h, name)
		for k := range c.h {
			if k != name && strings.EqualFold(k, name) {
				t.Errorf("%s: KeepOne left the spelling %q", c.what, k)
			}
		}
		if got := c.h.Values(name); !slices.Equal(got, c.kept) {
			t.Errorf("%s: KeepOne kept %q, want %q", c.what, got, c.kept)
		}
		if err := streams.CheckOnce(c.h, name); err != nil {
			t.Errorf("%s: after KeepOne, CheckOnce: %v", c.what, err)
		}
	}
}
