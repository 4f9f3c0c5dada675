package bench

import (
	"context"
	"os"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/streams"
)

func TestTmpProfRouted(t *testing.T) {
	if os.Getenv("BENCH_PROF") == "" {
		t.Skip()
	}
	r := &run{ctx: context.Background(), rep: &Report{Figures: map[string]float64{}}, prog: newProgress(nil, "x")}
	e, err := startEnv(r.ctx, streams.Topology{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	agents, err := r.startAgents(e, "echo", "echo", 4, 1024, func(int) agentkit.Handler {
		return func(_ context.Context, req *agentkit.Request) (any, error) { return req.Data, nil }
	})
	if err != nil {
		t.Fatal(err)
	}
	defer agents.stop()
	ds, err := r.startDispatcher(e, dispatcher.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer ds.stop()
	r.waitRoutable(ds, "echo", 4)
	callers, _ := e.connectN("caller", 4)
	hdr := nats.Header{"Content-Type": []string{"application/json"}}
	build := func() *nats.Msg { return &nats.Msg{Subject: "reach.task.echo", Data: []byte(`{"a":1}`), Header: hdr} }
	c := 64
	if os.Getenv("BENCH_PROF") == "c1" {
		c = 1
	}
	f, _ := os.Create("/tmp/routed.prof")
	pprof.StartCPUProfile(f)
	l, _ := r.closedLoop(callers, closedSpec{callers: c, dur: 8 * time.Second, timeout: 2 * time.Second, build: build})
	pprof.StopCPUProfile()
	t.Log(l)
}
