package integration

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/dispatcher/config"
)

// natsCLI returns the natscli binary `make test` installs (see the Makefile's
// tools target), or skips when run outside make without it.
func natsCLI(t *testing.T) string {
	t.Helper()
	path := os.Getenv("AGENTREACH_NATS_CLI")
	if path == "" {
		t.Skip("AGENTREACH_NATS_CLI not set: run `make test`, which installs natscli v0.5.0")
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("AGENTREACH_NATS_CLI=%s: %v", path, err)
	}
	return path
}

func runNats(t *testing.T, cli, url string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, cli, append([]string{"--server", url}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "XDG_CONFIG_HOME="+t.TempDir())
	out, err := cmd.Output()
	if err != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("nats %v: %v\n%s%s", args, err, out, stderr)
	}
	return string(out)
}

// The wire contract seen from the nats CLI: plain JSON in, JSON out, and a
// readable registry.
func TestNatsCLI(t *testing.T) {
	cli := natsCLI(t)
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	st.Agent(agentkit.Config{Type: "echo", ID: "echo-cli"}, map[string]agentkit.Handler{"echo": echoHandler()})
	WaitRoutable(t, "echo", 1, d)
	url := st.Server.ClientURL()

	out := runNats(t, cli, url, "req", "reach.task.echo", `{"text":"hi"}`)
	var got echoIn
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &got); err != nil || got.Text != "hi" {
		t.Fatalf("nats req printed %q (want the JSON echo): %v", out, err)
	}
	out = runNats(t, cli, url, "kv", "ls", "REACH_AGENTS")
	if !strings.Contains(out, "echo-cli") {
		t.Fatalf("nats kv ls REACH_AGENTS does not list echo-cli:\n%s", out)
	}
	out = runNats(t, cli, url, "kv", "get", "REACH_AGENTS", "echo-cli", "--raw")
	var rec map[string]any
	if err := json.Unmarshal([]byte(out), &rec); err != nil || rec["id"] != "echo-cli" {
		t.Fatalf("nats kv get printed %q: %v", out, err)
	}
	out = runNats(t, cli, url, "req", "reach.task.nothing.here", `{}`)
	if !strings.Contains(out, "NO_AGENT") {
		t.Fatalf("unknown capability via nats req: %q", out)
	}
}
