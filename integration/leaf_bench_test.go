package integration

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/auth"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/internal/natstest"
)

// BenchmarkLeafCall measures what a leaf node costs a call: the same echo
// call, routed by a dispatcher on the hub, answered by an agent connected
// to the hub (direct) and by one connected to a leaf node server (leaf),
// alternately, with auth and TLS on. Reports each p50 and their ratio.
//
//	go test ./integration -run '^$' -bench BenchmarkLeafCall -benchtime 2000x
func BenchmarkLeafCall(b *testing.B) {
	port := natstest.FreePort(b)
	st := NewSecureLeafHub(b, time.Second, `{"rules": [{"caller": "caller", "may_call": ["echo", "direct"]}]}`, port)
	st.Identity(auth.Identity{Name: "edge-echo-1", Role: auth.RoleAgent, Type: "echo", Serves: []string{"echo"}})
	st.Identity(auth.Identity{Name: "edge-1", Role: auth.RoleLeaf, Carries: []string{"edge-echo-1"}})
	edge := st.StartLeaf("edge-1", port)
	d := st.Dispatcher(config.Config{})
	edge.Agent(agentkit.Config{ID: "edge-echo-1", Type: "echo"}, map[string]agentkit.Handler{"echo": echoHandler()})
	st.Agent(agentkit.Config{ID: "hub-direct-1", Type: "direct"}, map[string]agentkit.Handler{"direct": echoHandler()})
	WaitRoutable(b, "echo", 1, d)
	WaitRoutable(b, "direct", 1, d)
	c := st.Client()
	ctx := context.Background()
	call := func(capability string) time.Duration {
		start := time.Now()
		if _, err := c.Call(ctx, capability, echoIn{Text: "x"}); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	for range 50 { // warm-up
		call("direct")
		call("echo")
	}
	var direct, leaf []time.Duration
	b.ResetTimer()
	for range b.N {
		direct = append(direct, call("direct"))
		leaf = append(leaf, call("echo"))
	}
	b.StopTimer()
	p50 := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds())
	}
	dp, lp := p50(direct), p50(leaf)
	b.ReportMetric(dp, "direct_p50_us")
	b.ReportMetric(lp, "leaf_p50_us")
	b.ReportMetric(lp/dp, "leaf_p50_ratio")
}
