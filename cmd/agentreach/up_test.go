package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agent-reach/agentreach/internal/natstest"
)

func TestUp(t *testing.T) {
	before := goroutines()
	dir := t.TempDir()
	listen := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	url := "nats://" + listen

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- runUp(ctx, []string{"--nats-listen", listen, "--data-dir", dir, "--demo", "--slow-delay", "100ms", "--log-level", "warn",
			"--max-payload", strconv.Itoa(4 << 20)}, &stdout, &stderr)
	}()

	waitOutput(t, &stdout, "Agent-Reach is up") // printed once everything runs
	waitCallable(t, url)
	r := runCmd(t, runCall, "--server", url, "echo", `{"text":"hi"}`)
	if r.code != exitOK || !strings.Contains(r.stdout, `"text": "hi"`) {
		t.Fatalf("call echo: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	// --max-payload raised the server's limit: 2 MiB fits.
	big := filepath.Join(t.TempDir(), "big.json")
	if err := os.WriteFile(big, []byte(`{"blob":"`+strings.Repeat("x", 2<<20)+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	r = runCmd(t, runCall, "--server", url, "--json", "echo", "@"+big)
	var out callOutput
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || r.code != exitOK || len(out.Result) < 2<<20 {
		t.Fatalf("call echo @big.json: exit %d, %d result bytes (%v), stderr %q", r.code, len(out.Result), err, r.stderr)
	}
	r = runCmd(t, runAgents, "--server", url, "--json")
	var entries []agentJSON
	if err := json.Unmarshal([]byte(r.stdout), &entries); err != nil || len(entries) != 4 {
		t.Fatalf("agents --json: exit %d, %d entries (%v), stderr %q", r.code, len(entries), err, r.stderr)
	}
	for _, want := range []string{"Agent-Reach is up", url, "agentreach call --server " + url + ` echo '{"text":"hi"}'`,
		"nats -s " + url + ` req reach.task.echo '{"text":"hi"}'`, "nats -s " + url + " kv ls REACH_AGENTS"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("banner lacks %q:\n%s", want, stdout.String())
		}
	}

	cancel()
	select {
	case code := <-done:
		if code != exitOK {
			t.Fatalf("runUp exited %d; stderr:\n%s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("runUp did not stop within 30s")
	}
	if _, err := os.Stat(filepath.Join(dir, "jetstream")); err != nil {
		t.Errorf("no JetStream store in the data dir: %v", err)
	}
	// The port is free again and nothing is left running.
	l, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatalf("port still taken after up stopped: %v", err)
	}
	l.Close()
	checkNoLeaks(t, before)
}

func TestUpPortTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r := runCmd(t, runUp, "--nats-listen", l.Addr().String(), "--data-dir", t.TempDir())
	if r.code != exitFail || !strings.Contains(r.stderr, "cannot listen on "+l.Addr().String()) {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
}
