package integration

import (
	"context"
	"testing"
	"time"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/dispatcher/config"
)

type echoIn struct {
	Text string `json:"text"`
}

func echoHandler() agentkit.Handler {
	return agentkit.Typed(func(_ context.Context, _ *agentkit.Request, in echoIn) (echoIn, error) { return in, nil })
}

func TestEchoThroughDispatcher(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	a := st.Agent(agentkit.Config{Type: "echo"}, map[string]agentkit.Handler{"echo": echoHandler()})
	WaitRoutable(t, "echo", 1, d)
	c := st.Client()
	res, err := c.Call(context.Background(), "echo", echoIn{Text: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	var out echoIn
	if err := res.Decode(&out); err != nil || out.Text != "hi" {
		t.Fatalf("got %+v, %v", out, err)
	}
	if res.Node != a.ID() || res.Attempt != 1 || res.RequestID == "" || res.Status != "FINISHED" {
		t.Fatalf("metadata: %+v", res)
	}
}
