package policy_test

import (
	"fmt"

	"github.com/agent-reach/agentreach/registry/policy"
)

// A capability's policy overlays the defaults; what neither sets is left
// to the dispatcher's flags.
func ExampleSet_For() {
	defaults, err := policy.Parse(policy.KeyDefaults, []byte("retries: 2\nack_timeout: 3s\n"))
	if err != nil {
		panic(err)
	}
	orders, err := policy.Parse(policy.KeyCapabilityPrefix+"orders.query", []byte("strategy: round_robin\nretries: -1\n"))
	if err != nil {
		panic(err)
	}
	set := policy.NewSet(map[string]policy.Value{
		policy.KeyDefaults:                          defaults,
		policy.KeyCapabilityPrefix + "orders.query": orders,
	}, 1)
	p := set.For("orders.query")
	fmt.Println(*p.Strategy, *p.Retries, *p.AckTimeout)
	fmt.Println(*set.For("echo").Retries, set.For("echo").Strategy == nil)

	_, err = policy.Parse(policy.KeyDefaults, []byte("retries: two\n"))
	fmt.Println(err)
	// Output:
	// round_robin -1 3000000000
	// 2 true
	// invalid policy: defaults: retries: want an integer, got a string
}
