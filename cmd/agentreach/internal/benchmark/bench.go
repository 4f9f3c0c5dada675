package benchmark

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/integration/bench"
)

const benchAbout = `
Runs the benchmark suite in this process, against an embedded nats-server on
loopback, and prints a table per scenario. Every scenario measures
Agent-Reach beside what a user would otherwise pick (a plain NATS queue group,
a JetStream pull work-queue, raw JetStream publishing) in the same run, and
reports ratios, so the comparison holds on noisy hardware:

  overhead  echo agents: direct request/reply to a queue group vs the same work
            through the dispatcher (throughput at 1 and 64 callers, latency
            at 25/50/75% of the direct maximum, dispatcher CPU)
  skew      8 agents, one 10x slower (and variants): p50/p99/p99.9, timeouts
            and the highest sustained rate per method
  durable   raw JetStream async publish vs durable submission
  registry  1k, 5k, 10k simulated agents heartbeating: join-to-routable,
            crash-to-no-task, record expiry, memory per 1k agents
  workflow  a 3-step workflow vs one routed call (direct tier, p50), durable
            3-step runs vs durable single tasks (per second)
  match     10k simulated agents of 100 declared types: routed throughput
            with a Reach-Require leaving 10% vs no declarations, and the
            time until a REACH_POLICY change routes
  hedge     8 agents whose tasks stall 100x longer 2% of the time, at half
            their capacity: p50/p99/p99.9 hedged vs not, hedges sent/refused
  fanout    a 10-branch fan-out vs one routed call: p50 ratio
  broadcast a broadcast to 1,000 instances vs a raw NATS scatter-gather to
            the same subscribers: time until every reply is gathered
  security  routed echo with auth, the ACL, Reach-Signature and TLS on vs
            all of it off (throughput at 64 callers)
  http      POST /v1/call/echo with keep-alive at 64 clients vs reach.task.echo
            over NATS; metrics and tracing on vs off (throughput)
  connect   a call through the MCP connector vs a direct MCP call of the same
            server (p50 ratio; a Go SDK server, and fastmcp when ./.venv has it)
  mcp       MCP tools/call of echo at /mcp vs POST /v1/call/echo at 64 clients;
            tools/list_changed to 100 clients with 1,000 capabilities
  a2a       A2A SendMessage to echo vs POST /v1/call/echo at 64 clients;
            agents answering NATS micro ($SRV) vs not (throughput)
  stream    a streamed result through the dispatcher vs plain request-reply:
            time to first chunk, one stream's chunks/s; a 10× slower reader
            ends OVERLOADED with the heap peak reported

With no scenario, or "all", every scenario runs in turn (what 'make bench'
does); --json-file FILE also writes every figure to FILE. Latency comes from HDR histograms with open-loop (Poisson) load
measured from each request's intended send time; a request that times out
counts in the percentiles at its timeout. Each scenario first spins one
thread for 2 s and reports how steadily the machine ran it (machine_*).
Results and how to read them: BENCHMARKS.md.`

func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var (
		quick    bool
		jsonFile string
	)
	cl := cli.NewCmdline("bench", "agentreach bench [flags] [scenario|all]", benchAbout)
	cl.Group("Flags", func(fs *flag.FlagSet) {
		fs.BoolVar(&quick, "quick", false, "shorten every measurement point: checks the suite works, figures are noisy")
		fs.StringVar(&jsonFile, "json-file", "", "also write every figure as JSON to `file` (one object per scenario, by name;\none scenario: its figures at the top level)")
	})
	pos, code, ok := cl.Parse(args, stdout, stderr)
	if !ok {
		return code
	}
	scenarios := bench.Scenarios()
	switch {
	case len(pos) > 1:
		return cl.UsageError(stderr, "want at most one scenario, got %d", len(pos))
	case len(pos) == 1 && pos[0] != "all":
		scenarios = []string{pos[0]}
	}
	opts := bench.Options{Quick: quick}
	if f, ok := stderr.(*os.File); ok && cli.IsTerminal(f) {
		opts.Progress = stderr
	}
	figures := make(map[string]map[string]float64)
	for _, s := range scenarios {
		rep, err := bench.Run(ctx, s, opts)
		if err != nil {
			fmt.Fprintf(stderr, "error: bench %s: %v\n", s, err)
			if errors.Is(err, bench.ErrUnknownScenario) {
				return cli.ExitUsage
			}
			return cli.ExitFail
		}
		fmt.Fprintf(stdout, "== %s ==\n%s\n", rep.Scenario, rep.Table)
		for _, n := range rep.Notes {
			fmt.Fprintf(stdout, "  * %s\n", n)
		}
		fmt.Fprintln(stdout)
		figures[rep.Scenario] = rep.Figures
	}
	if jsonFile != "" {
		var v any = figures
		if len(scenarios) == 1 {
			v = figures[scenarios[0]] // one scenario: its keys at the top level
		}
		b, err := json.MarshalIndent(v, "", "  ")
		if err == nil {
			err = os.WriteFile(jsonFile, append(b, '\n'), 0o644)
		}
		if err != nil {
			fmt.Fprintf(stderr, "error: write %s: %v\n", jsonFile, err)
			return cli.ExitFail
		}
	}
	return cli.ExitOK
}
