package conformance

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agent-reach/agentreach/agentkit/agenttest"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/clitest"
)

// The raw-protocol agent passes the suite through the command line, run
// as the README says, with go run: exit 0 and a JSON report with every rule
// passed.
func TestConformanceRawAgent(t *testing.T) {
	before := clitest.Goroutines()
	r := clitest.RunCmd(t, Run, "--json", "--", "go", "run", "../../../../examples/rawagent")
	checkEveryRulePassed(t, r)
	clitest.CheckNoLeaks(t, before)
}

// The Go SDK's agent passes the suite with --auth: it connects as the
// identity whose credentials AGENTREACH_CREDS names, every call reaches it
// signed through an authorizing dispatcher.
func TestConformanceAuthGoAgent(t *testing.T) {
	before := clitest.Goroutines()
	r := clitest.RunCmd(t, Run, "--auth", "--json", "--", "go", "run", "../../../../examples/goagent")
	checkEveryRulePassed(t, r)
	clitest.CheckNoLeaks(t, before)
}

// With --auth the server takes no connection without credentials: the raw
// agent started without AGENTREACH_CREDS is refused and fails register;
// the control: the same binary with it passes every rule.
func TestConformanceAuthRefusesAnAgentWithoutCredentials(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "rawagent")
	if out, err := exec.Command("go", "build", "-o", bin, "../../../../examples/rawagent").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	t.Run("without AGENTREACH_CREDS", func(t *testing.T) {
		r := clitest.RunCmd(t, Run, "--auth", "--rules", "register", "--", "sh", "-c", `unset AGENTREACH_CREDS; exec "$0"`, bin)
		if r.Code != cli.ExitFail || !strings.Contains(r.Stdout, "FAIL register") || !strings.Contains(r.Stderr, "Authorization Violation") {
			t.Fatalf("exit %d\nstdout: %s\nstderr: %s\nwant exit %d, register failed, the server's Authorization Violation in the agent's output", r.Code, r.Stdout, r.Stderr, cli.ExitFail)
		}
	})
	t.Run("with AGENTREACH_CREDS", func(t *testing.T) {
		r := clitest.RunCmd(t, Run, "--auth", "--json", "--", bin)
		checkEveryRulePassed(t, r)
	})
}

// checkEveryRulePassed checks the --json report of a run: exit 0, every
// rule passed, and the agent's output kept.
func checkEveryRulePassed(t *testing.T, r clitest.Result) {
	t.Helper()
	if r.Code != cli.ExitOK {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	var out ConformanceReport
	if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil {
		t.Fatalf("--json output does not decode: %v\n%s", err, r.Stdout)
	}
	var rules []string
	for _, res := range out.Results {
		rules = append(rules, res.Rule)
		if !res.Passed || res.Message != "" {
			t.Errorf("rule %s: passed %v, message %q", res.Rule, res.Passed, res.Message)
		}
	}
	if !out.Passed || !slices.Equal(rules, agenttest.RuleIDs()) {
		t.Fatalf("passed %v, rules %v; want every rule %v passed", out.Passed, rules, agenttest.RuleIDs())
	}
	if !strings.Contains(out.Output, "drain") {
		t.Errorf("the report does not carry the agent's output: %q", out.Output)
	}
}

func TestConformanceUsage(t *testing.T) {
	tests := []struct {
		args           []string
		stderr, stdout string
	}{
		{nil, "want the agent's command after --", ""},
		{[]string{"--", "no-such-agent-binary"}, `agent command "no-such-agent-binary"`, ""},
		{[]string{"--rules", "ack,dance", "--", "true"}, `--rules: unknown rule "dance"`, ""},
		{[]string{"--timeout", "0s", "--", "true"}, "--timeout must be positive", ""},
		{[]string{"--json", "--rules", "dance", "--", "true"}, `unknown rule "dance"`, `{"error":{"code":"USAGE","message":"--rules: unknown rule \"dance\"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			r := clitest.RunCmd(t, Run, tt.args...)
			if r.Code != cli.ExitUsage || !strings.Contains(r.Stderr, tt.stderr) || !strings.HasPrefix(r.Stdout, tt.stdout) {
				t.Fatalf("exit %d, stderr %q, stdout %q; want %d, %q and %q", r.Code, r.Stderr, r.Stdout, cli.ExitUsage, tt.stderr, tt.stdout)
			}
		})
	}
}

// The text report: one line per rule, the failure's message without its
// repeated rule prefix, and a summary naming what failed.
func TestPrintConformance(t *testing.T) {
	report := &agenttest.Report{Elapsed: 7420 * time.Millisecond, Results: []agenttest.Result{
		{Rule: "ack", Passed: true, Elapsed: 12 * time.Millisecond},
		{Rule: "busy", Passed: true, Elapsed: 400 * time.Microsecond},
		{Rule: "drain", Elapsed: 6500 * time.Millisecond,
			Message: "rule drain: no put with status draining (see docs/conformance.md#drain)"},
	}}
	var b strings.Builder
	PrintConformance(&b, report)
	want := "PASS ack 12ms\nPASS busy 400µs\nFAIL drain 6.5s: no put with status draining (see docs/conformance.md#drain)\n" +
		"1 of 3 rules failed in 7.4s: drain\n"
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
}

// A run that could not take place (here: the agent's command is not a
// program) exits 1 with the reason, with --json as the one error object.
func TestConformanceAgentDoesNotStart(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "agent")
	if err := os.WriteFile(bin, []byte("not a program\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := clitest.RunCmd(t, Run, "--json", "--", bin)
	var out cli.FailureOutput
	if r.Code != cli.ExitFail || !strings.Contains(r.Stderr, "start the agent: start "+bin) ||
		json.Unmarshal([]byte(r.Stdout), &out) != nil || out.Error == nil || !strings.Contains(out.Error.Message, bin) {
		t.Fatalf("exit %d, stderr %q, stdout %q; want %d and an error naming the agent that did not start", r.Code, r.Stderr, r.Stdout, cli.ExitFail)
	}
}
