package integration

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/agentkit/connect"
	"github.com/agent-reach/agentreach/auth"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// The connector is an agent like any other (DESIGN §13): it runs as its
// own agent identity, and the dispatcher routes it only the capabilities
// that identity's grant covers, whatever upstream it joins.
func TestMCPConnectorRunsAsItsIdentityAndWithinItsGrant(t *testing.T) {
	st := NewSecureStack(t, time.Second, `{"rules": [{"caller": "caller", "may_call": ["gs.>", "pay.>"]}]}`)
	logs := &natstest.LogBuffer{}
	d, _ := grantDispatcher(t, st, logs)
	up := newGoUpstream(t, "a")
	httpClient := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(httpClient.CloseIdleConnections)
	run := func(id, name string) (<-chan []string, <-chan error) {
		st.Identity(auth.Identity{Name: id, Role: auth.RoleAgent, Type: "gs"}) // grant: gs and everything under it
		served := make(chan []string, 16)
		log := st.log
		c, err := connect.NewMCP(st.ConnAs(id), connect.MCPConfig{Name: name, URL: up.url(), HTTPClient: httpClient, Log: &log,
			Agent:   agentkit.Config{ID: id, Heartbeat: st.Heartbeat, DrainTimeout: 5 * time.Second},
			OnServe: func(caps []string) { served <- caps }})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done, finished := make(chan error, 1), make(chan struct{})
		go func() {
			done <- c.Run(ctx)
			close(finished)
		}()
		t.Cleanup(func() {
			cancel()
			select {
			case <-finished:
			case <-time.After(30 * time.Second):
				t.Errorf("connector %s did not stop", id)
			}
		})
		return served, done
	}
	c := st.Client(agentkit.WithJSON())

	// Control: an identity of type gs serving gs.* is routed and called.
	served, _ := run("gs-1", "gs")
	if got := nextServed(t, served); !slices.Equal(got, []string{"gs.echo"}) {
		t.Fatalf("gs-1 serves %v", got)
	}
	WaitRoutable(t, "gs.echo", 1, d)
	if got, err := callJSON(t, c, "gs.echo", `{"text":"hi"}`); err != nil || !jsonEqual(got, `{"text":"hi","server":"a"}`) {
		t.Fatalf("gs.echo as gs-1: %s, %v", got, err)
	}

	// The same identity's type, a connector named pay: its capabilities
	// are outside the grant, and so is its declaration's key: it cannot
	// register, and pay.echo is never routed.
	_, done := run("gs-2", "pay")
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "pay") {
			t.Errorf("the connector named pay as gs-2: %v, want a refusal naming pay", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the connector named pay as gs-2 is still running after 60 s")
	}
	if _, err := callJSON(t, c, "pay.echo", `{"text":"x"}`); !errors.Is(err, streams.ErrNoAgent) {
		t.Errorf("pay.echo: %v, want NO_AGENT", err)
	}
	// gs-1 serves on.
	if got, err := callJSON(t, c, "gs.echo", `{"text":"again"}`); err != nil || !jsonEqual(got, `{"text":"again","server":"a"}`) {
		t.Errorf("gs.echo as gs-1 afterwards: %s, %v", got, err)
	}
}
