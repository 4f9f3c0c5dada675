package main

import (
	"strings"
	"testing"

	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/clitest"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/inspect"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/task"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// TestJSONFailures checks that with --json every kind of failure of every
// command that has --json prints one JSON error object on stdout, the human
// message on stderr, and exits as without --json.
func TestJSONFailures(t *testing.T) {
	clitest.SetConfirmInput(t, "", false)
	noServer := "nats://127.0.0.1:1" // nobody listens: connecting fails at once
	bare := natstest.RunServer(t).ClientURL()
	provisioned := natstest.RunServer(t)
	natstest.Provision(t, natstest.Connect(t, provisioned), streams.Topology{Memory: true})
	noDispatcher := provisioned.ClientURL()

	tests := []struct {
		name   string
		run    cli.RunFunc
		server string
		args   []string
		exit   int
		code   streams.Code
	}{
		{"call unknown flag", task.RunCall, noServer, []string{"--json", "--no-such-flag", "echo"}, cli.ExitUsage, cli.CodeUsage},
		{"call unknown flag before --json", task.RunCall, noServer, []string{"--no-such-flag", "--json", "echo"}, cli.ExitUsage, cli.CodeUsage},
		{"call no capability", task.RunCall, noServer, []string{"--json"}, cli.ExitUsage, cli.CodeUsage},
		{"call bad payload", task.RunCall, noServer, []string{"--json", "echo", "{nope"}, cli.ExitUsage, cli.CodeUsage},
		{"call missing payload file", task.RunCall, noServer, []string{"--json", "echo", "@/nonexistent/p.json"}, cli.ExitUsage, cli.CodeUsage},
		{"call no server", task.RunCall, noServer, []string{"--json", "echo"}, cli.ExitFail, cli.CodeConnect},
		{"call no dispatcher", task.RunCall, noDispatcher, []string{"--json", "--timeout", "1s", "echo"}, cli.ExitFail, streams.CodeNoAgent},
		{"submit bad request id", task.RunSubmit, noServer, []string{"--json", "--request-id", "a.b", "echo"}, cli.ExitUsage, cli.CodeUsage},
		{"submit no server", task.RunSubmit, noServer, []string{"--json", "echo"}, cli.ExitFail, cli.CodeConnect},
		{"submit unprovisioned", task.RunSubmit, bare, []string{"--json", "echo"}, cli.ExitFail, cli.CodeNotProvisioned},
		{"submit --wait unprovisioned", task.RunSubmit, bare, []string{"--json", "--wait", "echo"}, cli.ExitFail, cli.CodeNotProvisioned},
		{"result no id", task.RunResult, noServer, []string{"--json"}, cli.ExitUsage, cli.CodeUsage},
		{"result no server", task.RunResult, noServer, []string{"--json", "x1"}, cli.ExitFail, cli.CodeConnect},
		{"result unprovisioned", task.RunResult, bare, []string{"--json", "x1"}, cli.ExitFail, cli.CodeNotProvisioned},
		{"result nothing recorded", task.RunResult, noDispatcher, []string{"--json", "x1"}, cli.ExitFail, cli.CodeNotFound},
		{"agents argument", inspect.RunAgents, noServer, []string{"--json", "extra"}, cli.ExitUsage, cli.CodeUsage},
		{"agents no server", inspect.RunAgents, noServer, []string{"--json"}, cli.ExitFail, cli.CodeConnect},
		{"agents unprovisioned", inspect.RunAgents, bare, []string{"--json"}, cli.ExitFail, cli.CodeNotProvisioned},
		{"stats argument", inspect.RunStats, noServer, []string{"--json", "extra"}, cli.ExitUsage, cli.CodeUsage},
		{"stats no server", inspect.RunStats, noServer, []string{"--json"}, cli.ExitFail, cli.CodeConnect},
		{"stats no dispatcher", inspect.RunStats, noDispatcher, []string{"--json", "--gather", "100ms"}, cli.ExitFail, cli.CodeNoDispatcher},
		{"breakers bad gather", inspect.RunBreakers, noServer, []string{"--json", "--gather", "0s"}, cli.ExitUsage, cli.CodeUsage},
		{"breakers no dispatcher", inspect.RunBreakers, noDispatcher, []string{"--json", "--gather", "100ms"}, cli.ExitFail, cli.CodeNoDispatcher},
		{"dlq unknown sub-command", task.RunDLQ, noServer, []string{"--json", "frob"}, cli.ExitUsage, cli.CodeUsage},
		{"dlq purge without a terminal", task.RunDLQ, noServer, []string{"--json", "purge"}, cli.ExitUsage, cli.CodeUsage},
		{"dlq no server", task.RunDLQ, noServer, []string{"--json", "ls"}, cli.ExitFail, cli.CodeConnect},
		{"dlq unprovisioned", task.RunDLQ, bare, []string{"--json", "ls"}, cli.ExitFail, cli.CodeNotProvisioned},
		{"dlq show missing", task.RunDLQ, noDispatcher, []string{"--json", "show", "5"}, cli.ExitFail, cli.CodeNotFound},
		{"review resolve without a choice", task.RunReview, noServer, []string{"--json", "resolve", "1"}, cli.ExitUsage, cli.CodeUsage},
		{"review unprovisioned", task.RunReview, bare, []string{"--json", "ls"}, cli.ExitFail, cli.CodeNotProvisioned},
		{"review resolve missing", task.RunReview, noDispatcher, []string{"--json", "resolve", "--drop", "9"}, cli.ExitFail, cli.CodeNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"--server", tt.server, "--timeout", "5s"}, tt.args...)
			r := clitest.RunCmd(t, tt.run, args...)
			if r.Code != tt.exit || r.Stderr == "" {
				t.Fatalf("exit %d (want %d), stderr %q", r.Code, tt.exit, r.Stderr)
			}
			if e := clitest.DecodeFailure(t, r); e.Error.Code != tt.code {
				t.Fatalf("code %s, want %s: %+v", e.Error.Code, tt.code, e.Error)
			}
			// The same without --json: nothing on stdout, the same exit.
			var plain []string
			for _, a := range args {
				if a != "--json" {
					plain = append(plain, a)
				}
			}
			if r := clitest.RunCmd(t, tt.run, plain...); r.Code != tt.exit || r.Stdout != "" {
				t.Fatalf("without --json: exit %d (want %d), stdout %q", r.Code, tt.exit, r.Stdout)
			}
		})
	}

	t.Run("AGENTREACH_JSON", func(t *testing.T) {
		t.Setenv("AGENTREACH_JSON", "true")
		r := clitest.RunCmd(t, task.RunCall, "--server", noServer, "--no-such-flag")
		if e := clitest.DecodeFailure(t, r); r.Code != cli.ExitUsage || e.Error.Code != cli.CodeUsage || !strings.Contains(e.Error.Message, "no-such-flag") {
			t.Fatalf("exit %d, stdout %q", r.Code, r.Stdout)
		}
		r = clitest.RunCmd(t, task.RunCall, "--server", noServer, "--json=false", "--no-such-flag")
		if r.Code != cli.ExitUsage || r.Stdout != "" {
			t.Fatalf("--json=false: exit %d, stdout %q", r.Code, r.Stdout)
		}
	})
}

// TestUnprovisioned checks that a server where nothing was provisioned, or
// without JetStream, gets a message naming what is missing and what
// creates it instead of a raw API error.
func TestUnprovisioned(t *testing.T) {
	bare := natstest.RunServer(t).ClientURL()
	opts := natstest.Options(t.TempDir())
	opts.JetStream = false
	noJS := natstest.RunServerWith(t, opts).ClientURL()
	tests := []struct {
		run      cli.RunFunc
		server   string
		args     []string
		resource string
	}{
		{task.RunDLQ, bare, []string{"ls"}, "stream REACH_DLQ does not exist on " + bare},
		{task.RunReview, bare, []string{"ls"}, "stream REACH_REVIEW does not exist"},
		{task.RunDLQ, bare, []string{"purge", "--yes"}, "stream REACH_DLQ does not exist"},
		{task.RunResult, bare, []string{"x1"}, "stream REACH_RESULTS does not exist"},
		{task.RunSubmit, bare, []string{"echo"}, "stream REACH_TASKS (capturing reach.submit.echo) does not exist"},
		{task.RunSubmit, bare, []string{"--prefix", "other", "echo"}, "stream REACH_TASKS (capturing other.submit.echo) does not exist"},
		{inspect.RunAgents, bare, nil, "bucket REACH_AGENTS does not exist"},
		{task.RunDLQ, noJS, []string{"ls"}, "JetStream is not enabled on " + noJS + ", so stream REACH_DLQ cannot exist"},
		{task.RunResult, noJS, []string{"x1"}, "JetStream is not enabled"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			r := clitest.RunCmd(t, tt.run, append([]string{"--server", tt.server, "--timeout", "5s"}, tt.args...)...)
			if r.Code != cli.ExitFail || !strings.Contains(r.Stderr, tt.resource) || !strings.Contains(r.Stderr, "agentreach up") ||
				strings.Contains(r.Stderr, "INTERNAL") {
				t.Fatalf("exit %d, stderr %q; want %d naming %q and what provisions it", r.Code, r.Stderr, cli.ExitFail, tt.resource)
			}
		})
	}
}
