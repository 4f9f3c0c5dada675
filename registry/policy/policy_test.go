package policy_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agent-reach/agentreach/registry/policy"
)

func TestParsePolicy(t *testing.T) {
	v, err := policy.Parse("capability.orders.query", []byte(`
strategy: round_robin
retries: -1
write: false
ack_timeout: 500ms
min_call_timeout: 1s
max_call_timeout: 1m30s
queue_wait: -1s
max_in_flight: 64
breaker: {consecutive_failures: 5, failure_ratio: 0.25, window: 30s, cooldown: 2s}
require: {labels: {engine: postgres}, permissions: [read]}
`))
	if err != nil {
		t.Fatal(err)
	}
	c := v.Capability
	if *c.Strategy != "round_robin" || *c.Retries != -1 || *c.Write || c.Idempotent != nil ||
		time.Duration(*c.AckTimeout) != 500*time.Millisecond || time.Duration(*c.MaxCallTimeout) != 90*time.Second ||
		time.Duration(*c.QueueWait) != -time.Second || *c.MaxInFlight != 64 || c.Deadline != nil ||
		*c.Breaker.FailureRatio != 0.25 || c.Breaker.Probes != nil || c.Require.Labels["engine"] != "postgres" {
		t.Fatalf("decoded %s", v.JSON)
	}
	// The JSON form reads back to itself.
	again, err := policy.Parse("capability.orders.query", v.JSON)
	if err != nil || string(again.JSON) != string(v.JSON) {
		t.Fatalf("JSON form %s reads back as %s, %v", v.JSON, again.JSON, err)
	}
	if !strings.Contains(string(v.JSON), `"ack_timeout":"500ms"`) {
		t.Fatalf("durations are not strings in %s", v.JSON)
	}

	cases := []struct {
		key, src, want string
	}{
		{"defaults", `{"stratgy":"hash"}`, `invalid policy: defaults: stratgy: unknown field (want one of strategy, retries`},
		{"defaults", `{"strategy":"fastest"}`, `defaults: strategy: unknown strategy "fastest" (want one of hash, least_load, round_robin, weighted_round_robin)`},
		{"defaults", `{"retries":-2}`, `retries: must be -1 (none) or more, got -2`},
		{"defaults", `{"retries":"2"}`, `retries: want an integer, got a string`},
		{"defaults", `{"ack_timeout":500}`, `ack_timeout: want a duration string such as "500ms" or "3s", got 500`},
		{"defaults", `{"ack_timeout":"soon"}`, `ack_timeout: want a duration such as "500ms" or "3s", got "soon"`},
		{"defaults", `{"ack_timeout":"0s"}`, `ack_timeout: must be positive, got 0s`},
		{"defaults", `{"deadline":"-1s"}`, `deadline: must be positive, got -1s`},
		{"defaults", `{"min_call_timeout":"10s","max_call_timeout":"5s"}`, `max_call_timeout: 5s is less than min_call_timeout 10s`},
		{"defaults", `{"max_in_flight":0}`, `max_in_flight: must be at least 1, got 0`},
		{"defaults", `{"breaker":{"failure_ratio":1.5}}`, `breaker.failure_ratio: must be in (0,1], got 1.5`},
		{"defaults", `{"breaker":{"window":"10ms"}}`, `breaker.window: must be at least 1s, got 10ms`},
		{"defaults", `{"breaker":{"probes":0,"min_volume":0}}`, `breaker.min_volume: must be at least 1, got 0; breaker.probes: must be at least 1, got 0`},
		{"defaults", `{"breaker":{"cooldown":"0s"}}`, `breaker.cooldown: must be positive`},
		{"defaults", `{"breaker":{"ratio":1}}`, `breaker.ratio: unknown field`},
		{"defaults", `{"require":{"max_cost":-1}}`, `require.max_cost: must be a finite number, 0 or more`},
		{"defaults", `{"require":{"labels":{"engine":1}}}`, `require.labels.engine: want a string, got the number 1`},
		{"defaults", `{"hedge":{"after_ms":20,"after":"p95"}}`, `hedge: give after_ms or after, not both`},
		{"defaults", `{"hedge":{"after":"95"}}`, `hedge.after: "95": want a percentile`},
		{"defaults", `{"hedge":{"after":"p100"}}`, `hedge.after: "p100": want a percentile`},
		{"defaults", `{"hedge":{"budget":0}}`, `hedge.budget: must be in (0,1]`},
		{"defaults", `{"hedge":{"delay":1}}`, `hedge.delay: unknown field`},
		{"capability.pay.charge", `{"write":true,"hedge":{}}`, `hedge: a write is never hedged`},
		{"defaults", `{"quorum":1.5}`, `quorum: want a fraction between 0 and 1`},
		{"defaults", `[1]`, `want an object, got an array`},
		{"capability.Bad Cap", `{}`, `not a valid key`},
		{"capability.Bad", `{}`, `capability "Bad" must be dotted lowercase`},
		{"acl", "a: [1\n", `not valid YAML or JSON`},
	}
	for _, tc := range cases {
		t.Run(tc.key+" "+tc.src, func(t *testing.T) {
			_, err := policy.Parse(tc.key, []byte(tc.src))
			if !errors.Is(err, policy.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want ErrInvalid containing %q, got %v", tc.want, err)
			}
		})
	}
}

// Keys this package does not decode are kept as JSON, from JSON or YAML.
func TestParsePolicyKeepsOtherKeysAsJSON(t *testing.T) {
	for _, src := range []string{`{"rules": [{"caller": "billing-*", "may_call": ["payment.*"]}]}`,
		"rules:\n  - caller: billing-*\n    may_call: [payment.*]\n"} {
		v, err := policy.Parse("acl", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		if want := `{"rules":[{"caller":"billing-*","may_call":["payment.*"]}]}`; string(v.JSON) != want || v.Capability != nil {
			t.Fatalf("acl kept as %s, want %s", v.JSON, want)
		}
	}
}

func TestValidatePolicyKey(t *testing.T) {
	for key, want := range map[string]string{
		"defaults":                "",
		"capability.orders.query": "",
		"acl":                     "",
		"workflow.claim.review":   "",
		"capability.Orders":       `capability "Orders"`,
		"capabilities.orders":     `unknown key "capabilities.orders"`,
		"default":                 `unknown key "default"`,
		"workflow.claim review":   `want letters, digits`,
	} {
		err := policy.ValidateKey(key)
		if (want == "") != (err == nil) || (err != nil && (!errors.Is(err, policy.ErrInvalid) || !strings.Contains(err.Error(), want))) {
			t.Errorf("ValidateKey(%q) = %v, want %q", key, err, want)
		}
	}
}

// quota is a policy kind registered by this test, as a later package would.
type quota struct {
	PerMinute int `json:"per_minute"`
}

func init() {
	policy.RegisterKind("quota", func(key string, value json.RawMessage) (any, error) {
		var q quota
		if err := json.Unmarshal(value, &q); err != nil {
			return nil, err
		}
		if q.PerMinute < 1 {
			return nil, fmt.Errorf("per_minute: must be at least 1, got %d", q.PerMinute)
		}
		return q, nil
	})
}

// An unknown key's error lists the kinds a key may start with, the
// registered ones included, so a typo of "taxonomy" or "quota" is told
// what exists.
func TestUnknownPolicyKeyNamesTheKinds(t *testing.T) {
	err := policy.ValidateKey("quotas.billing")
	if err == nil || !strings.Contains(err.Error(), "a key of a kind: acl, quota, workflow") {
		t.Fatalf("ValidateKey(quotas.billing) = %v, want the kinds acl, quota, workflow listed", err)
	}
}

func TestRegisteredPolicyKind(t *testing.T) {
	v, err := policy.Parse("quota.billing", []byte("per_minute: 60\n"))
	if err != nil {
		t.Fatal(err)
	}
	if q, ok := v.Decoded.(quota); !ok || q.PerMinute != 60 {
		t.Fatalf("decoded %#v", v.Decoded)
	}
	if _, err := policy.Parse("quota", []byte(`{"per_minute": 0}`)); !errors.Is(err, policy.ErrInvalid) ||
		!strings.Contains(err.Error(), "quota: per_minute: must be at least 1") {
		t.Fatalf("invalid quota: %v", err)
	}
	if err := policy.ValidateKey("quota.billing"); err != nil {
		t.Fatalf("a registered kind's key is refused: %v", err)
	}
	for _, name := range []string{"quota", "defaults", "capability", "a.b", ""} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("RegisterKind(%q) did not panic", name)
				}
			}()
			policy.RegisterKind(name, func(string, json.RawMessage) (any, error) { return nil, nil })
		}()
	}
}
