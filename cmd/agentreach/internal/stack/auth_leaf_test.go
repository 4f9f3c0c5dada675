package stack

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/clitest"
)

// TestAuthLeaf: `auth leaf NAME --carries AGENTS` makes a leaf link
// identity and its credentials; --carries is required there and only there.
func TestAuthLeaf(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "auth")
	auth := func(args ...string) clitest.Result {
		return clitest.RunCmd(t, RunAuth, append([]string{"--dir", dir}, args...)...)
	}
	clitest.Expect(t, auth("init"), cli.ExitOK, "out:identity store made in")
	clitest.Expect(t, auth("agent", "echo-edge-1", "--type", "echo"), cli.ExitOK, "out:agent echo-edge-1")
	clitest.Expect(t, auth("leaf", "edge-1"), cli.ExitUsage, "leaf: --carries is required")
	clitest.Expect(t, auth("caller", "web", "--carries", "echo-edge-1"), cli.ExitUsage, "--carries: only for 'auth leaf'")
	clitest.Expect(t, auth("leaf", "edge-1", "--carries", "echo-edge-1,echo-edge-1"), cli.ExitUsage, `carries[1]: "echo-edge-1" is given twice`)
	clitest.Expect(t, auth("leaf", "edge-1", "--carries", "echo edge"), cli.ExitUsage, "carries[0]")
	clitest.Expect(t, auth("leaf", "edge-1", "--carries", "echo-edge-1"), cli.ExitOK,
		"out:leaf edge-1: credentials in "+filepath.Join(dir, "creds", "edge-1.creds"))
	clitest.Expect(t, auth("ls"), cli.ExitOK, "out:edge-1       leaf   -     echo-edge-1")
	clitest.Expect(t, auth("ls", "--leaf"), cli.ExitUsage, "--leaf: only for 'auth server-config'")
	clitest.Expect(t, auth("server-config", "--leaf"), cli.ExitOK, "out:operator: ", "out:AGENTREACH_ACCOUNT: \"A")
	if r := auth("server-config"); strings.Contains(r.Stdout, "AGENTREACH_ACCOUNT") {
		t.Error("the cluster's server-config names AGENTREACH_ACCOUNT, which nats-server refuses unused")
	}
}
