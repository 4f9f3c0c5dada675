package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Scenario names, as Run and `agentreach bench <scenario>` take them.
const (
	ScenarioOverhead = "overhead"
	ScenarioSkew     = "skew"
	ScenarioDurable  = "durable"
	ScenarioRegistry = "registry"
	// ScenarioWorkflow is a 3-step workflow against one routed call.
	ScenarioWorkflow = "workflow"
	// ScenarioMatch is requirement matching at 10,000 agents (issue 16).
	ScenarioMatch = "match"
	// ScenarioHedge is hedged requests against a 2% stall tail (issue 17).
	ScenarioHedge = "hedge"
	// ScenarioFanOut is a 10-branch fan-out against one routed call (issue 17).
	ScenarioFanOut = "fanout"
	// ScenarioBroadcast is a broadcast to 1,000 instances against a raw
	// NATS scatter-gather (issue 17).
	ScenarioBroadcast = "broadcast"
	// ScenarioSecurity is routed throughput with auth, the ACL and TLS on
	// against off (issue 19).
	ScenarioSecurity = "security"
)

// ErrUnknownScenario is returned by Run for a name Scenarios does not list.
var ErrUnknownScenario = errors.New("bench: unknown scenario")

// Scenarios lists the scenario names in the order `make bench` runs them.
func Scenarios() []string {
	return []string{ScenarioOverhead, ScenarioSkew, ScenarioDurable, ScenarioRegistry, ScenarioWorkflow,
		ScenarioMatch, ScenarioHedge, ScenarioFanOut, ScenarioBroadcast, ScenarioSecurity, ScenarioHTTP}
}

// Run runs one scenario in this process against a nats-server on loopback
// (embedded, or for registry a process of its own: see ServeChild) and
// returns its report. It stops promptly, with ctx's error,
// when ctx ends. Runs are not meant to overlap: each one loads the machine.
func Run(ctx context.Context, scenario string, o Options) (*Report, error) {
	var fn func(*run) error
	switch scenario {
	case ScenarioOverhead:
		fn = runOverhead
	case ScenarioSkew:
		fn = runSkew
	case ScenarioDurable:
		fn = runDurable
	case ScenarioRegistry:
		fn = runRegistry
	case ScenarioWorkflow:
		fn = runWorkflow
	case ScenarioMatch:
		fn = runMatch
	case ScenarioHedge:
		fn = runHedge
	case ScenarioFanOut:
		fn = runFanOut
	case ScenarioBroadcast:
		fn = runBroadcast
	case ScenarioSecurity:
		fn = runSecurity
	case ScenarioHTTP:
		fn = runHTTP
	default:
		return nil, fmt.Errorf("%w %q (want one of %s)", ErrUnknownScenario, scenario, strings.Join(Scenarios(), ", "))
	}
	return execute(ctx, scenario, o, fn)
}
