package conformance

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/agent-reach/agentreach/agentkit/agenttest"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/streams"
)

const conformanceAbout = `
Checks an agent, written in any language, against the wire contract
(docs/conformance.md). It starts an embedded NATS server with the topology
provisioned (heartbeat 1s) and a dispatcher (call timeout 1s), runs
<command> with AGENTREACH_SERVER (the server's URL) and AGENTREACH_AGENT_ID
(the instance id the agent must use) in its environment, and checks every
rule in turn:

  ` + "%s" + `

With --auth the same rules are checked with security on, as 'agentreach up
--auth' runs a stack (docs/security.md): the server in operator mode on an
identity store in a temporary directory, and a dispatcher that checks every
task's Reach-Signature against the ACL. The agent has an identity of its
own, an agent named AGENTREACH_AGENT_ID of type "conformance", whose
credentials file is in AGENTREACH_CREDS: it must connect with them and read
replies only under the inbox prefix _INBOX.<AGENTREACH_AGENT_ID>. The suite
calls as a caller identity, every task signed.

The agent registers as type "conformance" and serves conformance.echo,
conformance.reject, conformance.slow, conformance.busy and conformance.write
as docs/conformance.md describes. The drain rule stops it with SIGTERM, so
run the agent's program directly (a built binary, python3 agent.py), not
through a launcher such as go run.

It prints one line per rule and a summary (with --json one object instead),
and, when a rule failed, the agent's output on stderr. Exit status: 0 when
every rule passed, 1 when one failed or the run could not take place, 2 on a
usage error.

Example:
  go build -o rawagent ./examples/rawagent
  agentreach conformance -- ./rawagent
  agentreach conformance --rules ack,drain -- python3 agent.py
  agentreach conformance --auth -- ./rawagent`

// ConformanceReport is the --json output.
type ConformanceReport struct {
	Passed    bool                `json:"passed"`
	ElapsedMS int64               `json:"elapsed_ms"`
	Results   []conformanceResult `json:"results"`
	Output    string              `json:"output,omitempty"`
	// Error is why the run ended before every rule was checked.
	Error *streams.Error `json:"error,omitempty"`
}

type conformanceResult struct {
	Rule      string `json:"rule"`
	Title     string `json:"title"`
	Passed    bool   `json:"passed"`
	Message   string `json:"message,omitempty"`
	ElapsedMS int64  `json:"elapsed_ms"`
}

func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var (
		rules    string
		asJSON   bool
		withAuth bool
		timeout  time.Duration
	)
	ids := agenttest.RuleIDs()
	cl := cli.NewCmdline("conformance", "agentreach conformance [flags] -- <command> [args…]",
		fmt.Sprintf(conformanceAbout, wrap(strings.Join(ids, ", "), 72, "\n  ")))
	cl.Group("Flags", func(fs *flag.FlagSet) {
		fs.StringVar(&rules, "rules", "", "comma-separated rule `ids` to check (default: every rule)")
		cl.JSONFlag(fs, &asJSON, `print one JSON object {"passed", "elapsed_ms", "results": […], "output"} on stdout`)
		fs.DurationVar(&timeout, "timeout", 2*time.Minute, "bound on the whole run")
		fs.BoolVar(&withAuth, "auth", false, "check with auth on: operator mode, signed tasks, the agent's identity\nin AGENTREACH_CREDS (docs/conformance.md#auth)")
	})
	pos, code, ok := cl.Parse(args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) == 0 {
		return cl.UsageError(stderr, "want the agent's command after --, e.g. agentreach conformance -- ./myagent")
	}
	if _, err := exec.LookPath(pos[0]); err != nil {
		return cl.UsageError(stderr, "agent command %q: %v", pos[0], err)
	}
	var opts []agenttest.Option
	if only := cli.SplitList(rules); len(only) > 0 {
		for _, id := range only {
			if !slices.Contains(ids, id) {
				return cl.UsageError(stderr, "--rules: unknown rule %q (want one of %s)", id, strings.Join(ids, ", "))
			}
		}
		opts = append(opts, agenttest.Only(only...))
	}
	if withAuth {
		opts = append(opts, agenttest.WithAuth())
	}
	if timeout <= 0 {
		return cl.UsageError(stderr, "--timeout must be positive, got %v", timeout)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	report, err := agenttest.Check(ctx, agenttest.Command(pos[0], pos[1:]...), opts...)
	if report == nil {
		return cl.Fail(stderr, err)
	}
	if err != nil {
		err = fmt.Errorf("the run ended early: %w", err)
		fmt.Fprintf(stderr, "error: %v\n", err)
	}
	if asJSON {
		printConformanceJSON(stdout, report, err)
	} else {
		PrintConformance(stdout, report)
	}
	if !report.Passed() && report.Output != "" && !asJSON {
		fmt.Fprintf(stderr, "\nthe agent's output (the last 64 KiB at most):\n%s", report.Output)
	}
	if err != nil || !report.Passed() {
		return cli.ExitFail
	}
	return cli.ExitOK
}

// PrintConformance prints one line per rule, "PASS ack 12ms" or
// "FAIL drain 6.5s: <what was wrong>", and a summary.
func PrintConformance(w io.Writer, r *agenttest.Report) {
	for _, res := range r.Results {
		if res.Passed {
			fmt.Fprintf(w, "PASS %s %v\n", res.Rule, short(res.Elapsed))
			continue
		}
		fmt.Fprintf(w, "FAIL %s %v: %s\n", res.Rule, short(res.Elapsed),
			strings.TrimPrefix(res.Message, "rule "+res.Rule+": "))
	}
	failed := r.Failed()
	elapsed := r.Elapsed.Round(100 * time.Millisecond)
	if len(failed) == 0 {
		fmt.Fprintf(w, "all %d rules passed in %v\n", len(r.Results), elapsed)
		return
	}
	names := make([]string, len(failed))
	for i, f := range failed {
		names[i] = f.Rule
	}
	fmt.Fprintf(w, "%d of %d rules failed in %v: %s\n", len(failed), len(r.Results), elapsed, strings.Join(names, ", "))
}

// printConformanceJSON prints the report as one JSON object; err, when the
// run ended early, is its "error".
func printConformanceJSON(w io.Writer, r *agenttest.Report, err error) {
	out := ConformanceReport{Passed: r.Passed() && err == nil, ElapsedMS: r.Elapsed.Milliseconds(), Output: r.Output,
		Results: make([]conformanceResult, len(r.Results))}
	if err != nil {
		out.Error = cli.ErrorObject(err)
	}
	for i, res := range r.Results {
		out.Results[i] = conformanceResult{Rule: res.Rule, Title: res.Title, Passed: res.Passed,
			Message: res.Message, ElapsedMS: res.Elapsed.Milliseconds()}
	}
	cli.WriteJSONLine(w, out)
}

// short rounds d for a line of the report: to microseconds below a
// millisecond, else to milliseconds.
func short(d time.Duration) time.Duration {
	if d < time.Millisecond {
		return d.Round(time.Microsecond)
	}
	return d.Round(time.Millisecond)
}

// wrap breaks s at spaces into lines of at most width bytes, joined by sep.
func wrap(s string, width int, sep string) string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		if line != "" && len(line)+1+len(word) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	return strings.Join(append(lines, line), sep)
}
