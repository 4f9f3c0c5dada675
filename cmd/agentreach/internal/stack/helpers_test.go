package stack

import (
	"testing"

	"github.com/agent-reach/agentreach/cmd/agentreach/internal/clitest"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/task"
)

// waitCallable polls each demo capability against url until its call succeeds.
func waitCallable(t *testing.T, url string, extra ...string) {
	t.Helper()
	clitest.WaitCallable(t, task.RunCall, url, extra...)
}
