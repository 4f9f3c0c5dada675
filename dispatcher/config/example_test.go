package config_test

import (
	"errors"
	"fmt"

	"github.com/agent-reach/agentreach/dispatcher/config"
)

// The zero Config is all defaults; Validate says what a replica could not
// run, wrapping ErrInvalid.
func ExampleConfig_Validate() {
	cfg := config.Config{Writes: []string{"order.place"}}
	cfg.SetDefaults()
	fmt.Println(cfg.AckTimeout, cfg.RetriesFor("order.place"), cfg.RetriesFor("echo"), cfg.Validate())

	cfg.MaxInFlight = -1
	err := cfg.Validate()
	fmt.Println(errors.Is(err, config.ErrInvalid), err)
	// Output:
	// 3s 1 2 <nil>
	// true dispatcher: invalid config: MaxInFlight must be at least 1, got -1
}
