package inspect

import (
	"testing"

	"github.com/agent-reach/agentreach/cmd/agentreach/internal/clitest"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/demo"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/stack"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/task"
)

// startStack runs an embedded server with the topology, and the dispatcher
// and demo commands against it, until the test ends. It returns the URL.
func startStack(t *testing.T) string {
	t.Helper()
	return clitest.StartStack(t, stack.RunDispatcher, demo.Run, task.RunCall)
}
