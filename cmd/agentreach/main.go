package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/agent-reach/agentreach/integration/bench"
)

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1 // the command failed, e.g. a call answered with an error code
	exitUsage = 2 // bad command line, flag or environment variable
)

// runFunc runs one command with its arguments and returns the exit code.
type runFunc func(ctx context.Context, args []string, stdout, stderr io.Writer) int

type command struct {
	name    string
	summary string
	run     runFunc
}

// commands is the dispatch table, in the order the help lists it.
var commands = []command{
	{"up", "run a local stack: embedded NATS with JetStream, a dispatcher and (--demo) demo agents", runUp},
	{"dispatcher", "run a dispatcher against an existing NATS server or cluster", runDispatcher},
	{"auth", "make and revoke the identities of agents, callers and dispatchers; TLS certificates", runAuth},
	{"demo", "run the demo agents (echo, slow, math.add) against an existing server", runDemo},
	{"agents", "list the live agent instances from the registry", runAgents},
	{"call", "call a capability with a JSON payload and print the result", runCall},
	{"broadcast", "send a payload to every routable instance of a capability and print each one's answer", runBroadcast},
	{"fanout", "send a fan-out request (branches over several capabilities) and print each branch's answer", runFanOut},
	{"submit", "submit a durable task (JetStream) and print its request id; --wait for the outcome", runSubmit},
	{"result", "print the recorded outcome of a durable task by request id", runResult},
	{"dlq", "list, show, replay or purge dead letters (REACH_DLQ)", runDLQ},
	{"review", "list, show, replay or resolve tasks past their deadline (REACH_REVIEW)", runReview},
	{"caps", "put, validate, list, show or remove capability declarations (REACH_CAPS)", runCaps},
	{"policy", "get, set, edit, validate or list the routing policy (REACH_POLICY)", runPolicy},
	{"workflow", "put, validate, list, show or remove workflow definitions (REACH_POLICY workflow.<name>)", runWorkflow},
	{"runs", "list workflow runs or show one step by step with every decision (REACH_RUNS)", runRuns},
	{"stats", "print every dispatcher replica's counters, or the task record by capability, agent or type (--by)", runStats},
	{"breakers", "print the circuit breakers every dispatcher replica holds", runBreakers},
	{"connect", "join an MCP server (its tools) or an HTTP API (OpenAPI operations) as an agent", runConnect},
	{"conformance", "check an agent in any language against the wire contract (docs/conformance.md)", runConformance},
	{"bench", "run the benchmark suite against plain NATS baselines (see BENCHMARKS.md)", runBench},
	{"version", "print the version", runVersion},
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
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(stdout)
		return exitOK
	case "-version", "--version":
		return runVersion(ctx, args[1:], stdout, stderr)
	case "help":
		if len(args) == 1 {
			usage(stdout)
			return exitOK
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
	fmt.Fprintf(stderr, "agentreach: unknown command %q%s\n\n", args[0], didYouMean(args[0], names))
	usage(stderr)
	return exitUsage
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
