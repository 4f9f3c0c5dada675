package main

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/agent-reach/agentreach/internal/natstest"
)

// TestHTTPFlag: a taken --http port stops up before anything starts,
// naming the flag; a malformed one is a usage error, for up and dispatcher.
func TestHTTPFlag(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	listen := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	r := runCmd(t, runUp, "--nats-listen", listen, "--data-dir", t.TempDir(), "--http", l.Addr().String())
	if r.code != exitFail || !strings.Contains(r.stderr, "--http "+l.Addr().String()+": cannot listen") ||
		!strings.Contains(r.stderr, "choose another with --http, or --http off") {
		t.Fatalf("taken port: exit %d, stderr %q", r.code, r.stderr)
	}
	if strings.Contains(r.stdout, "Agent-Reach is up") {
		t.Fatal("up printed its banner with its HTTP port taken")
	}
	for _, run := range []runFunc{runUp, runDispatcher} {
		for _, bad := range []string{"8080", "localhost:http", "127.0.0.1:99999"} {
			if r := runCmd(t, run, "--http", bad); r.code != exitUsage || !strings.Contains(r.stderr, "--http") {
				t.Errorf("--http %s: exit %d, stderr %q", bad, r.code, r.stderr)
			}
		}
	}
}
