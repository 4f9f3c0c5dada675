package main

import (
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/clitest"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/task"
	"github.com/agent-reach/agentreach/internal/natstest"
)

// TestMain fails the package when any test leaves a goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitCallable polls each demo capability against url until its call succeeds.
func waitCallable(t *testing.T, url string, extra ...string) {
	t.Helper()
	// Every demo capability, the slow one last (it takes its delay).
	for _, c := range [][2]string{{"echo", `{"ping":true}`}, {"math.add", `{"a":1,"b":2}`}, {"slow", `{}`}} {
		args := append(append([]string{"--server", url, "--timeout", "5s"}, extra...), c[0], c[1])
		natstest.WaitFor(t, 20*time.Second, func() error {
			if r := clitest.RunCmd(t, task.RunCall, args...); r.Code != cli.ExitOK {
				return fmt.Errorf("call %s: exit %d: %s", c[0], r.Code, r.Stderr)
			}
			return nil
		})
	}
}
