package main

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// decodeFailure decodes what a failure prints on stdout with --json,
// failing t unless stdout holds exactly one JSON object with an error code
// and message.
func decodeFailure(t *testing.T, r result) failureOutput {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	var out failureOutput
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("stdout %q holds no JSON object: %v (stderr %q)", r.stdout, err, r.stderr)
	}
	if err := dec.Decode(&json.RawMessage{}); !errors.Is(err, io.EOF) {
		t.Fatalf("stdout %q holds more than one JSON value", r.stdout)
	}
	if out.Error == nil || out.Error.Code == "" || out.Error.Message == "" {
		t.Fatalf("stdout %q: no error code and message", r.stdout)
	}
	return out
}

// TestJSONFailures checks that with --json every kind of failure of every
// command that has --json prints one JSON error object on stdout, the human
// message on stderr, and exits as without --json.
func TestJSONFailures(t *testing.T) {
	setConfirmInput(t, "", false)
	noServer := "nats://127.0.0.1:1" // nobody listens: connecting fails at once
	bare := natstest.RunServer(t).ClientURL()
	provisioned := natstest.RunServer(t)
	natstest.Provision(t, natstest.Connect(t, provisioned), streams.Topology{Memory: true})
	noDispatcher := provisioned.ClientURL()

	tests := []struct {
		name   string
		run    runFunc
		server string
		args   []string
		exit   int
		code   streams.Code
	}{
		{"call unknown flag", runCall, noServer, []string{"--json", "--no-such-flag", "echo"}, exitUsage, codeUsage},
		{"call unknown flag before --json", runCall, noServer, []string{"--no-such-flag", "--json", "echo"}, exitUsage, codeUsage},
		{"call no capability", runCall, noServer, []string{"--json"}, exitUsage, codeUsage},
		{"call bad payload", runCall, noServer, []string{"--json", "echo", "{nope"}, exitUsage, codeUsage},
		{"call missing payload file", runCall, noServer, []string{"--json", "echo", "@/nonexistent/p.json"}, exitUsage, codeUsage},
		{"call no server", runCall, noServer, []string{"--json", "echo"}, exitFail, codeConnect},
		{"call no dispatcher", runCall, noDispatcher, []string{"--json", "echo"}, exitFail, streams.CodeNoAgent},
		{"submit bad request id", runSubmit, noServer, []string{"--json", "--request-id", "a.b", "echo"}, exitUsage, codeUsage},
		{"submit no server", runSubmit, noServer, []string{"--json", "echo"}, exitFail, codeConnect},
		{"submit unprovisioned", runSubmit, bare, []string{"--json", "echo"}, exitFail, codeNotProvisioned},
		{"submit --wait unprovisioned", runSubmit, bare, []string{"--json", "--wait", "echo"}, exitFail, codeNotProvisioned},
		{"result no id", runResult, noServer, []string{"--json"}, exitUsage, codeUsage},
		{"result no server", runResult, noServer, []string{"--json", "x1"}, exitFail, codeConnect},
		{"result unprovisioned", runResult, bare, []string{"--json", "x1"}, exitFail, codeNotProvisioned},
		{"result nothing recorded", runResult, noDispatcher, []string{"--json", "x1"}, exitFail, codeNotFound},
		{"agents argument", runAgents, noServer, []string{"--json", "extra"}, exitUsage, codeUsage},
		{"agents no server", runAgents, noServer, []string{"--json"}, exitFail, codeConnect},
		{"agents unprovisioned", runAgents, bare, []string{"--json"}, exitFail, codeNotProvisioned},
		{"stats argument", runStats, noServer, []string{"--json", "extra"}, exitUsage, codeUsage},
		{"stats no server", runStats, noServer, []string{"--json"}, exitFail, codeConnect},
		{"stats no dispatcher", runStats, noDispatcher, []string{"--json", "--gather", "100ms"}, exitFail, codeNoDispatcher},
		{"breakers bad gather", runBreakers, noServer, []string{"--json", "--gather", "0s"}, exitUsage, codeUsage},
		{"breakers no dispatcher", runBreakers, noDispatcher, []string{"--json", "--gather", "100ms"}, exitFail, codeNoDispatcher},
		{"dlq unknown sub-command", runDLQ, noServer, []string{"--json", "frob"}, exitUsage, codeUsage},
		{"dlq purge without a terminal", runDLQ, noServer, []string{"--json", "purge"}, exitUsage, codeUsage},
		{"dlq no server", runDLQ, noServer, []string{"--json", "ls"}, exitFail, codeConnect},
		{"dlq unprovisioned", runDLQ, bare, []string{"--json", "ls"}, exitFail, codeNotProvisioned},
		{"dlq show missing", runDLQ, noDispatcher, []string{"--json", "show", "5"}, exitFail, codeNotFound},
		{"review resolve without a choice", runReview, noServer, []string{"--json", "resolve", "1"}, exitUsage, codeUsage},
		{"review unprovisioned", runReview, bare, []string{"--json", "ls"}, exitFail, codeNotProvisioned},
		{"review resolve missing", runReview, noDispatcher, []string{"--json", "resolve", "--drop", "9"}, exitFail, codeNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"--server", tt.server, "--timeout", "5s"}, tt.args...)
			r := runCmd(t, tt.run, args...)
			if r.code != tt.exit || r.stderr == "" {
				t.Fatalf("exit %d (want %d), stderr %q", r.code, tt.exit, r.stderr)
			}
			if e := decodeFailure(t, r); e.Error.Code != tt.code {
				t.Fatalf("code %s, want %s: %+v", e.Error.Code, tt.code, e.Error)
			}
			// The same without --json: nothing on stdout, the same exit.
			var plain []string
			for _, a := range args {
				if a != "--json" {
					plain = append(plain, a)
				}
			}
			if r := runCmd(t, tt.run, plain...); r.code != tt.exit || r.stdout != "" {
				t.Fatalf("without --json: exit %d (want %d), stdout %q", r.code, tt.exit, r.stdout)
			}
		})
	}

	t.Run("AGENTREACH_JSON", func(t *testing.T) {
		t.Setenv("AGENTREACH_JSON", "true")
		r := runCmd(t, runCall, "--server", noServer, "--no-such-flag")
		if e := decodeFailure(t, r); r.code != exitUsage || e.Error.Code != codeUsage || !strings.Contains(e.Error.Message, "no-such-flag") {
			t.Fatalf("exit %d, stdout %q", r.code, r.stdout)
		}
		r = runCmd(t, runCall, "--server", noServer, "--json=false", "--no-such-flag")
		if r.code != exitUsage || r.stdout != "" {
			t.Fatalf("--json=false: exit %d, stdout %q", r.code, r.stdout)
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
		run      runFunc
		server   string
		args     []string
		resource string
	}{
		{runDLQ, bare, []string{"ls"}, "stream REACH_DLQ does not exist on " + bare},
		{runReview, bare, []string{"ls"}, "stream REACH_REVIEW does not exist"},
		{runDLQ, bare, []string{"purge", "--yes"}, "stream REACH_DLQ does not exist"},
		{runResult, bare, []string{"x1"}, "stream REACH_RESULTS does not exist"},
		{runSubmit, bare, []string{"echo"}, "stream REACH_TASKS (capturing reach.submit.echo) does not exist"},
		{runSubmit, bare, []string{"--prefix", "other", "echo"}, "stream REACH_TASKS (capturing other.submit.echo) does not exist"},
		{runAgents, bare, nil, "bucket REACH_AGENTS does not exist"},
		{runDLQ, noJS, []string{"ls"}, "JetStream is not enabled on " + noJS + ", so stream REACH_DLQ cannot exist"},
		{runResult, noJS, []string{"x1"}, "JetStream is not enabled"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			r := runCmd(t, tt.run, append([]string{"--server", tt.server, "--timeout", "5s"}, tt.args...)...)
			if r.code != exitFail || !strings.Contains(r.stderr, tt.resource) || !strings.Contains(r.stderr, "agentreach up") ||
				strings.Contains(r.stderr, "INTERNAL") {
				t.Fatalf("exit %d, stderr %q; want %d naming %q and what provisions it", r.code, r.stderr, exitFail, tt.resource)
			}
		})
	}
}
