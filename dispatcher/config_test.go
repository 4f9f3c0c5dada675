package dispatcher

import (
	"github.com/agent-reach/agentreach/dispatcher/selection"
	"github.com/agent-reach/agentreach/registry/policy"
	"slices"
	"testing"
	"time"
)

func TestCallTimeoutClamp(t *testing.T) {
	cases := []struct{ wish, hint, want int }{ // seconds
		{0, 0, 5}, {10, 0, 12}, {1, 20, 22}, {200, 0, 120},
	}
	for _, c := range cases {
		cfg := Config{}
		cfg.setDefaults()
		got := cfg.callTimeout(sec(c.wish), sec(c.hint))
		if got != sec(c.want) {
			t.Errorf("callTimeout(%ds,%ds) = %v, want %ds", c.wish, c.hint, got, c.want)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
	}{
		{"unknown default strategy", Config{DefaultStrategy: "fastest"}},
		{"unknown capability strategy", Config{Strategies: map[string]string{"echo": "fastest"}}},
		{"bad capability", Config{Strategies: map[string]string{"Echo": selection.StrategyHash}}},
		{"negative in-flight", Config{MaxInFlight: -1}},
	}
	for _, tc := range cases {
		tc.cfg.setDefaults()
		if err := tc.cfg.validate(); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}

func sec(n int) (d time.Duration) { return time.Duration(n) * 1e9 }

// The policy names the strategies the dispatcher has.
func TestPolicyKnowsTheStrategies(t *testing.T) {
	if got, want := policy.StrategyNames(), selection.StrategyNames(); !slices.Equal(got, want) {
		t.Fatalf("policy.StrategyNames() = %v, dispatcher has %v", got, want)
	}
}

// A learned hint below the floor gives the floor (the hint is learned in
// selection.Hints).
func TestCallTimeoutOfALearnedHint(t *testing.T) {
	cfg := Config{}
	cfg.setDefaults()
	if got := cfg.callTimeout(0, 200*time.Millisecond); got != 5*time.Second {
		t.Fatalf("call timeout %v, want the 5s floor", got)
	}
}
