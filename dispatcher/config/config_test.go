package config

import (
	"slices"
	"testing"

	"github.com/agent-reach/agentreach/dispatcher/selection"
	"github.com/agent-reach/agentreach/registry/policy"
)

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
		tc.cfg.SetDefaults()
		if err := tc.cfg.Validate(); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}

// The policy names the strategies the dispatcher has.
func TestPolicyKnowsTheStrategies(t *testing.T) {
	if got, want := policy.StrategyNames(), selection.StrategyNames(); !slices.Equal(got, want) {
		t.Fatalf("policy.StrategyNames() = %v, dispatcher has %v", got, want)
	}
}
