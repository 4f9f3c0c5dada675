package agentkit_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// logLines decodes the JSON log lines in s that carry message msg.
func logLines(t *testing.T, s, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			continue // not a log line (the test runner's own output)
		}
		if line["message"] == msg {
			out = append(out, line)
		}
	}
	return out
}

// serveAndLeave starts an agent with opts on url's server and drains it.
func serveAndLeave(url string, opts ...agentkit.Option) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	a, err := agentkit.New(nc, agentkit.Config{Type: "logs", ID: "logs-1", MaxConcurrent: 3},
		append([]agentkit.Option{agentkit.WithoutSignals()}, opts...)...)
	if err != nil {
		return err
	}
	if err := a.Handle("logs.echo", func(_ context.Context, r *agentkit.Request) (any, error) { return r.Data, nil }); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Start(ctx); err != nil {
		return err
	}
	return a.Drain(ctx)
}

// An agent logs one line when it is registered, naming what it serves,
// and one when it leaves.
func TestAgentLogsRegisteredAndDrained(t *testing.T) {
	s := natstest.RunServer(t)
	natstest.Provision(t, natstest.Connect(t, s), streams.Topology{Heartbeat: 200 * time.Millisecond, Memory: true})
	var buf natstest.LogBuffer
	if err := serveAndLeave(s.ClientURL(), agentkit.WithLogger(zerolog.New(&buf))); err != nil {
		t.Fatal(err)
	}
	checkLifecycleLog(t, buf.String())
}

func checkLifecycleLog(t *testing.T, log string) {
	t.Helper()
	reg := logLines(t, log, "agent registered")
	if len(reg) != 1 {
		t.Fatalf("want one \"agent registered\" line, got %d in:\n%s", len(reg), log)
	}
	caps, _ := reg[0]["capabilities"].([]any)
	if reg[0]["agent"] != "logs-1" || !slices.Equal(caps, []any{"logs.echo"}) || reg[0]["max_concurrent"] != 3.0 ||
		reg[0]["heartbeat_ms"] != 200.0 || reg[0]["direct_results"] != true || reg[0]["level"] != "info" {
		t.Fatalf("registered line %v", reg[0])
	}
	drained := logLines(t, log, "agent drained")
	if len(drained) != 1 || drained[0]["agent"] != "logs-1" || drained[0]["error"] != nil {
		t.Fatalf("want one clean \"agent drained\" line for logs-1, got %v in:\n%s", drained, log)
	}
}

// envLogChild makes the test binary a child that serves and leaves with
// the default logger.
const envLogChild = "AGENTKIT_TEST_LOG_CHILD_URL"

// Without WithLogger an agent says on standard error that it is up and
// that it left; zerolog.Nop() silences it. Each runs in a child process, so
// standard error is its own.
func TestAgentLogsToStderrByDefault(t *testing.T) {
	if url := os.Getenv(envLogChild); url != "" {
		var opts []agentkit.Option
		if os.Getenv(envLogChild+"_QUIET") != "" {
			opts = append(opts, agentkit.WithLogger(zerolog.Nop()))
		}
		if err := serveAndLeave(url, opts...); err != nil {
			t.Fatal(err)
		}
		return
	}
	s := natstest.RunServer(t)
	natstest.Provision(t, natstest.Connect(t, s), streams.Topology{Heartbeat: 200 * time.Millisecond, Memory: true})
	child := func(quiet bool) string {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestAgentLogsToStderrByDefault$", "-test.count=1")
		cmd.Env = append(os.Environ(), envLogChild+"="+s.ClientURL())
		if quiet {
			cmd.Env = append(cmd.Env, envLogChild+"_QUIET=1")
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if out, err := cmd.Output(); err != nil {
			t.Fatalf("child: %v\n%s\n%s", err, out, stderr.String())
		}
		return stderr.String()
	}
	checkLifecycleLog(t, child(false))
	if quiet := child(true); len(logLines(t, quiet, "agent registered"))+len(logLines(t, quiet, "agent drained")) != 0 {
		t.Fatalf("zerolog.Nop() still logged:\n%s", quiet)
	}
}
