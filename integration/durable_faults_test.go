package integration

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// completed counts the results recorded so far.
func completed(t *testing.T, js jetstream.JetStream) uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, streams.StreamResults)
	if err != nil {
		return 0
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0
	}
	return info.State.Msgs
}

func waitCompleted(t *testing.T, js jetstream.JetStream, n uint64, within time.Duration) {
	t.Helper()
	natstest.WaitFor(t, within, func() error {
		if got := completed(t, js); got < n {
			return fmt.Errorf("%d of %d results", got, n)
		}
		return nil
	})
}

func settle(t *testing.T, l *Ledger, js jetstream.JetStream, within time.Duration) {
	t.Helper()
	natstest.WaitFor(t, within, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return l.Settled(ctx, js)
	})
}

// The dispatcher runs as a child process and is killed with SIGKILL twice
// during 5,000 durable tasks; every accepted task ends with exactly one
// outcome and the idempotent agents count one side effect per task.
func TestDurableSurvivesDispatcherKills(t *testing.T) {
	const tasks = 5000
	st := NewStack(t, time.Second)
	cfg := &config.Config{DurableAckWait: 2 * time.Second, Name: "child"}
	url := st.Server.ClientURL()
	child := StartChild(t, ChildDispatcher, url, "", 0, cfg)
	wnc := st.Conn()
	for i := range 2 {
		st.Agent(agentkit.Config{Type: "pay", ID: fmt.Sprintf("payer-%d", i), MaxConcurrent: 64},
			map[string]agentkit.Handler{"pay.charge": payer(wnc)})
	}
	nc := st.Conn()
	js := jsOf(t, nc)
	l := NewLedger(t, nc)
	c := st.Client()
	submitted := submitInBackground(t, l, c, tasks, true)
	for kill, at := range []uint64{tasks / 5, tasks / 2} {
		waitCompleted(t, js, at, 60*time.Second)
		if err := child.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = child.Wait()
		t.Logf("kill %d: dispatcher killed with %d results recorded", kill+1, completed(t, js))
		child = StartChild(t, ChildDispatcher, url, "", 0, cfg)
	}
	<-submitted
	settle(t, l, js, 120*time.Second)
	l.Check(t, js)
}

// 1,000 tasks submitted while no capable agent exists for 30 s wait in the
// stream and are all completed once one starts.
func TestDurableTasksWaitForAnAgent(t *testing.T) {
	const tasks = 1000
	st := NewStack(t, time.Second)
	st.Dispatcher(config.Config{})
	nc := st.Conn()
	js := jsOf(t, nc)
	l := NewLedger(t, nc)
	submitAll(t, l, st.Client(), "pay.charge", tasks)
	// For 30 s no task may end anywhere: they wait.
	quiet := time.Now().Add(30 * time.Second)
	for time.Now().Before(quiet) {
		o, err := ReadOutcomes(context.Background(), js)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(o.Completed) + len(o.DeadLettered) + len(o.InReview); n > 0 {
			t.Fatalf("%d tasks ended while no agent existed: %d dead letters, %d in review", n, len(o.DeadLettered), len(o.InReview))
		}
		select {
		case <-time.After(2 * time.Second):
		case <-t.Context().Done():
			return
		}
	}
	st.Agent(agentkit.Config{Type: "pay", ID: "late-payer", MaxConcurrent: 64}, map[string]agentkit.Handler{"pay.charge": payer(st.Conn())})
	started := time.Now()
	settle(t, l, js, 60*time.Second)
	t.Logf("all %d buffered tasks completed %v after the agent started", tasks, time.Since(started).Round(time.Millisecond))
	l.Check(t, js)
	if o, _ := ReadOutcomes(context.Background(), js); len(o.Completed) != tasks {
		t.Fatalf("%d completed", len(o.Completed))
	}
}

// A single server with a file store restarted mid-run loses no accepted task.
func TestDurableSurvivesServerRestart(t *testing.T) {
	const tasks = 2000
	opts := natstest.Options(t.TempDir())
	opts.Port = natstest.FreePort(t) // the same after the restart
	s, err := natstest.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	var current *server.Server = s
	t.Cleanup(func() { natstest.Stop(current) })
	js, l, c := durableRig(t, s.ClientURL(), streams.Topology{Heartbeat: time.Second}) // file storage
	submitted := submitInBackground(t, l, c, tasks, false)                             // refused while the server is down
	waitCompleted(t, js, tasks/4, 60*time.Second)
	natstest.Stop(current)
	t.Logf("server stopped with %d accepted", l.Accepted())
	if current, err = natstest.Start(opts); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	<-submitted
	settle(t, l, js, 120*time.Second)
	t.Logf("every accepted task had its outcome %v after the restart", time.Since(restarted).Round(time.Millisecond))
	l.Check(t, js)
}

// A 3-node JetStream cluster with R3 streams loses no accepted task when one
// node is shut down mid-run.
func TestDurableSurvivesNodeLoss(t *testing.T) {
	const tasks = 2000
	nodes := natstest.RunCluster(t, 3)
	js, l, c := durableRig(t, natstest.ClusterURL(nodes), streams.Topology{Heartbeat: time.Second, Replicas: 3})
	submitted := submitInBackground(t, l, c, tasks, false)
	waitCompleted(t, js, tasks/4, 60*time.Second)
	natstest.Stop(nodes[1])
	t.Logf("node n2 shut down with %d accepted", l.Accepted())
	<-submitted
	settle(t, l, js, 120*time.Second)
	l.Check(t, js)
}

// submitInBackground submits n pay.charge tasks and closes the returned
// channel when done. With strict, a refused submission fails the test;
// otherwise the ledger simply does not count it as accepted.
func submitInBackground(t *testing.T, l *Ledger, c *agentkit.Client, n int, strict bool) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if err := l.Submit(ctx, c, "pay.charge", map[string]int{"n": i}); err != nil && strict {
				t.Errorf("submit %d: %v", i, err)
			}
			cancel()
		}
	}()
	return done
}

// durableRig provisions topo on the server(s) at url and runs a dispatcher
// and an idempotent payer agent on connections that reconnect forever, as a
// production deployment would. It returns a JetStream handle, a ledger and a
// client for submissions.
func durableRig(t *testing.T, url string, topo streams.Topology) (jetstream.JetStream, *Ledger, *agentkit.Client) {
	t.Helper()
	connect := func() *nats.Conn {
		nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	natstest.Provision(t, connect(), topo)
	d, err := dispatcher.New(connect(), config.Config{DurableAckWait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	a, err := agentkit.New(connect(), agentkit.Config{Type: "pay", ID: "payer", MaxConcurrent: 64, Heartbeat: topo.Heartbeat},
		agentkit.WithoutSignals())
	if err != nil {
		t.Fatal(err)
	}
	_ = a.Handle("pay.charge", payer(connect()))
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Drain(context.Background()) })
	nc := connect()
	c, err := agentkit.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	return jsOf(t, nc), NewLedger(t, nc), c
}
