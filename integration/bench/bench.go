package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/agent-reach/agentreach/integration/bench/harness"
	"github.com/agent-reach/agentreach/integration/bench/routing"
	"github.com/agent-reach/agentreach/integration/bench/scale"
	"github.com/agent-reach/agentreach/integration/bench/tiers"
)

// Options configures a run (harness.Options). The zero value runs the
// full-length scenario without progress display or log lines.
type Options = harness.Options

// Report is the outcome of one scenario (harness.Report).
type Report = harness.Report

// ServeChild turns this process into a bench nats-server when it was
// started as one by a scenario that measures the server apart from itself
// (registry); otherwise it returns at once. Programs that run scenarios
// call it first thing in main (agentreach does) or TestMain
// (harness.ServeChild).
func ServeChild() { harness.ServeChild() }

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
	// ScenarioHTTP measures the HTTP gateway against NATS, and metrics with
	// tracing against neither (issue 20).
	ScenarioHTTP = "http"
	// ScenarioConnect is a call through the MCP connector against a direct
	// call to the same MCP server (issue 29).
	ScenarioConnect = "connect"
	// ScenarioMCP measures the MCP server at /mcp (issue 29).
	ScenarioMCP = "mcp"
	// ScenarioA2A measures the A2A binding against the HTTP call, and
	// agents answering the NATS micro protocol against agents that do not
	// (issue 30).
	ScenarioA2A = "a2a"
	// ScenarioStream is streamed results through the dispatcher against
	// plain request-reply, and a slow reader (issue 28).
	ScenarioStream = "stream"
)

// ErrUnknownScenario is returned by Run for a name Scenarios does not list.
var ErrUnknownScenario = errors.New("bench: unknown scenario")

// scenarios is the registry: every scenario's name and the function that
// runs it, in the order `make bench` runs them. A new scenario is one more
// entry here (and its name's constant above).
var scenarios = []struct {
	name string
	run  func(*harness.Run) error
}{
	{ScenarioOverhead, routing.Overhead},
	{ScenarioSkew, routing.Skew},
	{ScenarioDurable, tiers.Durable},
	{ScenarioRegistry, scale.Registry},
	{ScenarioWorkflow, tiers.Workflow},
	{ScenarioMatch, scale.Match},
	{ScenarioHedge, routing.Hedge},
	{ScenarioFanOut, routing.FanOut},
	{ScenarioBroadcast, scale.Broadcast},
	{ScenarioSecurity, routing.Security},
	{ScenarioHTTP, tiers.HTTP},
	{ScenarioConnect, tiers.Connect},
	{ScenarioMCP, tiers.MCP},
	{ScenarioA2A, tiers.A2A},
	{ScenarioStream, tiers.Stream},
}

// Scenarios lists the scenario names in the order `make bench` runs them.
func Scenarios() []string {
	names := make([]string, len(scenarios))
	for i, s := range scenarios {
		names[i] = s.name
	}
	return names
}

// Run runs one scenario in this process against a nats-server on loopback
// (embedded, or for registry a process of its own: see ServeChild) and
// returns its report. It stops promptly, with ctx's error,
// when ctx ends. Runs are not meant to overlap: each one loads the machine.
func Run(ctx context.Context, scenario string, o Options) (*Report, error) {
	for _, s := range scenarios {
		if s.name == scenario {
			return harness.Execute(ctx, scenario, o, s.run)
		}
	}
	return nil, fmt.Errorf("%w %q (want one of %s)", ErrUnknownScenario, scenario, strings.Join(Scenarios(), ", "))
}
