package selection_test

import (
	"fmt"

	"github.com/agent-reach/agentreach/dispatcher/selection"
	"github.com/agent-reach/agentreach/registry"
)

// task is a task as a strategy sees it.
type task struct{ tried map[string]bool }

func (t task) Tried(id string) bool { return t.tried[id] }
func (t task) AffinityKey() string  { return "" }
func (t task) Preference() string   { return "" }

// Round robin over three instances, passing over the one the task tried.
func ExamplePicker() {
	cfg := selection.BreakerConfig{}
	cfg.SetDefaults()
	p := &selection.Picker{Loads: &selection.Loads{Breaker: &cfg}}
	var insts []*registry.Instance
	for _, id := range []string{"a", "b", "c"} {
		insts = append(insts, registry.NewInstance(registry.Entry{Record: registry.Record{
			ID: id, Capabilities: []string{"echo"}, MaxConcurrent: 1, Weight: 100, Status: registry.StatusReady}}))
	}
	rs := registry.NewRoutes(insts)
	t := task{tried: map[string]bool{"b": true}}
	for range 4 {
		fmt.Print(rs.Instances[p.Pick(selection.StrategyRoundRobin, "echo", rs, t)].ID, " ")
	}
	fmt.Println()
	// Output: a c c a
}
