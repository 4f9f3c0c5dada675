package policy_test

import (
	"errors"
	"testing"

	"github.com/agent-reach/agentreach/registry/policy"
)

func FuzzParsePolicy(f *testing.F) {
	for _, seed := range []struct{ key, value string }{
		{"defaults", `{"strategy":"hash","retries":-1,"ack_timeout":"500ms","breaker":{"failure_ratio":0.5,"window":"1m"}}`},
		{"capability.orders.query", "queue_wait: -1s\nrequire: {labels: {engine: postgres}, max_cost: 0.01}\n"},
		{"acl", `{"rules":[{"caller":"billing-*","may_call":["payment.*"]}]}`},
		{"workflow.claim.review", "name: claim.review\nsteps: [{name: verify, call: claim.verify}]\n"},
	} {
		f.Add(seed.key, []byte(seed.value))
	}
	f.Fuzz(func(t *testing.T, key string, data []byte) {
		v, err := policy.Parse(key, data)
		if err != nil {
			if !errors.Is(err, policy.ErrInvalid) {
				t.Fatalf("error without ErrInvalid: %v", err)
			}
			return
		}
		again, err := policy.Parse(key, v.JSON)
		if err != nil || string(again.JSON) != string(v.JSON) {
			t.Fatalf("JSON form %s reads back as %s, %v", v.JSON, again.JSON, err)
		}
	})
}
