package clitest

import (
	"fmt"
	"testing"
	"time"

	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// StartStack runs an embedded server with the topology, and the dispatcher
// and demo commands (the functions given) against it, until the test ends;
// call is the call command, for WaitCallable. It returns the URL.
func StartStack(t *testing.T, dispatcher, demo, call cli.RunFunc) string {
	t.Helper()
	s := natstest.RunServer(t)
	natstest.Provision(t, natstest.Connect(t, s), streams.Topology{Memory: true})
	url := s.ClientURL()
	// The dispatcher provisions too: on existing resources it is a no-op.
	// Calls wait until it has started (see the report on dispatcher.Start).
	dlog := Background(t, "dispatcher", dispatcher, "--server", url)
	WaitOutput(t, dlog, "dispatcher running")
	Background(t, "demo", demo, "--server", url, "--slow-delay", "200ms", "--log-level", "warn")
	WaitCallable(t, call, url)
	return url
}

// WaitCallable polls each demo capability against url with the call
// command until its call succeeds.
func WaitCallable(t *testing.T, call cli.RunFunc, url string, extra ...string) {
	t.Helper()
	// Every demo capability, the slow one last (it takes its delay).
	for _, c := range [][2]string{{"echo", `{"ping":true}`}, {"math.add", `{"a":1,"b":2}`}, {"slow", `{}`}} {
		args := append(append([]string{"--server", url, "--timeout", "5s"}, extra...), c[0], c[1])
		natstest.WaitFor(t, 20*time.Second, func() error {
			if r := RunCmd(t, call, args...); r.Code != cli.ExitOK {
				return fmt.Errorf("call %s: exit %d: %s", c[0], r.Code, r.Stderr)
			}
			return nil
		})
	}
}
