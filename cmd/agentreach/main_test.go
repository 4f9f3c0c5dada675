package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/task"
	"github.com/agent-reach/agentreach/internal/natstest"
)

// TestMain fails the package when any test leaves a goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// goroutines notes the goroutines running now, for checkNoLeaks.
func goroutines() goleak.Option { return goleak.IgnoreCurrent() }

// checkNoLeaks fails t when goroutines started since before are still
// running after a bounded wait.
func checkNoLeaks(t *testing.T, before goleak.Option) {
	t.Helper()
	natstest.WaitFor(t, 10*time.Second, func() error { return goleak.Find(before) })
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a logger.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// result is the outcome of one command run.
type result struct {
	code           int
	stdout, stderr string
}

// runCmd runs a command to completion with a bounded context.
func runCmd(t *testing.T, run cli.RunFunc, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stdout, stderr syncBuffer
	code := run(ctx, args, &stdout, &stderr)
	return result{code, stdout.String(), stderr.String()}
}

// background runs a long-running command until the test ends, then stops it
// and checks that it exits 0 within a bound. It returns the command's stderr.
func background(t *testing.T, name string, run cli.RunFunc, args ...string) *syncBuffer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stderr := new(syncBuffer)
	done := make(chan int, 1)
	go func() { done <- run(ctx, args, io.Discard, stderr) }()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != cli.ExitOK {
				t.Errorf("%s exited %d; stderr:\n%s", name, code, stderr.String())
			}
		case <-time.After(30 * time.Second):
			t.Errorf("%s did not stop within 30s", name)
		}
	})
	return stderr
}

// waitOutput polls until w holds want.
func waitOutput(t *testing.T, w *syncBuffer, want string) {
	t.Helper()
	natstest.WaitFor(t, 20*time.Second, func() error {
		if !strings.Contains(w.String(), want) {
			return fmt.Errorf("no %q in output:\n%s", want, w.String())
		}
		return nil
	})
}

// waitCallable polls each demo capability against url until its call succeeds.
func waitCallable(t *testing.T, url string, extra ...string) {
	t.Helper()
	// Every demo capability, the slow one last (it takes its delay).
	for _, c := range [][2]string{{"echo", `{"ping":true}`}, {"math.add", `{"a":1,"b":2}`}, {"slow", `{}`}} {
		args := append(append([]string{"--server", url, "--timeout", "5s"}, extra...), c[0], c[1])
		natstest.WaitFor(t, 20*time.Second, func() error {
			if r := runCmd(t, task.RunCall, args...); r.code != cli.ExitOK {
				return fmt.Errorf("call %s: exit %d: %s", c[0], r.code, r.stderr)
			}
			return nil
		})
	}
}
