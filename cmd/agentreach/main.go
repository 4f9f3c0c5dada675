package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/agent-reach/agentreach/cmd/agentreach/internal/benchmark"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/bridge"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/conformance"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/demo"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/document"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/inspect"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/mcpserve"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/stack"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/task"
	"github.com/agent-reach/agentreach/integration/bench"
)

// command is one entry of the command table: its name, its line in the
// help, and the function that runs it (cli.RunFunc). A new command is one
// more entry in commands, its function in a package of its group.
type command struct {
	name    string
	summary string
	run     cli.RunFunc
}

// commands is the dispatch table, in the order the help lists it.
var commands = []command{
	{"up", "run a local stack: embedded NATS with JetStream, a dispatcher and (--demo) demo agents", stack.RunUp},
	{"dispatcher", "run a dispatcher against an existing NATS server or cluster", stack.RunDispatcher},
	{"auth", "make and revoke the identities of agents, callers and dispatchers; TLS certificates", stack.RunAuth},
	{"demo", "run the demo agents (echo, slow, math.add) against an existing server", demo.Run},
	{"agents", "list the live agent instances from the registry", inspect.RunAgents},
	{"call", "call a capability with a JSON payload and print the result", task.RunCall},
	{"mcp", "serve every routable capability as an MCP tool on stdin/stdout, for a desktop MCP client", mcpserve.Run},
	{"broadcast", "send a payload to every routable instance of a capability and print each one's answer", task.RunBroadcast},
	{"fanout", "send a fan-out request (branches over several capabilities) and print each branch's answer", task.RunFanOut},
	{"submit", "submit a durable task (JetStream) and print its request id; --wait for the outcome", task.RunSubmit},
	{"result", "print the recorded outcome of a durable task by request id", task.RunResult},
	{"dlq", "list, show, replay or purge dead letters (REACH_DLQ)", task.RunDLQ},
	{"review", "list, show, replay or resolve tasks past their deadline (REACH_REVIEW)", task.RunReview},
	{"caps", "put, validate, list, show or remove capability declarations (REACH_CAPS)", document.RunCaps},
	{"policy", "get, set, edit, validate or list the routing policy (REACH_POLICY)", document.RunPolicy},
	{"workflow", "put, validate, list, show or remove workflow definitions (REACH_POLICY workflow.<name>)", document.RunWorkflow},
	{"runs", "list workflow runs or show one step by step with every decision (REACH_RUNS)", document.RunRuns},
	{"stats", "print every dispatcher replica's counters, or the task record by capability, agent or type (--by)", inspect.RunStats},
	{"breakers", "print the circuit breakers every dispatcher replica holds", inspect.RunBreakers},
	{"connect", "join an MCP server (its tools) or an HTTP API (OpenAPI operations) as an agent", bridge.RunConnect},
	{"conformance", "check an agent in any language against the wire contract (docs/conformance.md)", conformance.Run},
	{"bench", "run the benchmark suite against plain NATS baselines (see BENCHMARKS.md)", benchmark.Run},
	{"version", "print the version", cli.RunVersion},
}

func main() {
	bench.ServeChild() // a benchmark's own nats-server process: serves and exits
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second Ctrl-C kills the process at once
	}()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches to the command named by args[0].
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return cli.ExitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(stdout)
		return cli.ExitOK
	case "-version", "--version":
		return cli.RunVersion(ctx, args[1:], stdout, stderr)
	case "help":
		if len(args) == 1 {
			usage(stdout)
			return cli.ExitOK
		}
		return run(ctx, []string{args[1], "--help"}, stdout, stderr)
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	names := make([]string, len(commands))
	for i, c := range commands {
		names[i] = c.name
	}
	fmt.Fprintf(stderr, "agentreach: unknown command %q%s\n\n", args[0], cli.DidYouMean(args[0], names))
	usage(stderr)
	return cli.ExitUsage
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "agentreach finds and calls AI agents over NATS JetStream.\n\nUsage:\n  agentreach <command> [flags] [arguments]\n\nCommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, `
Run 'agentreach <command> --help' for a command's flags. Every flag can also be
set from the environment as AGENTREACH_<FLAG> (--data-dir: AGENTREACH_DATA_DIR);
a flag on the command line wins.

Exit status: 0 on success, 1 when the command fails, 2 on a usage error.
`)
}
