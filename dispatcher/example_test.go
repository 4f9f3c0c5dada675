package dispatcher_test

import (
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/selection"
)

// A configuration choosing a strategy per capability: New refuses unknown
// strategy names with the list of valid ones.
func ExampleNew() {
	nc := &nats.Conn{} // New only validates; Start needs a connected one
	_, err := dispatcher.New(nc, config.Config{
		Strategies: map[string]string{"session.chat": selection.StrategyHash, "report.render": "fastest"},
	})
	fmt.Println(err)
	fmt.Println(selection.StrategyNames())
	// Output:
	// dispatcher: invalid config: unknown strategy "fastest" for report.render (want one of [hash least_load round_robin weighted_round_robin])
	// [hash least_load round_robin weighted_round_robin]
}
