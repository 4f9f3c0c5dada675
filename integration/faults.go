package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

// NeverAck registers an instance that subscribes to its delivery subject and
// heartbeats but never answers: a hung process. It returns the heartbeat so
// the caller can stop it (without deregistering) to let the record expire.
func NeverAck(tb testing.TB, nc *nats.Conn, id string, hb time.Duration, caps ...string) *registry.Heartbeat {
	tb.Helper()
	sub, err := nc.SubscribeSync(streams.Subjects{}.Agent(id))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		tb.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	reg, err := registry.Open(context.Background(), js)
	if err != nil {
		tb.Fatal(err)
	}
	h, err := registry.NewHeartbeat(reg, registry.Record{ID: id, Type: "hung", Capabilities: caps,
		MaxConcurrent: 8, HeartbeatMS: hb.Milliseconds()}, zerolog.Nop())
	if err != nil {
		tb.Fatal(err)
	}
	if err := h.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = h.Stop(context.Background(), false) })
	return h
}

// Environment of a child agent process started by StartAgentProcess.
const (
	envChildURL = "AGENTREACH_TEST_CHILD_URL"
	envChildID  = "AGENTREACH_TEST_CHILD_ID"
	envChildHB  = "AGENTREACH_TEST_CHILD_HEARTBEAT"
)

// RunChildAgentIfAsked turns the test binary into an echo agent process when
// started by StartAgentProcess; call it first in TestMain. It never returns
// in the child.
func RunChildAgentIfAsked() {
	url := os.Getenv(envChildURL)
	if url == "" {
		return
	}
	hb, _ := time.ParseDuration(os.Getenv(envChildHB))
	nc, err := nats.Connect(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child agent:", err)
		os.Exit(3)
	}
	a, err := agentkit.New(nc, agentkit.Config{Type: "echo", ID: os.Getenv(envChildID), Heartbeat: hb})
	if err == nil {
		err = a.Handle("echo", func(_ context.Context, r *agentkit.Request) (any, error) { return r.Data, nil })
	}
	if err == nil {
		err = a.Run(context.Background())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "child agent:", err)
		os.Exit(4)
	}
	os.Exit(0)
}

// StartAgentProcess starts an echo agent in a child process (the test binary
// itself) and kills it when the test ends.
func StartAgentProcess(tb testing.TB, url, id string, hb time.Duration) *exec.Cmd {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChildURL+"="+url, envChildID+"="+id, envChildHB+"="+hb.String())
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}
