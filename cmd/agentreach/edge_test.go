package main

import (
	"context"
	"testing"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/auth"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/clitest"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/inspect"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/task"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/integration"
)

// TestCommandsAtTheEdge: the commands behind a leaf node server, in the
// hub's JetStream domain (--js-domain hub), reach the hub: the caller
// edge-caller submits a durable task the agent at the edge serves and
// reads its stored result, and agents lists the edge agent (as that
// agent's identity: no caller may read the registry). The control: the
// same result read without --js-domain fails.
func TestCommandsAtTheEdge(t *testing.T) {
	st, edge := integration.NewEdgeSite(t, false)
	d := st.Dispatcher(config.Config{})
	edge.Agent(agentkit.Config{ID: "edge-echo-1", Type: "echo"}, map[string]agentkit.Handler{
		"echo": func(_ context.Context, r *agentkit.Request) (any, error) { return r.Data, nil },
	})
	integration.WaitRoutable(t, "echo", 1, d)

	at := func(identity string, args ...string) []string {
		return append([]string{"--server", edge.Server.ClientURL(), "--tls-ca", st.TLS.CA, "--tls-cert", st.TLS.ClientCert,
			"--tls-key", st.TLS.ClientKey, "--creds", st.Store.CredsFile(identity)}, args...)
	}
	clitest.Expect(t, clitest.RunCmd(t, task.RunSubmit, at("edge-caller", "--js-domain", auth.HubDomain, "--wait",
		"--request-id", "edge-order-1", "echo", `{"text":"from the edge"}`)...), cli.ExitOK, "out:from the edge")
	clitest.Expect(t, clitest.RunCmd(t, task.RunResult, at("edge-caller", "--js-domain", auth.HubDomain, "edge-order-1")...),
		cli.ExitOK, "out:from the edge")
	clitest.Expect(t, clitest.RunCmd(t, inspect.RunAgents, at("edge-echo-1", "--js-domain", auth.HubDomain)...),
		cli.ExitOK, "out:edge-echo-1")

	if r := clitest.RunCmd(t, task.RunResult, at("edge-caller", "--timeout", "2s", "edge-order-1")...); r.Code == cli.ExitOK {
		t.Fatalf("control: the result read at the edge without --js-domain: %+v", r)
	}
}
